"""Tuned schedules per device (benchmarks/gpu/schedules/tuned/<slug>/), without a GPU: the slug
of a device's name, the lookup order of the `dt` provider's schedule (the device's own tuned
file, else one of another device of its architecture, else cases.py's table, else the kernel's
example), what a benchmark record says of it and how the report shows it, and where tune.py
files its winners."""
import json
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="the GPU benchmark harness needs torch (pip install -e '.[triton]')")

GPU_DIR = Path(__file__).resolve().parent.parent / "gpu"
sys.path.insert(0, str(GPU_DIR))

import bench  # noqa: E402
import cases  # noqa: E402
import devices  # noqa: E402
import render  # noqa: E402
import run_to_run  # noqa: E402
import space  # noqa: E402
import tune  # noqa: E402

H100 = "NVIDIA H100 80GB HBM3"


@pytest.mark.parametrize("name, slug", [
    (H100, "h100"), ("NVIDIA H200", "h200"), ("NVIDIA H100 PCIe", "h100-pcie"), ("NVIDIA H100 NVL", "h100-nvl"),
    ("NVIDIA H200 NVL", "h200-nvl"), ("NVIDIA GH200 480GB", "gh200"), ("NVIDIA A100-SXM4-80GB", "a100"),
    ("NVIDIA A100-PCIE-40GB", "a100-pcie"), ("NVIDIA A100 80GB PCIe", "a100-pcie"), ("Tesla V100-SXM2-16GB", "v100"),
    ("Tesla T4", "t4"), ("NVIDIA A10G", "a10g"), ("NVIDIA L40S", "l40s"), ("NVIDIA B200", "b200"),
    ("NVIDIA GeForce RTX 4090", "rtx4090"), ("NVIDIA GeForce RTX 3090 Ti", "rtx3090ti"),
    ("NVIDIA RTX A6000", "rtxa6000"), ("NVIDIA RTX 6000 Ada Generation", "rtx6000ada"),
    ("AMD Instinct MI300X", "mi300x"), ("  ", "gpu"), ("GPU", "gpu"),
])
def test_a_device_name_is_slugged_to_its_model(name, slug):
    assert devices.slug(name) == slug
    assert devices.SLUG.fullmatch(slug) and devices.slug(slug) == slug  # a slug is its own slug


def test_a_slug_or_a_name_names_a_device_and_its_architecture():
    assert devices.Device.named("h200") == devices.Device("h200", "sm_90")
    assert devices.Device.named("NVIDIA H200") == devices.Device("h200", "sm_90")  # a name as torch spells it
    assert devices.Device.named("a100") == devices.Device("a100", "sm_80")
    assert devices.Device.named("my-gpu") == devices.Device("my-gpu", None)  # unknown: no architecture
    assert devices.arch((9, 0)) == "sm_90" and devices.arch((10, 3)) == "sm_103"
    assert devices.ARCH["h100"] == devices.ARCH["h200"]  # the H200 borrows the H100's tunes
    assert bench.parse_args(["--out", "o", "--device-slug", "NVIDIA H200"]).device_slug == "h200"


def _live(monkeypatch, name=None, capability=(9, 0)):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: name is not None)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: name)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: capability)


def test_the_current_device_is_the_override_else_the_live_gpu_else_the_cpu(monkeypatch):
    _live(monkeypatch, None)
    assert devices.current() == devices.Device("cpu")
    assert devices.current("h200") == devices.Device("h200", "sm_90")
    _live(monkeypatch, H100)
    assert devices.current() == devices.Device("h100", "sm_90")
    assert devices.current("h200") == devices.Device("h200", "sm_90")
    _live(monkeypatch, "NVIDIA H30", (9, 0))  # a device ARCH lacks: the live compute capability
    assert devices.current() == devices.Device("h30", "sm_90")
    assert devices.current("h30") == devices.Device("h30", "sm_90")
    assert devices.current("h40") == devices.Device("h40", None)  # not this GPU, not in ARCH: unknown


# ----------------------------------------------------------------------- the lookup order
ROW = ("softmax_safe", (4096, 4096), "bf16")


def _case(kernel, shape, dtype):
    k = cases.KERNELS[kernel]
    return cases.Case(k, shape, dtype, k.extents(shape))


@pytest.fixture
def tuned(tmp_path, monkeypatch):
    """An empty TUNED_DIR; tuned(slug, (kernel, shape, dtype)) files a schedule there."""
    monkeypatch.setattr(cases, "TUNED_DIR", tmp_path / "tuned")

    def put(slug, row=ROW):
        case = _case(*row)
        path = tmp_path / "tuned" / slug / cases.tuned_name(case.kernel.name, case.shape_text, case.dtype)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(case.kernel.program.read_text())
        return path
    return put


def test_a_device_runs_its_own_tuned_schedule_first(tuned):
    case = _case(*ROW)
    tuned("h100")
    own = tuned("h200")
    assert cases.schedule_choice(case, device="h200") == cases.ScheduleChoice(own, cases.TUNED, "h200")
    assert cases.schedule_for(case, device=devices.Device("h200", "sm_90")) == own
    override = {"softmax_safe:x=4096, y=4096:bf16": "/x/y.dt"}  # --schedule before any tuned file
    assert cases.schedule_choice(case, override, device="h200") == cases.ScheduleChoice(Path("/x/y.dt"), cases.OVERRIDE)


def test_without_its_own_a_device_runs_the_tuned_schedule_of_one_of_its_architecture(tuned):
    case = _case(*ROW)
    h100 = tuned("h100")
    tuned("h100-pcie")
    tuned("a100")
    # the first same-architecture device by slug: h100 before h100-pcie; never the A100's (sm_80)
    assert cases.schedule_choice(case, device="h200") == cases.ScheduleChoice(h100, cases.FALLBACK, "h100")
    assert cases.schedule_choice(case, device="gh200").path == h100
    # a live device ARCH lacks borrows by its compute capability
    assert cases.schedule_choice(case, device=devices.Device("h30", "sm_90")).origin == cases.FALLBACK
    assert cases.tuned_devices() == ["a100", "h100", "h100-pcie"]


def test_without_a_tuned_schedule_of_its_architecture_a_device_runs_the_table(tuned):
    row = ("softmax", (4096, 4096), "bf16")
    case = _case(*row)
    tuned("h100", row)
    table = cases.ROOT / "benchmarks/gpu/schedules/softmax_row.dt"  # SCHEDULES' row of softmax
    for device in ("b200", "a100", "my-gpu", devices.Device("h30")):  # another architecture, or unknown
        assert cases.schedule_choice(case, device=device) == cases.ScheduleChoice(table, cases.TABLE)
    other = _case("softmax", (4096, 8192), "bf16")  # a row the H100 has no tuned file for
    assert cases.schedule_choice(other, device="h200") == cases.ScheduleChoice(table, cases.TABLE)
    kernel = next(k for k in cases.KERNELS.values() if not any(row[0] == k.name for row in cases.SCHEDULES))
    untabled = cases.Case(kernel, kernel.shapes[0], kernel.dtypes[0], kernel.extents(kernel.shapes[0]))
    tuned("h100", (kernel.name, kernel.shapes[0], kernel.dtypes[0]))  # another architecture's tune: not taken
    assert cases.schedule_choice(untabled, device="a100") == cases.ScheduleChoice(kernel.program, cases.EXAMPLE)


def test_each_committed_tuned_schedule_names_the_device_it_was_searched_on():
    """Each folder's files name their device in the header; an H200 runs its own where it has them
    and borrows the H100's elsewhere."""
    names = {"h100": H100, "h200": "NVIDIA H200"}
    assert set(cases.tuned_devices()) == set(names)
    assert len(list((cases.TUNED_DIR / "h100").glob("*.dt"))) > 50
    assert not list(cases.TUNED_DIR.glob("*.dt"))  # none left outside a device's folder
    for slug, name in names.items():
        files = sorted((cases.TUNED_DIR / slug).glob("*.dt"))
        assert files and all(f"on {name}" in " ".join(f.read_text().splitlines()[:6]) for f in files)
    assert cases.schedule_choice(_case("softmax_safe", (4096, 4096), "bf16"), device="h200").origin == cases.TUNED
    assert cases.schedule_choice(_case("softmax_safe", (4096, 4096), "f32"), device="h200").origin == cases.FALLBACK


# ----------------------------------------------------------------------- records and reports
def test_a_dry_run_records_the_tuned_schedule_it_ran_and_whether_it_was_a_fallback(tmp_path, tuned):
    tiny = ("softmax", (8, 256), "f32")
    h100 = tuned("h100", tiny)

    def run(tag, *extra):
        argv = ["--dry-run", "--out", str(tmp_path), "--tag", tag, "--kernels", "softmax", "--dtypes", "f32",
                "--match", "softmax [x=8, y=256]", "--providers", "dt,eager", "--no-plots", *extra]
        assert bench.main(argv) == 0
        doc = json.loads((tmp_path / f"gpu-{tag}.json").read_text())
        return doc, (tmp_path / f"gpu-{tag}.md").read_text()

    doc, md = run("h200", "--device-slug", "h200")
    (run_info,), (dt_rec,) = doc["runs"], [r for r in doc["records"] if r["provider"] == "dt"]
    assert run_info["device_slug"] == "h200" and run_info["device_arch"] == "sm_90"
    assert dt_rec["status"] == "ok" and dt_rec["schedule"] == str(h100) and dt_rec["schedule_origin"] == "fallback"
    assert "| h100/softmax_8x256_f32 (fallback) |" in md and f"| {h100} (fallback) |" in md

    doc, md = run("h100", "--device-slug", "h100")
    (dt_rec,) = [r for r in doc["records"] if r["provider"] == "dt"]
    assert dt_rec["schedule_origin"] == "tuned" and "| h100/softmax_8x256_f32 |" in md and "(fallback)" not in md

    doc, _ = run("cpu")  # a dry run without --device-slug: the CPU has no tuned schedules
    (dt_rec,) = [r for r in doc["records"] if r["provider"] == "dt"]
    assert doc["runs"][0]["device_slug"] == "cpu" and dt_rec["schedule_origin"] == "table"
    assert dt_rec["schedule"] == "benchmarks/gpu/schedules/softmax_row.dt"

    doc, _ = run("contender", "--device-slug", "h200", "--contender",
                 f"softmax={cases.ROOT / 'benchmarks/gpu/schedules/softmax_tiled.dt'}")
    assert {r["provider"]: r["schedule_origin"] for r in doc["records"] if "schedule" in r} == {
        "dt": "fallback", "dt@softmax_tiled": "candidate"}


def test_the_list_names_each_rows_schedule_and_why(tmp_path, tuned, capsys):
    tuned("h100", ("softmax", (8, 256), "f32"))
    assert bench.main(["--dry-run", "--out", str(tmp_path), "--list", "--kernels", "softmax", "--dtypes", "f32",
                       "--device-slug", "h200"]) == 0
    out = capsys.readouterr().out
    assert "tuned schedules of h200 (sm_90)" in out
    assert "h100/softmax_8x256_f32.dt (fallback)" in out and "softmax_row.dt (table)" in out


def test_the_report_names_a_tuned_schedule_by_its_device_and_marks_a_fallback():
    label = render.schedule_label
    assert label({"schedule": "benchmarks/gpu/schedules/tuned/add_4096x8192_bf16.dt"}) == "add_4096x8192_bf16"  # old runs
    assert label({"schedule": "benchmarks/gpu/schedules/tuned/h200/add_4096x8192_bf16.dt",
                  "schedule_origin": "tuned"}) == "h200/add_4096x8192_bf16"
    assert label({"schedule": "benchmarks/gpu/schedules/tuned/h100/add_4096x8192_bf16.dt",
                  "schedule_origin": "fallback"}) == "h100/add_4096x8192_bf16 (fallback)"
    assert label({"schedule": "benchmarks/gpu/schedules/add_1024.dt", "schedule_origin": "table"}) == "add_1024"
    assert label({}) == ""
    rec = {"run": "r@2026-01-01T00:00:00Z", "device": "NVIDIA H200", "timer": "cold", "kernel": "add",
           "shape": "x=4096, y=8192", "dtype": "bf16", "provider": "dt", "status": "ok", "ms": 1.0, "ms_runs": [1.0],
           "schedule": "benchmarks/gpu/schedules/tuned/h100/add_4096x8192_bf16.dt", "schedule_origin": "fallback",
           "speedup_vs_best": 1.0, "best_baseline": "eager", "speedup_range": None}
    (row,) = run_to_run.summary([rec])
    assert row["schedule"] == "h100/add_4096x8192_bf16 (fallback)"
    assert "schedule_origin" in run_to_run.FIELDS


# ----------------------------------------------------------------------- tune.py
def _search(device, best, *, slug=None, row=None):
    """A tune.py search's JSON on `device` of softmax f32 4096 x 1000 whose winner is space.py's `best`-th."""
    case = next(c for c in cases.cases(["softmax"], ["f32"]) if c.shape == (4096, 1000))
    name, text = space.variants(case)[best]
    doc = {"device": device, "torch": "x", "rows": [row or {
        "kernel": "softmax", "shape": case.shape_text, "dtype": "f32", "bytes": 1, "flops": None, "timer": "cold",
        "variants": [{"name": name, "ms": 0.01}], "best": name, "best_source": text}]}
    return dict(doc, device_slug=slug) if slug else doc, text


def test_tune_files_each_devices_winners_in_its_folder(tmp_path, monkeypatch):
    monkeypatch.setattr(tune, "TUNED_DIR", tmp_path / "tuned")
    monkeypatch.setattr(tune, "RESULTS", tmp_path / "results")
    file = "softmax_4096x1000_f32.dt"
    other = tmp_path / "tuned" / "a100" / file  # a device these runs did not search: left alone
    other.parent.mkdir(parents=True)
    other.write_text("kept")
    h100, h100_text = _search(H100, 0)
    h200, h200_text = _search("NVIDIA H200", 1)
    named, named_text = _search("NVIDIA H200", 2, slug="h200-test")  # searched with --device-slug h200-test
    paths = []
    for i, doc in enumerate((h100, h200, named)):
        paths.append(tmp_path / f"tune-{i}.json")
        paths[-1].write_text(json.dumps(doc))
    assert tune.main(["--write", *map(str, paths)]) == 0
    assert (tmp_path / "tuned" / "h100" / file).read_text().endswith(h100_text)
    assert (tmp_path / "tuned" / "h200" / file).read_text().endswith(h200_text)
    assert (tmp_path / "tuned" / "h200-test" / file).read_text().endswith(named_text)
    assert other.read_text() == "kept"
    table = (tmp_path / "results" / "tune.md").read_text()
    assert f"| {H100} | cold |" in table and "| h100/softmax_4096x1000_f32.dt |" in table
    assert "| h200/softmax_4096x1000_f32.dt |" in table and "| h200-test/softmax_4096x1000_f32.dt |" in table
    merged = json.loads((tmp_path / "results" / "tune.json").read_text())
    assert [tune.row_slug(r) for r in merged["rows"]] == ["h100", "h200", "h200-test"]  # a row per device
    with pytest.raises(SystemExit):  # --write files rows by the device they were searched on
        tune.main(["--write", str(paths[0]), "--device-slug", "h200"])

    # a later --write of the merged runs keeps the `# allow:` lines added by hand to a schedule it writes again
    allowed = (tmp_path / "tuned" / "h100" / file)
    lines = allowed.read_text().splitlines(keepends=True)
    allowed.write_text("".join(lines[:2] + ["# allow: recomputed -- measured\n"] + lines[2:]))
    kept = allowed.read_text()
    assert tune.main(["--write", str(tmp_path / "results" / "tune.json")]) == 0
    assert allowed.read_text() == kept
    newer, newer_text = _search(H100, 3)  # a new winner: the lines went with the schedule they were about
    paths[0].write_text(json.dumps(newer))
    assert tune.main(["--write", str(tmp_path / "results" / "tune.json"), str(paths[0])]) == 0
    assert allowed.read_text().endswith(newer_text) and "# allow:" not in allowed.read_text()


def test_tune_choose_asks_whose_row_when_several_devices_searched_it(tmp_path, monkeypatch):
    monkeypatch.setattr(tune, "TUNED_DIR", tmp_path / "tuned")
    monkeypatch.setattr(tune, "RESULTS", tmp_path / "results")
    case = next(c for c in cases.cases(["softmax"], ["f32"]) if c.shape == (4096, 1000))
    (picked, picked_text), (chosen, chosen_text) = space.variants(case)[:2]
    row = {"kernel": "softmax", "shape": case.shape_text, "dtype": "f32", "bytes": 1, "flops": None, "timer": "cold",
           "variants": [{"name": picked, "ms": 0.01}, {"name": chosen, "ms": 0.011}], "best": picked,
           "best_source": picked_text}
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "tune.json").write_text(json.dumps({"runs": [], "rows": [
        dict(row, device=H100), dict(row, device="NVIDIA H200")]}))
    title = "softmax [x=4096, y=1000] f32"
    with pytest.raises(SystemExit, match="searched on h100, h200: say whose row with --device-slug"):
        tune.main(["--choose", title, chosen, "E"])
    with pytest.raises(SystemExit, match="no search of .* on a100"):
        tune.main(["--choose", title, chosen, "E", "--device-slug", "a100"])
    assert tune.main(["--choose", title, chosen, "it won the run-off", "--device-slug", "h200"]) == 0
    file = cases.tuned_name("softmax", case.shape_text, "f32")
    assert (tmp_path / "tuned" / "h200" / file).read_text().endswith(chosen_text)
    assert (tmp_path / "tuned" / "h100" / file).read_text().endswith(picked_text)
