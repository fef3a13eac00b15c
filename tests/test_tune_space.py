"""The space of a program's schedules (dt.tune.space): every kept schedule is legal and computes
what the algorithm says, the statements it does not choose stay as written, and dt's
performance warnings prune it. The search over it (dt.tune.search, `dt tune`): every correct
schedule timed within the budget, wrong ones caught, the fastest written as DT text."""
import functools
import glob
import os
import re
import signal
import warnings
from pathlib import Path

import numpy as np
import pytest

import dt
from dt.testing import assert_close, random_inputs
from dt.tune.space import PRUNED
from example_sizes import SIZES, example_path

ROOT = Path(__file__).resolve().parents[1]


@functools.lru_cache(maxsize=None)
def _space(name: str, sizes: tuple, dtype: str):
    return dt.load(ROOT / "examples" / f"{name}.dt").space(dict(sizes), dtype)


def shared_space(name: str, sizes: dict, dtype: str):
    """examples/<name>.dt's space, computed once in a process for every test that reads it (at 4096
    a side, tens of seconds: those tests are marked slow, so they start first, in one worker's
    share under the README's `pytest -n 2 --dist worksteal`)."""
    return _space(name, tuple(sorted(sizes.items())), dtype)


@pytest.fixture(autouse=True)
def tuning_cache(tmp_path, monkeypatch):
    """Each test its own tuning cache."""
    monkeypatch.setenv("DT_TUNE_CACHE", str(tmp_path / "tuned"))
    return tmp_path / "tuned"


SMALL = {"softmax_safe": dict(x=5, y=300), "matmul": dict(x=40, y=72, k=48), "add": dict(x=3, y=130),
         "layernorm": dict(x=5, y=300), "attention_safe_onepass": dict(m=33, l=40, k=16, n=16),
         "2mm_inner": dict(m=40, n=36, k=16, l=24)}


@pytest.mark.parametrize("name", [name if name == "add" else pytest.param(name, marks=pytest.mark.slow)
                                  for name in sorted(SMALL)])
def test_every_schedule_of_the_space_is_legal_and_right(name):
    prog = dt.load(ROOT / "examples" / f"{name}.dt")
    space = prog.space(SMALL[name], "f32")
    assert len(space) > 0 and space.generated == len(space) + space.illegal + space.removed
    args = random_inputs(prog, SMALL[name], "f32", seed=1)
    expected = prog.reference(**args)
    computed = set()
    for candidate in space:
        program = dt.loads(candidate.text, name=name)
        # warps, stages and cache hints are a GPU's, which the interpreter does not read: each schedule
        # that differs in anything else is run (64 of attention_safe_onepass's 576)
        computes = tuple(choice for choice in candidate.choices
                         if not choice[0].endswith((".warps", ".stages", ".cache")))
        if computes not in computed:
            computed.add(computes)
            assert_close(program(backend="interp", **args), expected, "f32")


@pytest.mark.slow
def test_the_space_keeps_what_it_does_not_choose():
    space = shared_space("softmax_safe", dict(x=4096, y=4096), "bf16")
    names = [c.name for c in space]
    assert len(set(names)) == len(names)
    for c in space:
        assert "_max.fuse_at(_softmax, x);" in c.text and "_sum.fuse_at(_softmax, x);" in c.text
        # the online softmax, or its two walks (fusion is chosen where an alternative exists)
        assert ("_sum.compute_with(_max, y);" in c.text) == ("_sum:alone" not in c.name)
        # the example's own block, tiles and warps are gone, the candidate's are there once
        assert "_softmax.num_warps(8);\n_softmax.compile" not in c.text
        assert c.text.count("_softmax.num_warps(") == 1 and c.text.count("_softmax.tensorize(") <= 1
    assert any(" y*/1024 " in c.name for c in space)  # one program walking a whole row in tiles
    assert any(c.name.endswith("; fusion: _sum:alone") for c in space)


def test_the_space_chooses_fusion_where_there_is_an_alternative():
    attention = dt.load(ROOT / "examples" / "attention_safe.dt").space(dict(m=64, l=64, k=16, n=16), "f32",
                                                                      backend="interp")
    labels = {dict(c.choices).get("fusion.sm.fuse_at") for c in attention}
    assert labels == {"", "sm:inline"}  # an element-wise producer fused at a loop: inlined instead
    layernorm = dt.load(ROOT / "examples" / "layernorm.dt").space(dict(x=8, y=300), "f32", backend="interp")
    added = [c for c in layernorm if "compute_with" in c.text]
    assert added and all("variance.compute_with(mean, y);" in c.text for c in added)  # one walk for both
    assert not any("compute_with" in c.text or "inline" in c.text
                   for c in dt.load(ROOT / "examples" / "2mm_inner.dt").space(dict(m=40, n=36, k=16, l=24), "f32",
                                                                               backend="interp"))


@pytest.mark.slow
def test_performance_warnings_prune_the_space():
    prog = dt.load(ROOT / "examples" / "matmul.dt")
    sizes = dict(x=4096, y=4096, k=4096)
    space = shared_space("matmul", sizes, "bf16")
    assert space.removed and space.pruned["registers"] and not space.everywhere
    for c in space.candidates[::25]:
        assert not {w.code for w in dt.loads(c.text).lint(sizes, "bf16")} & PRUNED
    assert "pruned by performance warnings or shared memory (" in space.summary()
    assert space.pruned["shared-memory"] > 0  # 128x256 tiles 64 deep in 5 stages: 327,680 bytes
    assert len(prog.space(sizes, "bf16", limit=10).candidates) <= 10


def test_a_warning_every_schedule_raises_prunes_nothing():
    # float32 products run in IEEE precision off the matrix units whatever the schedule: the
    # dtype's warning, not a schedule's (a seeded sample of 300 of the space's 2,052 points shows it)
    space = dt.load(ROOT / "examples" / "matmul.dt").space(dict(x=512, y=512, k=512), "f32", limit=300)
    assert len(space) > 0 and [code for code, _ in space.everywhere] == ["not-on-matrix-units"]
    assert "IEEE precision" in space.everywhere[0][1]


def test_a_product_with_one_output_dimension_has_a_space():
    prog = dt.loads("Func mv; In A, v; Var x; RVar k;\nmv[x] = rdot(A[x, k], v[k], k);\nmv.compile();\n", name="mv")
    space = prog.space(dict(x=512, k=1024), "bf16")
    assert len(space) > 0 and any(dict(c.choices)["mv.k"] == "k256" for c in space)  # deep tiles: one row wide
    args = random_inputs(prog, dict(x=40, k=100), "f32")
    for c in prog.space(dict(x=40, k=100), "f32", backend="interp"):
        assert_close(dt.loads(c.text)(backend="interp", **args), prog.reference(**args), "f32")


def test_attention_keys_get_the_deep_tiles_a_many_row_products_reduction_does_not():
    """128-key tiles, as 10 of the 16 forward attention schedules committed for the H100 have, though
    the queries are many: the keys are the scores' columns as well as the second product's reduction."""
    from dt.tune.space import _choices, _key_dims
    attention = dt.load(ROOT / "examples" / "attention_safe_onepass.dt")
    root = attention.checked.kernel_roots[-1]
    assert _key_dims(attention.checked, root) == {"l"}
    ways, _ = _choices(attention.checked, root, dict(m=4096, l=4096, k=64, n=64), True)
    assert {label for way in ways for slot, label, _ in way if slot == "l"} == {"l32", "l64", "l128"}
    matmul = dt.load(ROOT / "examples" / "matmul.dt")
    assert _key_dims(matmul.checked, "mm") == set()
    ways, _ = _choices(matmul.checked, "mm", dict(x=4096, y=4096, k=4096), True)
    assert {label for way in ways for slot, label, _ in way if slot == "k"} == {"k32", "k64"}


def test_chained_products_get_the_two_stage_ring_of_hoppers_gluon_twins():
    """Attention's twin on Hopper is fastest with a ring of 2 slots (two programs a multiprocessor;
    causal 4x16x4096, d=128: 0.57 ms against the best of 370 three-to-five-stage schedules a
    search timed, 0.71 ms, on an H200): chained products are offered 2-4 stages, a lone product
    Triton's 3-5."""
    from dt.tune.space import _choices
    attention = dt.load(ROOT / "examples" / "llm" / "causal_mha.dt")
    root = attention.checked.kernel_roots[-1]
    ways, _ = _choices(attention.checked, root, dict(b=4, h=16, m=4096, l=4096, k=128, n=128), True)
    assert {label for way in ways for slot, label, _ in way if slot == "stages"} == {"s2", "s3", "s4"}
    for hopper in ({("m", "m64"), ("l", "l64"), ("warps", "w4"), ("stages", "s2")},  # one warpgroup
                   {("m", "m128"), ("l", "l128"), ("warps", "w8"), ("stages", "s2")}):  # warp-specialised
        assert any(hopper <= {(slot, label) for slot, label, _ in way} for way in ways)
    matmul = dt.load(ROOT / "examples" / "matmul.dt")
    ways, _ = _choices(matmul.checked, "mm", dict(x=4096, y=4096, k=4096), True)
    assert {label for way in ways for slot, label, _ in way if slot == "stages"} == {"s3", "s4", "s5"}


def test_a_batched_kernel_is_offered_one_heads_blocks_in_consecutive_programs():
    """map(b, h, m): the query blocks of one head run in consecutive programs and share its K and V
    in L2 (every attention schedule as written). Without it, a search's best attention schedule
    ran 0.60 ms where the same schedule with it runs 0.50 (causal 4x16x4096, d=128, an H200)."""
    from dt.tune.space import _choices
    attention = dt.load(ROOT / "examples" / "llm" / "causal_mha.dt")
    root = attention.checked.kernel_roots[-1]
    ways, _ = _choices(attention.checked, root, dict(b=4, h=16, m=4096, l=4096, k=128, n=128), True)
    orders = {(label, text) for way in ways for slot, label, text in way if slot == "map"}
    assert orders == {("", ""), ("rowmajor", f"{root}.map(b, h, m);\n")}


def test_the_second_products_columns_are_whole_where_they_fit():
    """A block of attention's head dimension would compute the scores and their softmax again in
    each program along it (on an H200, causal 4x16x4096, d=128: the fastest of 370 schedules a
    search timed with 64-wide blocks 1.10 ms, with the whole head 0.71 ms): the head is whole up
    to 256 where it is a power of two, blocked beyond (no tile holds more) and where a whole tile
    would be padded (2mm_inner's 36 columns)."""
    from dt.tune.space import _choices
    attention = dt.load(ROOT / "examples" / "llm" / "causal_mha.dt")
    root = attention.checked.kernel_roots[-1]
    sizes = dict(b=4, h=16, m=4096, l=4096, k=128, n=128)
    ways, _ = _choices(attention.checked, root, sizes, True)
    assert {label for way in ways for slot, label, _ in way if slot == "n"} == {"n*"}
    assert {label for way in ways for slot, label, _ in way if slot == "m"} >= {"m64", "m128"}
    for n in (512, 96):
        ways, _ = _choices(attention.checked, root, dict(sizes, n=n, k=n), True)
        assert "n64" in {label for way in ways for slot, label, _ in way if slot == "n"}


def test_a_space_larger_than_the_limit_is_sampled_whole():
    prog = dt.load(ROOT / "examples" / "matmul.dt")
    sizes = dict(x=4096, y=4096, k=4096)
    sample = prog.space(sizes, "bf16", limit=200)
    assert sample.generated == 200
    blocks = {dict(c.choices)["mm.x"] for c in sample}
    assert {"x16", "x256"} <= blocks  # both ends of the first slot: not the first corner of the product


@pytest.mark.slow
def test_the_space_of_a_product_holds_program_orders_and_launch_hints():
    space = shared_space("matmul", dict(x=4096, y=4096, k=4096), "bf16")
    names = {c.name for c in space}
    # the schedule committed for this row (benchmarks/gpu/schedules/tuned), found by hand-written spaces
    assert "mm: x128 y256 k64 grouped8 w8 s3 persistent+tma" in names
    assert "mm: x128 y256 k64 rowmajor w8 s4" in names
    best = next(c for c in space if c.name == "mm: x128 y256 k64 grouped8 w8 s3 persistent+tma")
    assert "mm.map(x:x1/8, y, x1);" in best.text and "mm.persistent();\nmm.tma();" in best.text
    assert dict(best.choices)["mm.map"] == "grouped8" and dict(best.choices)["mm.launch"] == "persistent+tma"
    assert not any("persistent" in c.text for c in shared_space(
        "softmax_safe", dict(x=4096, y=4096), "bf16"))  # launch hints slow memory-bound kernels: not tried


@pytest.mark.slow
def test_rows_read_once_may_stream_and_a_stream_that_changes_nothing_is_dropped():
    argmax = dt.load(ROOT / "examples" / "llm" / "argmax.dt").space(dict(r=64, v=128256), "bf16", limit=300)
    assert {dict(c.choices)["token.cache"] for c in argmax} == {"", "stream"}
    streamed = next(c for c in argmax if dict(c.choices)["token.cache"] == "stream")
    assert streamed.text.count("token.stream();") == 1  # the example's own stream() is the space's to choose
    assert not any("token.stream();" in c.text for c in argmax if not dict(c.choices)["token.cache"])
    # a softmax reads its row twice when it walks it in tiles (nothing to stream: pruned as the same kernel),
    # once when it holds it whole
    softmax = shared_space("softmax_safe", dict(x=4096, y=4096), "bf16")
    assert softmax.pruned["nothing-to-stream"] > 0
    kept = [c for c in softmax if dict(c.choices)["_softmax.cache"] == "stream"]
    assert kept and all(dict(c.choices)["_softmax.y"] in ("y*", "y4096") for c in kept)
    # every point has a kernel's slots (a cache slot, streaming or not): a sample shows whether there is one
    matmul = dt.load(ROOT / "examples" / "matmul.dt").space(dict(x=512, y=512, k=512), "f16", limit=300)
    assert not any("mm.cache" in dict(c.choices) for c in matmul)  # a product's operands are shared


@pytest.mark.slow
def test_a_reduction_over_few_programs_is_also_split_in_the_space():
    argmax = dt.load(ROOT / "examples" / "llm" / "argmax.dt")
    decode_batch = argmax.space(dict(r=64, v=128256), "bf16", limit=400)
    chunks = {dict(c.choices)["token.split"] for c in decode_batch}
    assert {"", "v/1024", "v/4096", "v/16384"} <= chunks  # unsplit too
    split = next(c for c in decode_batch if dict(c.choices)["token.split"] == "v/4096")
    assert "token.split(v:4096);" in split.text
    prefill = argmax.space(dict(r=4096, v=128256), "bf16", limit=400)
    assert not any(dict(c.choices)["token.split"] for c in prefill if dict(c.choices)["token.r"] == "r1")  # 4096 programs
    assert any(dict(c.choices)["token.split"] for c in prefill if dict(c.choices)["token.r"] == "r128")  # 32
    args = random_inputs(argmax, dict(r=3, v=3000), "f32", seed=2)
    splits = [c for c in argmax.space(dict(r=3, v=3000), "f32", backend="interp") if dict(c.choices)["token.split"]]
    assert {dict(c.choices)["token.split"] for c in splits} == {"v/1024", "v/2048"}
    for c in splits[::7]:
        np.testing.assert_array_equal(dt.loads(c.text)(backend="interp", **args), argmax.reference(**args))


@pytest.mark.slow
def test_a_split_takes_the_sums_fused_beside_it_and_a_written_split_stays():
    """A weight's gradient and its bias's over the rows: split together, the bias's sum in the
    weight's walk. A program that writes a split keeps it (and its space is the rest)."""
    written = (ROOT / "examples" / "llm" / "layernorm_backward.dt").read_text()
    for line in ("dw.split(x:32);", "db.split(x:32);", "dw.compute_with(dx, x);", "db.compute_with(dw, x);"):
        written = written.replace(line, "")
    unsplit = dt.loads(written, name="layernorm_backward")
    sizes = dict(x=16384, k=4096)
    split = [c for c in unsplit.space(sizes, "bf16", limit=300) if dict(c.choices).get("dw.split") == "x/2048"]
    assert split and all("dw.split(x:2048);\ndb.split(x:2048);\ndb.compute_with(dw, x);" in c.text for c in split)
    kept = dt.load(ROOT / "examples" / "llm" / "layernorm_backward.dt").space(sizes, "bf16", limit=300)
    assert len(kept) > 0 and all("dw.split(x:" in c.text for c in kept)  # its chunk goes with dx's block
    assert not any(dict(c.choices).get("dw.split") for c in kept)


def test_the_cpu_space_has_no_warps_or_stages():
    space = dt.load(ROOT / "examples" / "matmul.dt").space(dict(x=512, y=512, k=512), "f32", backend="numba")
    assert space and not any("num_warps" in c.text or "num_stages" in c.text for c in space)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(SIZES))
def test_every_schedule_of_every_example_computes_the_algorithm(name):
    """Every kept schedule of the space of every example, at sizes its tiles divide nothing of,
    on the interpreter, against the reference (fusion choices included)."""
    prog = dt.load(example_path(name))
    sizes = SIZES[name][-1]
    space = prog.space(sizes, "f32", backend="interp")
    assert len(space) > 0
    args = random_inputs(prog, sizes, "f32", seed=3)
    expected = prog.reference(**args)
    for candidate in space:
        assert_close(dt.loads(candidate.text, name=name)(backend="interp", **args), expected, "f32")


def test_every_example_has_a_space():
    for path in sorted(glob.glob(str(ROOT / "examples" / "*.dt"))):
        name = Path(path).stem
        if name in SMALL:
            continue
        prog = dt.load(path)
        sizes = {d: 64 for d in prog.checked.needed_dims}
        assert len(prog.space(sizes, "f32", limit=64)) > 0, name


# ---------------------------------------------------------------- the search
def test_tune_times_every_correct_schedule_and_returns_the_fastest():
    prog = dt.load(ROOT / "examples" / "add.dt")
    sizes = dict(x=24, y=300)
    # a budget it does not reach: the search stops once every candidate is timed (60 s left some
    # untried on a loaded 2-core machine)
    result = prog.tune(sizes, "f32", backend="interp", budget=600)
    assert result.timed and not result.failed and result.untried == 0
    searched = [t for t in result.timed if t.candidate.name != "as written"]
    assert len(searched) == len(prog.space(sizes, "f32", backend="interp"))
    # the schedule as written is ranked with them, or reported beside them when far slower
    assert ("as written" in result.baselines) != (len(result.timed) == len(searched) + 1)
    finalists = result.timed[:3]
    assert [t.ms for t in finalists] == sorted(t.ms for t in finalists) and all(len(t.rounds) == 3 for t in finalists)
    args = random_inputs(prog, sizes, "f32", seed=5)
    assert_close(dt.loads(result.best.text)(backend="interp", **args), prog.reference(**args), "f32")
    assert result.best.name in result.table(3)


def test_the_schedule_as_written_and_given_baselines_are_timed_beside_the_finalists():
    prog = dt.load(ROOT / "examples" / "add.dt")
    result = prog.tune(dict(x=24, y=300), "f32", backend="interp", budget=5, cache=False,
                       baselines={"numpy": lambda A, B, alpha: alpha * (A + B)})
    assert set(result.baselines) == {"as written", "numpy"} and all(ms > 0 for ms in result.baselines.values())
    assert result.title == "add x=24 y=300 f32 on interp"


def test_tune_stops_at_its_budget():
    prog = dt.load(ROOT / "examples" / "add.dt")
    result = prog.tune(dict(x=24, y=300), "f32", backend="interp", budget=0)
    names = [t.candidate.name for t in result.timed]
    assert len(names) == 2 and names.count("as written") == 1  # one candidate in the budget, and the program
    assert result.untried == len(prog.space(dict(x=24, y=300), "f32", "interp")) - 1


def test_a_wrong_output_is_caught_before_timing():
    import numpy as np
    from dt.tune.evaluate import disagreement
    ref = np.ones((3, 4))
    assert disagreement(ref.copy(), ref, {"": "f32"}) == ""
    assert disagreement(ref * 2, ref, {"": "f32"}) != ""
    assert disagreement({"a": ref, "b": ref * 2}, {"a": ref, "b": ref}, {"a": "f32", "b": "f32"}).startswith("b ")
    # an output rounded to bf16 is checked with bf16's tolerance, not its float32 inputs'
    assert disagreement(ref * 1.004, ref, {"": "bf16"}) == "" and disagreement(ref * 1.004, ref, {"": "f32"}) != ""


def test_a_search_checks_a_bf16_result_of_float32_and_int8_inputs_as_bf16():
    """w8a8_matmul's f32 scales and i8 data give a bf16 result (a cast): dt tune checks it with
    bf16's tolerance (with float32's, every candidate was 'wrong' at 4096 x 4096 x 4096)."""
    from dt.tune.evaluate import Inputs
    prog = dt.load(ROOT / "examples" / "llm" / "w8a8_matmul.dt")
    inputs = Inputs(prog, {"m": 20, "n": 16, "k": 64}, {"Xq": "i8", "Wq": "i8", "Sx": "f32", "Sw": "f32"},
                    "interp", 0, {})
    assert inputs.checked == {"": "bf16"}


def test_dt_tune_writes_the_fastest_schedule(tmp_path, capsys):
    from dt.cli import main
    out = tmp_path / "add_tuned.dt"
    argv = ["tune", str(ROOT / "examples" / "add.dt"), "--size", "x=24", "--size", "y=300", "--backend", "numba",
            "--budget", "5", "-o", str(out)]
    assert main(argv) == 0
    assert f"wrote {out}" in capsys.readouterr().out
    text = out.read_text()
    assert text.startswith("# Tuned by `dt tune` for x=24, y=300 (f32) on CPU")
    prog = dt.loads(text)
    args = random_inputs(prog, dict(x=24, y=300), "f32")
    assert_close(prog(backend="numba", **args), prog.reference(**args), "f32")


PROGRESS = re.compile(r"^(\d+)/(\d+) (\d+\.\d{4} ms|failed) add_out: .* \((best (\d+\.\d{4}) ms: add_out: .*|none correct "
                      r"yet)\)$", re.MULTILINE)


def test_dt_tune_reports_each_candidate_on_stderr_as_it_goes(tmp_path, capsys):
    from dt.cli import main
    argv = ["tune", str(ROOT / "examples" / "add.dt"), "--size", "x=24", "--size", "y=300", "--backend", "interp",
            "--budget", "5", "-o", str(tmp_path / "tuned.dt")]
    assert main(argv) == 0
    run = capsys.readouterr()
    lines = PROGRESS.findall(run.err)  # not a terminal: a line a candidate
    timed, failed = map(int, re.search(r"(\d+) timed, (\d+) failed", run.out).groups())
    total = len(dt.load(ROOT / "examples" / "add.dt").space(dict(x=24, y=300), "f32", "interp"))
    assert [(int(n), int(of)) for n, of, *_ in lines] == [(n, total) for n in range(1, timed + failed + 1)]
    times = [float(ms.removesuffix(" ms")) for _, _, ms, *_ in lines if ms != "failed"]
    assert float(lines[-1][4]) == min(times)  # the best so far, on every line
    assert not PROGRESS.search(run.out)


def _interrupted_after(monkeypatch, measured: int, interrupt):
    """Local.next measures `measured` candidates, then calls `interrupt` (which raises, or signals)."""
    from dt.tune.evaluate import Local
    calls, measure = [], Local.next

    def next_outcome(self):
        calls.append(1)
        if len(calls) > measured:
            interrupt()
        return measure(self)
    monkeypatch.setattr(Local, "next", next_outcome)


def _keyboard_interrupt():
    raise KeyboardInterrupt


@pytest.mark.parametrize("interrupt, code", [(_keyboard_interrupt, 130),
                                             (lambda: os.kill(os.getpid(), signal.SIGTERM), 143)],
                         ids=["ctrl-c", "sigterm"])
def test_an_interrupted_dt_tune_writes_the_fastest_so_far(tmp_path, capsys, monkeypatch, tuning_cache, interrupt, code):
    """A search cut short (Ctrl-C; SIGTERM, as from an outer `timeout`) keeps what it timed: the
    fastest written, marked as such, nothing cached, the exit code 128 + the signal's number."""
    from dt.cli import main
    _interrupted_after(monkeypatch, 5, interrupt)
    out = tmp_path / "tuned.dt"
    handler = signal.getsignal(signal.SIGTERM)
    argv = ["tune", str(ROOT / "examples" / "add.dt"), "--size", "x=24", "--size", "y=300", "--backend", "interp",
            "--budget", "600", "-o", str(out)]
    assert main(argv) == code
    assert signal.getsignal(signal.SIGTERM) == handler
    run = capsys.readouterr()
    name = signal.Signals(code - 128).name
    assert len(PROGRESS.findall(run.err)) == 5
    assert f"dt tune: stopped by {name} after 5 schedules were timed: {out} holds the fastest so far" in run.err
    assert "cut short by an interrupt: 5 timed, 0 failed, 40 left untried" in run.out
    header, text = out.read_text().split("\n", 1)
    assert header.endswith(f"the fastest of 5 timed before {name} cut the search short (no final rounds).")
    best = min(PROGRESS.findall(run.err), key=lambda line: float(line[2].removesuffix(" ms")))
    assert f"{float(best[2].removesuffix(' ms')):.4f} ms, the fastest of 5" in header
    prog = dt.loads(text)
    args = random_inputs(prog, dict(x=24, y=300), "f32")
    assert_close(prog(backend="interp", **args), prog.reference(**args), "f32")
    assert not list(tuning_cache.glob("*.json"))  # a search cut short is no cache entry


def test_dt_tune_interrupted_before_any_schedule_ran_writes_nothing(tmp_path, capsys, monkeypatch):
    from dt.cli import main
    _interrupted_after(monkeypatch, 0, _keyboard_interrupt)
    out = tmp_path / "tuned.dt"
    assert main(["tune", str(ROOT / "examples" / "add.dt"), "--size", "x=24", "--size", "y=300", "--backend",
                 "interp", "-o", str(out)]) == 130
    assert "dt tune: stopped by SIGINT before any schedule ran correctly: nothing written" in capsys.readouterr().err
    assert not out.exists()


def test_an_interrupted_search_raises_with_what_it_timed(monkeypatch, tuning_cache):
    from dt.tune.search import Interrupted
    prog = dt.load(ROOT / "examples" / "add.dt")
    _interrupted_after(monkeypatch, 3, _keyboard_interrupt)
    with pytest.raises(Interrupted) as stopped:  # a KeyboardInterrupt, with the result so far
        prog.tune(dict(x=24, y=300), "f32", backend="interp", budget=600)
    result = stopped.value.result
    assert isinstance(stopped.value, KeyboardInterrupt) and result.stopped and len(result.timed) == 3
    assert result.untried == len(prog.space(dict(x=24, y=300), "f32", "interp")) - 3
    assert "cut short by an interrupt: 3 timed" in result.table()
    assert not list(tuning_cache.glob("*.json"))


def test_a_search_interrupted_in_its_final_rounds_keeps_its_own_times(monkeypatch, tuning_cache):
    from dt.tune.evaluate import Local
    from dt.tune.search import Interrupted
    monkeypatch.setattr(Local, "retime", lambda self, candidate: _keyboard_interrupt())
    with pytest.raises(Interrupted) as stopped:
        dt.load(ROOT / "examples" / "add.dt").tune(dict(x=24, y=300), "f32", backend="interp", budget=0)
    result = stopped.value.result
    assert result.stopped and [len(t.rounds) for t in result.timed] == [0] and not result.baselines
    assert not list(tuning_cache.glob("*.json"))

# ---------------------------------------------------------------- the cache
def test_a_second_tune_of_the_same_algorithm_and_shape_bucket_is_a_cache_hit(tuning_cache):
    import time
    prog = dt.load(ROOT / "examples" / "add.dt")
    first = prog.tune(dict(x=24, y=300), "f32", backend="interp", budget=30)
    assert not first.cached and len(list(tuning_cache.glob("*.json"))) == 1
    begin = time.monotonic()
    # another schedule of the same algorithm, at other extents of the same bucket (32 x 512)
    other = dt.loads((ROOT / "examples" / "add.dt").read_text().replace("add_out.tensorize(y:64);", ""))
    again = other.tune(dict(x=30, y=400), "f32", backend="interp", budget=30)
    assert time.monotonic() - begin < 1
    assert again.cached and again.best.text == first.best.text and "from the tuning cache" in again.summary
    assert not prog.tune(dict(x=24, y=600), "f32", backend="interp", budget=0).cached  # another bucket
    assert not prog.tune(dict(x=24, y=300), "f16", backend="interp", budget=0).cached  # another dtype
    assert not prog.tune(dict(x=24, y=300), "f32", backend="interp", budget=0, cache=False).cached


def test_a_cache_entry_for_another_algorithm_is_not_used(tuning_cache):
    import json
    prog = dt.load(ROOT / "examples" / "add.dt")
    prog.tune(dict(x=24, y=300), "f32", backend="interp", budget=30)
    entry = next(tuning_cache.glob("*.json"))
    data = json.loads(entry.read_text())
    data["schedule"] = data["schedule"].replace("alpha * (A[x, y] + B[x, y])", "alpha * (A[x, y] - B[x, y])")
    entry.write_text(json.dumps(data))
    assert not prog.tune(dict(x=24, y=300), "f32", backend="interp", budget=0).cached
    entry.write_text("{not json")
    assert not prog.tune(dict(x=24, y=300), "f32", backend="interp", budget=0).cached


def test_tuned_runs_the_cached_schedule_or_says_it_has_none():
    from dt.tune import tuned
    prog = dt.load(ROOT / "examples" / "add.dt")
    written = tuned(prog, dict(x=24, y=300), "f32", "interp")
    assert written is prog and written.origin.startswith("the schedule as written")
    best = prog.tune(dict(x=24, y=300), "f32", backend="interp", budget=30).best
    chosen = tuned(dt.load(ROOT / "examples" / "add.dt"), dict(x=20, y=500), "f32", "interp")
    assert chosen.origin.startswith(f"the tuned schedule {best.name!r} of this shape's bucket")
    args = random_inputs(chosen, dict(x=20, y=500), "f32")
    assert_close(chosen(backend="interp", **args), chosen.reference(**args), "f32")


def _entry(prog, extents, text, name):
    from dt.tune import cache
    return cache.store(prog, extents, "f32", "interp", "CPU (x86_64, interp)", text, name, 1.0)


def test_a_call_with_schedule_tuned_runs_the_nearest_bucket_and_says_so(tuning_cache, monkeypatch):
    from dt.tune import evaluate
    monkeypatch.setattr(evaluate, "device", lambda backend: "CPU (x86_64, interp)")
    source = (ROOT / "examples" / "add.dt").read_text()
    prog = dt.loads(source, name="add")
    near = source.replace("add_out.block(x:1, y:256)", "add_out.block(x:4, y:256)")
    far = source.replace("add_out.block(x:1, y:256)", "add_out.block(x:16, y:128)")
    _entry(prog, dict(x=8, y=256), near, "near")
    _entry(prog, dict(x=256, y=4096), far, "far")
    args = random_inputs(prog, dict(x=20, y=300), "f32")
    with pytest.warns(dt.ScheduleNote, match="the tuned schedule 'near' of the nearest shape tuned"):
        out = prog(backend="interp", schedule="tuned", **args)
    assert_close(out, prog.reference(**args), "f32")
    _entry(prog, dict(x=32, y=512), far, "exact")
    fresh = dt.loads(source, name="add")
    monkeypatch.setenv("DT_SCHEDULE", "tuned")
    with pytest.warns(dt.ScheduleNote, match="'exact' of this shape's bucket"):
        fresh(backend="interp", **args)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fresh(backend="interp", **args)  # the same signature: planned once, said once
        fresh(backend="interp", schedule="written", **args)
    with pytest.raises(dt.DTInputError, match="schedule='fastest' is not a schedule choice"):
        fresh(backend="interp", schedule="fastest", **args)
    other = dt.loads(source.replace("A[x, y] + B[x, y]", "A[x, y] - B[x, y]"), name="add")
    with pytest.warns(dt.ScheduleNote, match="the schedule as written: the tuning cache .* has no f32 schedule"):
        other(backend="interp", **args)


@pytest.mark.slow
def test_a_local_ray_cluster_measures_the_candidates():
    pytest.importorskip("ray", reason="dt tune --ray needs Ray (pip install 'dt[ray]')")
    pytest.importorskip("numba", reason="tunes on the numba backend")
    import ray
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        prog = dt.load(ROOT / "examples" / "add.dt")
        sizes = dict(x=24, y=300)
        result = prog.tune(sizes, "f32", backend="numba", budget=600, cache=False, ray=True)  # not reached
        assert result.device.endswith("x1 (Ray)") and not result.failed and result.untried == 0
        # every candidate, and as written: ranked with them, or only reported where its first time was
        # more than SLOWER times the fastest's (on a loaded machine, a noisy first time can make it so)
        found = [t for t in result.timed if t.candidate.name != "as written"]
        assert len(found) == len(prog.space(sizes, "f32", backend="numba"))
        assert "as written" in result.baselines and all(len(t.rounds) == 3 for t in found[:3])
        assert ray.is_initialized()  # a cluster the caller started is left running
    finally:
        ray.shutdown()
    args = random_inputs(prog, sizes, "f32", seed=2)
    assert_close(dt.loads(result.best.text)(backend="numba", **args), prog.reference(**args), "f32")


@pytest.mark.slow
def test_worker_processes_compile_the_candidates_ahead():
    prog = dt.load(ROOT / "examples" / "add.dt")
    sizes = dict(x=24, y=300)
    alone = prog.tune(sizes, "f32", backend="numba", budget=600, cache=False, workers=0)  # budgets not reached
    helped = prog.tune(sizes, "f32", backend="numba", budget=600, cache=False, workers=2)
    def searched(result):  # the schedule as written is timed or screened (10x slower) by timing noise
        return {t.candidate.name for t in result.timed} - {"as written"}
    assert searched(helped) == searched(alone) and len(searched(alone)) > 1
    assert "as written" in {t.candidate.name for t in helped.timed} | set(helped.baselines)
    assert not helped.failed and helped.untried == 0


# ---------------------------------------------------------------- a dtype per input
def test_a_search_takes_a_dtype_per_input_and_the_cache_keys_it(tuning_cache, capsys):
    from dt.cli import main
    path = ROOT / "examples" / "llm" / "int8_matmul.dt"
    sizes, dtypes = dict(m=16, n=40, k=24), {"X": "f32", "Wq": "i8", "S": "f32"}
    assert main(["tune", str(path), "--size", "m=16", "--size", "n=40", "--size", "k=24", "--dtype", "f32",
                 "--dtype", "Wq=i8", "--backend", "interp", "--budget", "10", "-o",
                 str(tuning_cache.parent / "tuned.dt")]) == 0
    assert "(X=f32 Wq=i8 S=f32) on CPU" in (tuning_cache.parent / "tuned.dt").read_text().splitlines()[0]
    capsys.readouterr()
    prog = dt.load(path)
    again = prog.tune(sizes, dtypes, backend="interp", budget=10)
    assert again.cached and again.title == "int8_matmul m=16 n=40 k=24 X=f32 Wq=i8 S=f32 on interp"
    args = random_inputs(prog, sizes, dtypes, seed=2)
    assert args["Wq"].dtype == np.int8 and np.abs(args["Wq"]).max() > 1 and args["X"].dtype == np.float32
    with pytest.warns(dt.ScheduleNote, match=f"the tuned schedule '{re.escape(again.best.name)}' of this shape"):
        out = prog(backend="interp", schedule="tuned", **args)
    assert_close(out, prog.reference(**args), "f32")
    wider = {**args, "Wq": args["Wq"].astype(np.int16)}  # another dtype of one input: another key
    with pytest.warns(dt.ScheduleNote, match="has no X=f32 Wq=i16 S=f32 schedule"):
        prog(backend="interp", schedule="tuned", **wider)
    assert not prog.tune(sizes, "f32", backend="interp", budget=0).cached


def test_one_dtype_named_for_every_input_is_the_same_search_as_one_name(tuning_cache):
    prog = dt.load(ROOT / "examples" / "add.dt")
    prog.tune(dict(x=24, y=300), "f32", backend="interp", budget=30)
    assert prog.tune(dict(x=24, y=300), {"A": "f32", "B": "f32"}, backend="interp", budget=0).cached


def test_a_dtype_per_input_names_each_input_once_and_right():
    from dt.tune.dtypes import resolved
    matmul = dt.load(ROOT / "examples" / "llm" / "int8_matmul.dt")
    with pytest.raises(dt.DTInputError, match="no dtype is given for 'S'"):
        matmul.tune(dict(m=16, n=40, k=24), {"X": "f32", "Wq": "i8"}, backend="interp")
    with pytest.raises(dt.DTInputError, match="names 'W', which int8_matmul does not read"):
        matmul.space(dict(m=16, n=40, k=24), {"X": "f32", "W": "i8", "S": "f32"}, backend="interp")
    with pytest.raises(dt.DTInputError, match=r"dtype 'int8' \(of 'Wq'\) is not one dt supports"):
        resolved(matmul, {"X": "f32", "Wq": "int8", "S": "f32"})
    entropy = dt.load(ROOT / "examples" / "llm" / "cross_entropy.dt")
    with pytest.raises(dt.DTInputError, match="'T' indexes cross_entropy's inputs, so its dtype must be an integer"):
        resolved(entropy, {"L": "bf16", "T": "f32"})
    # indices are int64 in a search and not part of its key, whatever is named for them
    assert resolved(entropy, {"L": "bf16"}) == resolved(entropy, {"L": "bf16", "T": "i32"}) == "bf16"
    args = random_inputs(entropy, dict(r=3, v=50), {"L": "bf16", "T": "i32"})
    assert args["T"].dtype == np.int64 and 0 <= args["T"].min() and args["T"].max() < 50
    with pytest.raises(dt.DTInputError, match="no dtype is given for 'Wq'"):
        random_inputs(matmul, dict(m=16, n=40, k=24), {"X": "bf16", "S": "bf16"})


def test_a_program_with_an_index_scalar_is_searched_with_a_dtype_per_input(tuning_cache):
    from dt.tune import tuned
    from dt.tune.dtypes import resolved
    from dt.tune.evaluate import zero_inputs
    shifted = dt.loads("In K, W; SIn start; Var l; Func o;\no[l] = K[l + start] * W[l];\no.compile();", name="shifted")
    dtypes = {"K": "f32", "W": "f16"}
    assert resolved(shifted, dtypes) == resolved(shifted, resolved(shifted, dtypes)) == \
        {"K": "f32", "W": "f16", "start": "i64"}
    zeros = zero_inputs(shifted, dict(l=40), resolved(shifted, dtypes))
    assert zeros["K"].dtype == np.float32 and zeros["W"].dtype == np.float16 and zeros["start"] == 1
    result = shifted.tune(dict(l=40), dtypes, backend="interp", budget=5)
    assert result.timed and result.title.endswith("K=f32 W=f16 start=i64 on interp")
    assert tuned(shifted, dict(l=40), dtypes, "interp").origin.startswith("the tuned schedule")


def test_a_search_measures_with_the_scalars_given(tmp_path):
    from dt.cli import main
    # query head h reads key head h // group (grouped-query attention's gather): the group is the user's
    source = "In K; SIn group; Var h, k; Func o;\no[h, k] = K[h // group, k] * 2.0;\no.compile();"
    prog, sizes, seen = dt.loads(source, name="grouped"), dict(h=4, k=40, K_axis0=2), []
    result = prog.tune(sizes, "f32", backend="interp", budget=5, scalars={"group": 2},
                       baselines={"records its group": lambda K, group: seen.append(group) or K})
    assert result.timed and not result.failed and seen and set(seen) == {2}
    assert result.title == "grouped h=4 k=40 K_axis0=2 group=2 f32 on interp"
    args = random_inputs(prog, sizes, "f32", scalars={"group": 2})
    assert args["group"] == 2
    from dt.tune.evaluate import zero_inputs  # what compile workers run a candidate on: the group too
    assert zero_inputs(prog, sizes, "f32", {"group": 2})["group"] == 2 and zero_inputs(prog, sizes, "f32")["group"] == 1
    best = dt.loads(result.best.text)(backend="interp", sizes=dict(h=4), **args)
    assert_close(best, prog.reference(sizes=dict(h=4), **args), "f32")
    with pytest.raises(dt.DTInputError, match="scalars names 'grp', which is not a scalar of grouped"):
        prog.tune(sizes, "f32", backend="interp", budget=5, scalars={"grp": 2})
    with pytest.raises(dt.DTInputError, match="scalars gives 'group' = '2', which is not a number"):
        prog.tune(sizes, "f32", backend="interp", budget=5, scalars={"group": "2"})
    path, out = tmp_path / "grouped.dt", tmp_path / "grouped_tuned.dt"
    path.write_text(source)
    assert main(["tune", str(path), "--size", "h=4", "--size", "k=40", "--size", "K_axis0=2", "--scalar", "group=2",
                 "--backend", "interp", "--budget", "3", "--no-cache", "-o", str(out)]) == 0
    assert out.read_text().startswith("# Tuned by `dt tune` for h=4, k=40, K_axis0=2, group=2 (f32) on CPU")


def test_the_goal_rows_are_tuned_at_extents_named_as_their_programs_name_them(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks" / "gpu"))
    tune_goals = pytest.importorskip("tune_goals", reason="the benchmark's rows need torch (benchmarks/gpu)")
    for which in ("sample", "outside"):
        for case in tune_goals.rows(which, "0/1", None):
            prog = dt.load(case.kernel.program)
            sizes = tune_goals.program_sizes(prog, case)
            # a DTExtentError names a dimension the program does not have (gqa's kh: its K_axis1) or one missing
            assert prog._extents({}, sizes, "sizes").items() >= sizes.items(), case.title
    gqa = next(c for c in tune_goals.rows("outside", "0/1", ["gqa"]))
    assert tune_goals.program_sizes(dt.load(gqa.kernel.program), gqa)["K_axis1"] == 8


def test_the_tolerance_of_a_search_is_its_least_precise_float():
    from dt.tune.dtypes import checked_in
    assert checked_in("bf16") == "bf16" and checked_in({"X": "bf16", "Wq": "i8"}) == "bf16"
    assert checked_in("f8e4m3") == checked_in("i8") == checked_in({"X": "f8e4m3", "S": "f32"}) == "f32"
    assert checked_in({"X": "f16", "S": "f64"}) == "f16"


# ---------------------------------------------------------------- the strategy
def _synthetic_space(slots=3, values=6):
    """Candidates whose time is known: each slot's value adds its own cost (in log time)."""
    import itertools
    import random
    from dt.tune.space import Candidate
    rng = random.Random(7)
    cost = {(s, v): rng.uniform(0, 1) for s in range(slots) for v in range(values)}
    space = []
    for point in itertools.product(range(values), repeat=slots):
        choices = tuple((f"f.s{s}", f"v{v}") for s, v in enumerate(point))
        space.append(Candidate(" ".join(v for _, v in choices), "", choices))
    ms = {c.name: float(np.exp(sum(cost[(s, int(v[1:]))] for s, (_, v) in enumerate(c.choices)))) for c in space}
    return space, ms


@pytest.mark.parametrize("seed", range(5))
def test_the_strategy_finds_the_fastest_long_before_a_random_order_would(seed):
    from dt.tune.strategy import Strategy
    space, ms = _synthetic_space()
    fastest = min(ms, key=ms.get)
    strategy = Strategy(space, seed)
    for pick in range(1, 60):
        c = strategy.next()
        strategy.tell(c, ms[c.name])
        if c.name == fastest:
            break
    assert c.name == fastest, \
        f"not found in 60 of {len(space)} picks (a random order needs {len(space) // 2} on average)"


def test_the_strategy_tries_every_candidate_once_then_stops():
    from dt.tune.strategy import Strategy
    space, ms = _synthetic_space(2, 5)
    strategy = Strategy(space, 3)
    picked = []
    while (c := strategy.next()) is not None:
        picked.append(c.name)
        strategy.tell(c, ms[c.name] if len(picked) % 4 else None)  # some fail: never bred from
    assert sorted(picked) == sorted(c.name for c in space)


# ---------------------------------------------------------------- what review found
def test_a_search_runs_its_candidates_whatever_dt_schedule_says(monkeypatch):
    prog = dt.load(ROOT / "examples" / "add.dt")
    prog.tune(dict(x=24, y=300), "f32", backend="interp", budget=3)  # a cache entry DT_SCHEDULE=tuned would run
    monkeypatch.setenv("DT_SCHEDULE", "tuned")
    with warnings.catch_warnings():
        warnings.simplefilter("error", dt.ScheduleNote)
        result = prog.tune(dict(x=24, y=300), "f32", backend="interp", budget=3, cache=False)
    assert len(result.timed) > 2


def test_the_cache_tells_programs_with_other_outputs_apart():
    from dt.tune import cache
    one = dt.loads("Func t, out; In A; Var x;\nt[x] = A[x] * 2.0;\nout[x] = t[x] + 1.0;\nout.compile();\n", name="p")
    two = dt.loads("Func t, out; In A; Var x;\nt[x] = A[x] * 2.0;\nout[x] = t[x] + 1.0;\nt.compile();\n"
                   "out.compile();\n",
                   name="p")
    assert cache.algorithm(one.ast.source) != cache.algorithm(two.ast.source)
    cache.store(one, dict(x=100), "f32", "interp", "here", one.ast.source, "one", 1.0)
    assert cache.lookup(one, dict(x=100), "f32", "interp", "here") is not None
    assert cache.lookup(two, dict(x=100), "f32", "interp", "here") is None
    # the schedule statements that say how are not the algorithm: another tiling finds it
    tiled = dt.loads(one.ast.source.replace("out.compile();", "out.block(x:32);\nout.compile();"), name="p")
    assert cache.lookup(tiled, dict(x=100), "f32", "interp", "here") is not None


def test_a_cached_schedule_that_does_not_fit_the_call_is_not_used(monkeypatch):
    from dt.tune import cache, evaluate
    monkeypatch.setattr(evaluate, "device", lambda backend: "here")
    source = (ROOT / "examples" / "add.dt").read_text()
    prog = dt.loads(source, name="add")
    whole = source.replace("add_out.block(x:1, y:256);", "").replace("add_out.tensorize(y:64);",
                                                                       "add_out.tensorize(x:0, y:0);")
    cache.store(prog, dict(x=8, y=256), "f32", "interp", "here", whole, "whole", 1.0)
    assert cache.nearest(prog, dict(x=8, y=256), "f32", "interp", "here")["name"] == "whole"
    assert cache.nearest(prog, dict(x=2048, y=1024), "f32", "interp", "here") is None  # a 2M-element tile there
    args = {"A": np.ones((2048, 1024), np.float32), "B": np.ones((2048, 1024), np.float32), "alpha": 1.0}
    with pytest.warns(dt.ScheduleNote, match="the schedule as written"):
        assert prog(backend="numba" if _has("numba") else "interp", schedule="tuned", **args)[0, 0] == 2.0


def _has(module: str) -> bool:
    import importlib.util
    return importlib.util.find_spec(module) is not None


@pytest.mark.slow
def test_a_measuring_child_that_dies_fails_its_candidate_and_is_started_again():
    from dt.tune.evaluate import Child, Setup
    prog = dt.load(ROOT / "examples" / "add.dt")
    space = list(prog.space(dict(x=24, y=300), "f32", backend="interp"))
    child = Child(Setup(prog.ast.source, prog.name, dict(x=24, y=300), "f32", "interp", 0, {}))
    try:
        assert child.measure(space[0]).ms > 0
        child.process.kill()
        lost = child.measure(space[1])
        assert lost.ms is None and "the measuring process died (exit code -9)" in lost.error
        assert child.measure(space[2]).ms > 0 and child.retime(space[2]) > 0  # a new one took over
    finally:
        child.close()
    with pytest.raises(dt.DTError, match="the measuring process could not start: .*"):
        Child(Setup(prog.ast.source, prog.name, dict(x=24), "f32", "interp", 0, {}))  # y's extent missing


def test_the_timer_follows_the_benchmarks_split_between_compute_and_memory_bound():
    from dt.tune.timing import compute_bound
    matmul = dt.load(ROOT / "examples" / "matmul.dt")
    assert compute_bound(matmul, dict(x=4096, y=4096, k=4096), 2)
    assert not compute_bound(matmul, dict(x=16, y=4096, k=4096), 2)  # a skinny product moves its weights
    assert not compute_bound(dt.load(ROOT / "examples" / "softmax_safe.dt"), dict(x=4096, y=4096), 2)
    assert not compute_bound(dt.load(ROOT / "examples" / "2mm_inner.dt"), dict(m=1024, n=1024, k=64, l=64), 2)
    # an inlined product counted once, at its own dimensions (not once per reduction reading it)
    assert compute_bound(dt.load(ROOT / "examples" / "attention_safe_onepass.dt"), dict(m=512, l=512, k=64, n=64), 2)


def _hold_and_record(key: str, log: str, times: int):
    import time

    from dt.tune.timing import gpu_held
    for _ in range(times):
        with gpu_held(key):
            begin = time.monotonic()
            time.sleep(0.05)
            with open(log, "a") as f:
                f.write(f"{begin} {time.monotonic()}\n")


def test_searches_sharing_a_gpu_time_one_at_a_time(tmp_path):
    import multiprocessing
    import os
    context = multiprocessing.get_context("spawn")
    log, key = str(tmp_path / "held"), f"test-{os.getpid()}-{tmp_path.name}"
    workers = [context.Process(target=_hold_and_record, args=(key, log, 5)) for _ in range(3)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(60)
        assert w.exitcode == 0
    held = sorted(tuple(map(float, line.split())) for line in open(log))
    assert len(held) == 15
    assert all(end <= next_begin for (_, end), (next_begin, _) in zip(held, held[1:]))


def test_the_gpu_lock_file_is_open_to_every_users_searches(tmp_path, monkeypatch):
    """Another user's search on the same GPU opens the lock file (read-only at least) even where
    the first one's umask would keep it private."""
    import os
    import tempfile

    from dt.tune.timing import gpu_held
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    private = os.umask(0o077)
    try:
        with gpu_held("umask"):
            pass
    finally:
        os.umask(private)
    assert (tmp_path / "dt-gpu-umask.lock").stat().st_mode & 0o666 == 0o666


def test_a_search_holds_the_gpu_to_time_not_to_compile_or_check():
    """A candidate's first call compiles it (a wide tile: a minute or more) and is checked: other
    searches sharing the GPU time meanwhile; only its timing holds the GPU (a lock a waiting
    search's measuring process would otherwise wait on, its 300 s limit running)."""
    import contextlib
    from types import SimpleNamespace

    from dt.tune.evaluate import Inputs
    prog = dt.load(ROOT / "examples" / "add.dt")
    inputs = Inputs(prog, dict(x=8, y=64), "f32", "interp", 0, {})
    events, holding = [], []

    @contextlib.contextmanager
    def held():
        holding.append(True)
        try:
            yield
        finally:
            holding.pop()
    runner, clock = inputs.runner, inputs.clock

    def recorded(text):
        run = runner(text)
        return lambda: events.append(("run", bool(holding))) or run()
    inputs.held, inputs.runner = held, recorded
    inputs.clock = lambda fn: events.append(("clock", bool(holding))) or clock(fn)
    outcome, run, _ = inputs.measure(SimpleNamespace(name="c", text=prog.ast.source))
    assert outcome.ms is not None and run is not None
    assert events[0] == ("run", False)  # the first call: the compile and the check
    assert ("clock", True) in events and all(held for what, held in events[1:] if what == "clock")


def test_the_cache_exports_to_one_file_and_imports_it_elsewhere(tuning_cache, tmp_path, monkeypatch, capsys):
    from dt.cli import main
    from dt.tune import cache
    prog = dt.load(ROOT / "examples" / "add.dt")
    first = prog.tune(dict(x=24, y=300), "f32", backend="interp", budget=3)
    shared = tmp_path / "team.json"
    assert main(["cache", "export", str(shared)]) == 0 and "wrote 1 entries" in capsys.readouterr().out
    monkeypatch.setenv("DT_TUNE_CACHE", str(tmp_path / "another"))  # a colleague's empty cache
    assert cache.lookup(prog, dict(x=24, y=300), "f32", "interp", first.device) is None
    assert main(["cache", "import", str(shared)]) == 0
    again = prog.tune(dict(x=24, y=300), "f32", backend="interp", budget=3)
    assert again.cached and again.best.text == first.best.text
    assert main(["cache", "list"]) == 0 and first.best.name in capsys.readouterr().out
    assert main(["cache", "export"]) == 2
    shared.write_text('[{"name": "x"}]')
    with pytest.raises(dt.DTError, match="not a list of dt tune's entries"):
        cache.merge(shared)


def test_statements_written_over_several_lines_are_chosen_whole():
    source = (ROOT / "examples" / "softmax_safe.dt").read_text()
    source = source.replace("_sum.compute_with(_max, y);", "_sum.compute_with(_max,\n    y);")
    source = source.replace("_softmax.block(x:4);", "_softmax.block(\n    x:4);")
    space = dt.loads(source, name="softmax_safe").space(dict(x=6, y=300), "f32", backend="interp")
    assert len(space) > 0 and not space.illegal
    assert all(c.text.count("\n_sum.compute_with") <= 1 and "block(\n" not in c.text and "    y);" not in c.text
               for c in space)
    assert any("_sum.compute_with(_max, y);" in c.text for c in space)


def test_a_schedule_parsed_after_its_algorithm_is_the_program_parsed_whole(monkeypatch):
    """The space parses each candidate's schedule lines after its algorithm's cached parse tree:
    the same Program, source locations included, wherever the text is cut; an error after the
    cut is reported where the whole text puts it."""
    from dt.frontend import parser
    from dt.frontend.parser import parse
    reused = []
    tree_after = parser._tree_after
    monkeypatch.setattr(parser, "_tree_after", lambda *a: reused.append(tree_after(*a)) or reused[-1])
    for path in ("examples/llm/layernorm_stats.dt", "examples/attention_safe_onepass.dt"):
        text = (ROOT / path).read_text()
        whole = repr(parse(text, "<t>", "t"))
        cuts = [m.end() for m in re.finditer("\n", text)]
        reused.clear()
        assert all(repr(parse(text, "<t>", "t", parsed=text[:cut])) == whole for cut in cuts)
        assert sum(tree is not None for tree in reused) >= len(cuts) // 2  # mid-statement cuts parse whole
        broken = text + "y.block(x:);\n"
        with pytest.raises(dt.DTSyntaxError) as whole_error:
            parse(broken, "<t>", "t")
        with pytest.raises(dt.DTSyntaxError) as cut_error:
            parse(broken, "<t>", "t", parsed=text)
        assert str(cut_error.value) == str(whole_error.value) and f"<t>:{len(cuts) + 1}:" in str(cut_error.value)


@pytest.mark.parametrize("path, sizes, blocks, tiles, stages, tma, compiled", [
    # shared memory Triton 3.9 allocated compiling each for sm_90 (bf16; the decode step's at 256 x 32 as
    # the H100's Triton 3.6 refused it): the estimate is that, or over (up to 30%) where walks nest
    ("examples/llm/mha.dt", dict(b=4, h=16, m=4096, l=4096, k=128, n=128), dict(b=1, h=1, m=128, n=0),
     dict(l=64, k=0), 3, False, 131072),
    ("examples/llm/mha.dt", dict(b=4, h=16, m=4096, l=4096, k=128, n=128), dict(b=1, h=1, m=256, n=0),
     dict(l=64, k=0), 5, False, 229376),
    ("examples/llm/mha.dt", dict(b=4, h=16, m=4096, l=4096, k=128, n=128), dict(b=1, h=1, m=256, n=64),
     dict(l=64, k=64), 5, False, 204800),
    ("examples/llm/decode_split.dt", dict(b=4, h=32, l=8192, k=128, d=128), dict(b=1, h=1, d=32),
     dict(l=256, k=0), 4, False, 247808),
    ("examples/llm/decode_split.dt", dict(b=4, h=32, l=8192, k=128, d=128), dict(b=1, h=1, d=16),
     dict(l=128, k=0), 4, False, 111104),
    ("examples/matmul.dt", dict(x=4096, y=4096, k=4096), dict(x=128, y=256), dict(k=64), 4, True, 262176),
    # the inner product walked in the outer one's loop (mm.fuse_at(_2mm, l)): its tiles are the pipelined ones
    ("examples/2mm_inner.dt", dict(m=4096, n=4096, k=4096, l=4096), dict(m=128, n=256), dict(k=64, l=64), 5,
     False, 122880),
    # no walk (2mm's reductions whole): persistent with TMA, every tile is pipelined along the loop over tiles
    ("examples/2mm_inner.dt", dict(m=1024, n=1024, k=64, l=64), dict(m=128, n=128), dict(k=0, l=0), 5, True,
     237656),
    ("examples/2mm_inner.dt", dict(m=1024, n=1024, k=64, l=64), dict(m=256, n=128), dict(k=0, l=0), 4, True,
     294976),
    # an operand another kernel stores is loaded like an input
    ("Func h, out; In X, W; Var m, n; RVar k;\nh[m, k] = X[m, k] * 2.0;\nout[m, n] = rdot(h[m, k], W[k, n], k);\n"
     "out.block(m:128, n:256); out.tensorize(m:128, n:256, k:64); out.num_stages(5); h.compile(); out.compile();",
     dict(m=4096, n=4096, k=4096), dict(m=128, n=256), dict(k=64), 5, False, 245760),
])
def test_shared_memory_is_estimated_as_triton_allocates_it(path, sizes, blocks, tiles, stages, tma, compiled):
    """The space prunes what needs more shared memory than a GPU has: pipelined tiles of every
    input a product kernel reads in its innermost walk (a decode step's keys, not only its
    product's values), one buffer for what it reads outside it (attention's queries)."""
    from dt.tune.space import _shared_bytes, _staged_loads
    prog = dt.loads(path) if "\n" in path else dt.load(ROOT / path)
    root = prog.checked.kernel_roots[-1] if "\n" in path else \
        next(r for r in prog.checked.kernel_roots if r not in prog.checked.partials)
    loads = _staged_loads(prog.checked, root)
    estimate = _shared_bytes([(d, "", "", size) for d, size in blocks.items()],
                             [(r, "", t) for r, t in tiles.items()],
                             [("stages", f"s{stages}", "")] + ([("launch", "persistent+tma", "")] if tma else []),
                             loads, sizes, 2)
    assert compiled - 4096 <= estimate <= compiled * 1.3


def test_fusion_slots_are_one_each_and_compute_with_is_tried_both_ways():
    prog = dt.load(ROOT / "examples" / "softmax_safe.dt")
    for c in prog.space(dict(x=6, y=300), "f32", backend="interp"):
        slots = [slot for slot, _ in c.choices]
        assert len(slots) == len(set(slots))
    layernorm = dt.load(ROOT / "examples" / "layernorm.dt").space(dict(x=8, y=300), "f32", backend="interp")
    assert layernorm.illegal  # mean.compute_with(variance, y): variance reads mean, the checker refuses it


def test_an_exported_entry_is_found_under_the_key_lookup_computes(tuning_cache, tmp_path, monkeypatch):
    from dt.tune import cache
    source = (ROOT / "examples" / "add.dt").read_text().replace("add_out.tensorize(y:64);",
                                                                 "add_out.tensorize(y:64); add_out.num_warps(4);")
    prog = dt.loads(source, name="add")  # two statements on one line
    cache.store(prog, dict(x=24, y=300), "f32", "interp", "here", source, "two", 1.0)
    cache.export(tmp_path / "team.json")
    monkeypatch.setenv("DT_TUNE_CACHE", str(tmp_path / "another"))
    cache.merge(tmp_path / "team.json")
    assert cache.lookup(prog, dict(x=24, y=300), "f32", "interp", "here")["name"] == "two"


def test_a_measuring_child_the_search_gave_up_on_ends_quietly(capfd):
    """At the end of a budget the search closes the pipe of a child still measuring: the child's
    reply has no reader, which ends it without a traceback in the user's terminal."""
    from dt.tune.evaluate import Child, Setup
    prog = dt.load(ROOT / "examples" / "add.dt")
    space = list(prog.space(dict(x=24, y=300), "f32", backend="interp"))
    child = Child(Setup(prog.ast.source, prog.name, dict(x=24, y=300), "f32", "interp", 0, {}))
    child.connection.send(("measure", space[0]))
    child.connection.close()
    child.process.join(60)
    assert child.process.exitcode == 0 and "Traceback" not in capfd.readouterr().err


def test_candidates_fail_alone_when_no_measuring_process_can_start_again(monkeypatch):
    from dt.tune.evaluate import Child, Setup
    prog = dt.load(ROOT / "examples" / "add.dt")
    space = list(prog.space(dict(x=24, y=300), "f32", backend="interp"))
    child = Child(Setup(prog.ast.source, prog.name, dict(x=24, y=300), "f32", "interp", 0, {}))
    try:
        child.process.kill()

        def broken(self):
            raise EOFError("it died before it could say")
        monkeypatch.setattr(Child, "_start", broken)
        first, second = child.measure(space[0]), child.measure(space[1])
        assert first.ms is None and "died" in first.error
        assert second.ms is None and "no measuring process could be started again" in second.error
    finally:
        child.close()


@pytest.mark.parametrize("written_ms", [None, 50.0, 1.5])
def test_the_schedule_as_written_is_bounded_in_time_and_timed_again_only_if_it_competes(monkeypatch, written_ms):
    from dt.tune import search
    from dt.tune.evaluate import Outcome

    class Evaluator:  # every candidate 1 ms; the schedule as written failed, 50x slower, or close
        depth, asked, retimed = 1, [], []

        def __init__(self, *args):
            self.queue = []

        def submit(self, candidate):
            self.queue.append(candidate)

        def next(self):
            return Outcome(self.queue.pop(0), 1.0)

        def measure_now(self, candidate, timeout):
            self.asked.append(timeout)
            return Outcome(candidate, written_ms, "" if written_ms else "it ran for more than 30 s", not written_ms)

        def retime(self, candidate):
            self.retimed.append(candidate.name)
            return written_ms if candidate.name == "as written" else 1.0

        def abandon(self):
            pass

        close = abandon

    monkeypatch.setattr(search, "Local", Evaluator)
    prog = dt.load(ROOT / "examples" / "add.dt")
    result = search.tune(prog, dict(x=24, y=300), "f32", "interp", budget=1, cache=False)
    assert Evaluator.asked == [search.WRITTEN_TIMEOUT]
    if written_ms is None:
        assert result.failed["as written"].startswith("not timed: it ran for more than 30 s")
        assert "as written" not in result.baselines
    elif written_ms > search.SLOWER:
        assert result.baselines["as written"] == 50.0 and "as written" not in Evaluator.retimed
    else:
        assert Evaluator.retimed.count("as written") == search.ROUNDS and result.baselines["as written"] == 1.5


def test_a_schedule_that_fails_at_these_extents_is_still_tuned_from_its_algorithm():
    from dt.tune.space import without_shaping
    example = dt.load(ROOT / "examples" / "2mm_outer.dt")
    # its blocks and tiles cut, mm stays fused at m: '_2mm' would read mm over tiles of l of 1
    prog = dt.loads(without_shaping(example.ast, example.checked.kernel_roots), name=example.name)
    extents = dict(m=64, n=48, k=32, l=32)
    with pytest.raises(dt.DTError, match="reads 'mm' over a tile of 'l' of 1"):
        prog.check_extents(extents)
    result = prog.tune(extents, "f32", backend="interp", budget=3, cache=False)
    assert "reads 'mm' over a tile of 'l' of 1" in result.failed["as written"]
    best = dt.loads(result.best.text, name="tuned")
    args = dt.testing.random_inputs(best, extents, seed=1)
    assert dt.testing.compare(best(backend="interp", **args), best.reference(**args), "f32").ok


def test_a_walk_summing_split_funcs_chooses_their_chunk_with_its_block():
    """dx's walk over its rows sums dw's and db's chunks: each point blocks dx's rows and splits dw
    and db in chunks of that block, walks the rows one at a time, and chooses dx's stages; the
    kernel adding the chunks chooses no tile of the rows (dx walks them)."""
    space = dt.load(ROOT / "examples" / "llm" / "layernorm_backward.dt").space(dict(x=4096, k=4096), "bf16",
                                                                                 limit=300)
    assert len(space) > 0
    chunks = set()
    for c in space:
        block = re.search(r"dx\.block\(x:(\d+)\)", c.text).group(1)
        assert re.findall(r"(?:dw|db)\.split\(x:(\d+)\)", c.text) == [block, block]
        assert "dx.tensorize(x:" not in c.text and "dw.tensorize(x:" not in c.text
        chunks.add(block)
        assert dict(c.choices)["dx.stages"] in ("s1", "s3", "s4")
    assert len(chunks) > 1


def test_a_product_batched_over_heads_takes_a_head_a_program():
    """Decode's product is a row of weights against V for each (b, h): h is in both operands, a
    batch dimension, not a tile of the matrix units; the space blocks it by 1 and keeps schedules
    (every point tiled 16 heads at a time and was pruned for its registers before)."""
    prog = dt.load(ROOT / "examples" / "llm" / "decode_split.dt")
    space = prog.space(dict(b=1, h=32, l=32768, k=128, d=128), "bf16", limit=100)
    assert len(space) > 0 and all("out.block(b:1, h:1" in c.text or "out.block(h:1" in c.text for c in space)


def test_int8_operands_take_one_byte_and_deeper_reduction_tiles():
    """w8a8_matmul's int8 operands count one byte each in shared memory (its float32 scales, which
    the checked dtype follows, would make it four) and may take 128-deep reduction tiles: the
    example's 128 x 128 x 128 blocks in 3 stages (96 KiB) are in the space."""
    prog = dt.load(ROOT / "examples" / "llm" / "w8a8_matmul.dt")
    names = {c.name for c in prog.space(dict(m=4096, n=4096, k=4096),
                                        {"Xq": "i8", "Wq": "i8", "Sx": "f32", "Sw": "f32"}, "triton")}
    assert any("m128 n128 k128" in n and " s3" in n for n in names)
    assert any("m128 n256 k128" in n and " s4" in n for n in names)  # 192 KiB in int8


def test_tune_workers_leave_ctrl_c_to_the_search():
    """A terminal's Ctrl-C reaches dt tune's compiling workers too: they ignore it (the search
    stops them), instead of each printing a KeyboardInterrupt of its own."""
    import multiprocessing
    import signal
    from concurrent.futures import ProcessPoolExecutor
    from dt.tune.evaluate import leave_interrupts_to_the_search
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"),
                             initializer=leave_interrupts_to_the_search) as pool:
        assert pool.submit(signal.getsignal, signal.SIGINT).result() == signal.SIG_IGN
    assert signal.getsignal(signal.SIGINT) != signal.SIG_IGN  # the search's own is untouched
