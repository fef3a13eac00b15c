"""The conformance suite itself: its catalogue, its classification of outcomes, vendor files,
plugins, and that it catches deliberately broken backends with a message naming the fault."""
import json
import os
import re
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

import numpy as np
import pytest

from dt import backends
from dt.backends.base import Capabilities
from dt.ir.ops import DT_OPS
from dt.conformance import runner as R
from dt.conformance import vendor
from dt.conformance.broken import MUTATIONS, MutantBackend
from dt.conformance.case import Case
from dt.conformance.catalogue import CATALOGUE
from dt.ir.check.schedule import PRIMITIVES

ROOT = Path(__file__).resolve().parents[1]


def run_cli(*args, env=None, cwd=ROOT):
    return subprocess.run([sys.executable, "-m", "dt.cli", "conformance", *args], capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=300)


def results_of(backend, **selection):
    runner = R.Runner(backend)
    return [runner.run(r) for r in R.plan(CATALOGUE, **selection)]


# ---------------------------------------------------------------- the catalogue


def test_case_names_are_unique():
    names = [c.name for c in CATALOGUE]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)


def test_catalogue_covers_every_op_and_schedule_primitive():
    import dt
    used_ops, used_primitives = set(), set()
    for case in CATALOGUE:
        for schedule, text in case.schedules.items():
            used_ops |= R.required_ops(dt.loads(case.source(schedule)))
            used_primitives |= set(re.findall(r"\.(\w+)\(", text))
    assert DT_OPS - used_ops == set()
    assert set(PRIMITIVES) - used_primitives == set()


def _statements(text: str) -> list[str]:
    text = re.sub(r"#[^\n]*", "", text)
    return [" ".join(s.split()) for s in text.split(";") if s.strip()]


@pytest.mark.parametrize("example", sorted(p.stem for p in (ROOT / "examples").glob("*.dt")))
def test_talk_kernels_are_the_examples_verbatim(example):
    case = next((c for c in CATALOGUE if c.name == f"talk.{example}"), None)
    assert case is not None, f"examples/{example}.dt has no case talk.{example} in the catalogue"
    assert _statements(case.source("talk")) == _statements((ROOT / "examples" / f"{example}.dt").read_text())


@pytest.mark.slow
def test_interp_passes_the_whole_catalogue_in_f32():
    # Also proves each case's reference, sizes and schedules are sound (interp is the oracle's twin).
    results = results_of(backends.get("interp"), dtypes=["f32"])
    assert results
    assert [r.describe() for r in results if r.status != "pass"] == []


# ---------------------------------------------------------------- deliberately broken backends

CAUGHT_BY = {  # mutation -> (a case that must catch it, the schedule it fails under)
    "unmasked": ("rsum.exp", "rows"),
    "zero_identity": ("rmax.negative", "rows"),
    "full_groups": ("map.orders", "x_groups_of_3"),
    "hoisted_fusion": ("fuse_at.tile_loop", "y_loop"),
}


def test_every_mutant_has_a_catching_case():
    assert set(CAUGHT_BY) == set(MUTATIONS)


@pytest.mark.parametrize("mutation", sorted(MUTATIONS))
def test_broken_backend_is_caught_with_the_faulty_element(mutation, capsys):
    case, schedule = CAUGHT_BY[mutation]
    assert R.run_command(backend="interp", ops=[case], dtypes=["f32"]) == 0  # the case itself is sound
    capsys.readouterr()
    assert R.run_command(backend=MutantBackend(mutation), ops=[case], dtypes=["f32"]) == 1
    out, err = capsys.readouterr()
    assert re.search(rf"FAIL {re.escape(case)}/{schedule}/f32/\S+", out)
    assert "first mismatch at (" in out and "got " in out and "want " in out
    assert "failed or errored on backend broken-" in err


def test_the_summary_is_plain_text_with_every_failure_in_full(capsys):
    """The same text whatever is installed (it once depended on rich): the table, each failing
    run with its message, and the totals last."""
    runs = R.plan(CATALOGUE, ops=["rmax.negative"], dtypes=["f32"])
    assert R.run_command(backend=MutantBackend("zero_identity"), ops=["rmax.negative"], dtypes=["f32"]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "dt conformance: backend broken-zero_identity"
    assert [" ".join(line.split()) for line in lines[2:5]] == ["| op | f32 |", "| ---- | ------- |",
                                                               f"| rmax | {len(runs)} FAIL |"]
    failing = [i for i, line in enumerate(lines) if line.startswith("FAIL ")]
    assert [lines[i] for i in failing] == [f"FAIL {r.id}:" for r in runs]
    for i in failing:
        assert re.fullmatch(r"  out: max abs error \S+, max rel error \S+; first mismatch at \(\d+,\): got 0\.0, "
                            r"want -\S+ \(rtol 0\.0001, atol 1e-05 x max\|want\|\)", lines[i + 1]), lines[i + 1]
    assert re.fullmatch(rf"backend broken-zero_identity: {len(runs)} runs: {len(runs)} fail in \d+\.\d s", lines[-1])


def test_failures_carry_the_first_mismatch():
    results = results_of(MutantBackend("zero_identity"), ops=["rmax.negative"], dtypes=["f32"])
    failed = [r for r in results if r.status == "fail"]
    assert failed
    for r in failed:
        assert r.output == "out" and r.first_bad is not None and r.got == 0.0 and r.want < 0
        assert r.max_abs > 0 and r.max_rel > 0


# ---------------------------------------------------------------- classification


class Interp:
    """interp with other capabilities, or a compile/run that misbehaves."""

    def __init__(self, caps=None, compile_error=None, run_error=None, output_dtype=None):
        self._base = backends.get("interp")
        self.name = "interp-variant"
        self.capabilities = caps or self._base.capabilities
        self.compile_error, self.run_error, self.output_dtype = compile_error, run_error, output_dtype

    def source(self, pipeline):
        return self._base.source(pipeline)

    def compile(self, pipeline):
        if self.compile_error:
            raise self.compile_error
        fn = self._base.compile(pipeline)

        def run(tensors, scalars, sizes):
            if self.run_error:
                raise self.run_error
            outs = fn(tensors, scalars, sizes)
            return {n: o.astype(self.output_dtype) for n, o in outs.items()} if self.output_dtype else outs
        return run


def test_unsupported_dtypes_and_ops():
    caps = Capabilities(dtypes=frozenset({"f32"}), ops=DT_OPS - {"erf"})
    results = results_of(Interp(caps), ops=["erf", "exp"], dtypes=["f32", "bf16"])
    by = {(r.run.case.name, r.run.dtype): r for r in results}
    assert by[("exp", "f32")].status == "pass"
    assert by[("erf", "f32")].status == "unsupported" and "op(s) erf" in by[("erf", "f32")].message
    assert by[("exp", "bf16")].status == "unsupported" and "dtype bf16" in by[("exp", "bf16")].message


def _one_case(schedule="out.block(x:1, y:16);\nout.tensorize(y:8);\nout.compile();", reference=lambda A: np.exp(A)):
    return Case("probe", "Func out;\nIn A;\nVar x, y;\nout[x, y] = exp(A[x, y]);", {"s": schedule}, reference,
                ({"x": 3, "y": 20},), dtypes=("f32", "f16"))


@pytest.mark.parametrize("stage, backend, case, expected", [
    ("lower", Interp(), _one_case("out.block(y:16);\nout.tensorize(y:32);\nout.compile();"), "larger than the block"),
    ("lower", Interp(), _one_case("out.blok(y:16);\nout.compile();"), "unknown schedule primitive 'blok'"),
    ("compile", Interp(compile_error=RuntimeError("no kernel for you")), _one_case(),
     "RuntimeError: no kernel for you"),
    ("run", Interp(run_error=MemoryError("device out of memory")), _one_case(), "MemoryError: device out of memory"),
    ("reference", Interp(), _one_case(reference=lambda A, B: A), "takes B, which the program lacks"),
])
def test_errors_name_their_stage(stage, backend, case, expected):
    runner = R.Runner(backend)
    for run in R.plan([case]):
        result = runner.run(run)
        assert (result.status, result.stage) == ("error", stage)
        assert expected in result.message and result.traceback
        assert f"(stage {stage})" in result.describe()


def test_wrong_output_dtype_fails():
    results = results_of(Interp(output_dtype=np.float32), ops=["exp"], dtypes=["f16", "f32"])
    assert {r.status for r in results if r.run.dtype == "f32"} == {"pass"}
    f16 = [r for r in results if r.run.dtype == "f16"]
    assert f16 and all(r.status == "fail" and "dtype float32, want float16" in r.message for r in f16)


def test_zero_selected_cases_fail_loudly(capsys):
    assert R.run_command(backend="interp", ops=["no-such-op"]) == 1
    assert "zero cases ran" in capsys.readouterr().err


def test_a_backend_that_runs_nowhere_here_is_refused_before_any_case(capsys):
    source_only = Interp(Capabilities(dtypes=frozenset({"f32"}), ops=DT_OPS, devices=(),
                                      notes={"mode": "source only: the triton backend needs the 'torch' package"}))
    assert R.run_command(backend=source_only, ops=["exp"]) == 2
    err = capsys.readouterr().err
    assert "backend 'interp-variant' cannot run kernels here (source only: the triton backend needs" in err
    assert "TRITON_INTERPRET=1" in err and "pass" not in err


def test_all_unsupported_fails_loudly(capsys):
    nothing = Interp(Capabilities(dtypes=frozenset()))
    assert R.run_command(backend=nothing, ops=["exp"]) == 1
    assert "NO CONFORMANCE CASE RAN on backend interp-variant" in capsys.readouterr().err


# ---------------------------------------------------------------- vendor files


def _toml(tmp_path, text) -> str:
    path = tmp_path / "vendor.toml"
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize("text, message", [
    ('[[skip]]\ncase = "erf"\n', "needs a reason"),
    ('[[xfail]]\ncase = "erf"\nreason = "  "\n', "needs a reason"),
    ('[[skip]]\ncase = "erf"\nreason = "x"\ndtype = "bf16"\n', "unknown key(s) dtype"),
    ('[[skip]]\ncase = "erf"\nreason = "x"\ndtypes = ["f8"]\n', "dtypes must be"),
    ('[[skip]]\ncase = "erf"\nreason = "x"\nsizes_at_least = {x = "big"}\n', "sizes_at_least must be a table"),
    ('[[skip]]\ncase = "erf"\nreason = "x"\nsizes_at_least = 4\n', "sizes_at_least must be a table"),
    ('[[skipped]]\ncase = "erf"\nreason = "x"\n', "unknown table(s) skipped"),
    ('[[skip]\n', "not valid TOML"),
])
def test_bad_vendor_files_are_rejected(tmp_path, capsys, text, message):
    path = _toml(tmp_path, text)
    with pytest.raises(vendor.VendorFileError, match=re.escape(message)):
        vendor.load(path)
    assert R.run_command(backend="interp", ops=["erf"], vendor=path) == 2
    assert message in capsys.readouterr().err


def test_vendor_skip_xfail_xpass_and_unmatched(tmp_path, capsys):
    path = _toml(tmp_path, """
[[skip]]
case = "erf"
reason = "no erf on this device"

[[xfail]]
case = "rmax.negative"
reason = "max starts from 0 (bug 7)"

[[xfail]]
case = "exp"
dtypes = ["f32"]
reason = "exp was wrong once"

[[skip]]
case = "rmax.negative_typo"
reason = "a typo"
""")
    report = tmp_path / "report.json"
    code = R.run_command(backend=MutantBackend("zero_identity"), ops=["erf", "exp", "rmax.negative"],
                         dtypes=["f32"], vendor=path, report=str(report))
    out = capsys.readouterr().out
    assert code == 0  # every failure was expected
    statuses = {}
    for r in json.loads(report.read_text())["results"]:
        statuses.setdefault(r["case"], set()).add(r["status"])
    assert statuses == {"erf": {"skip"}, "exp": {"xpass"}, "rmax.negative": {"xfail"}}
    assert "xfail entry 2 (case = 'exp', dtypes = ['f32'])" in out and "passed (XPASS)" in out
    assert "skip entry 2 (case = 'rmax.negative_typo') matches no case" in out


def test_vendor_sizes_at_least_narrows_an_entry_to_large_runs(tmp_path, capsys):
    path = _toml(tmp_path, """
[[xfail]]
case = "rmax.negative"
sizes_at_least = {y = 13}
reason = "only large rows fail"
""")
    report = tmp_path / "report.json"
    code = R.run_command(backend=MutantBackend("zero_identity"), ops=["rmax.negative"], dtypes=["f32"], vendor=path,
                         report=str(report))
    assert code == 1  # the small rows' failures were not expected
    results = json.loads(report.read_text())["results"]
    assert {r["status"] for r in results} == {"fail", "xfail"}
    for r in results:
        assert r["status"] == ("xfail" if r["sizes"]["y"] >= 13 else "fail"), r["id"]
    assert "sizes_at_least = {y = 13}" not in capsys.readouterr().out  # no warning: the entry is exact


# ---------------------------------------------------------------- the command line and reports


def test_cli_lists_and_reports(tmp_path):
    listed = run_cli("--list", "--ops", "rmax.negative", "--dtypes", "f16")
    assert listed.returncode == 0
    assert listed.stdout.splitlines()[0] == "rmax.negative/rows/f16/x=1,y=1"
    md = tmp_path / "r.md"
    done = run_cli("--backend", "interp", "--ops", "talk.softmax", "--dtypes", "f32", "bf16", "--report", str(md))
    assert done.returncode == 0, done.stderr
    assert "| talk.softmax | 9 pass | 9 pass |" in md.read_text()
    assert run_cli("--report", str(tmp_path / "r.txt")).returncode == 2


def test_pytest_plugin_runs_the_suite():
    done = subprocess.run([sys.executable, "-m", "pytest", "dt/conformance", "--dt-backend", "interp",
                           "--dt-ops", "exp", "--dt-dtypes", "f32", "-q", "-p", "no:cacheprovider"],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "9 passed" in done.stdout and "| exp | 9 pass |" in done.stdout


# ---------------------------------------------------------------- out-of-tree backends


def _plugin(tmp_path, backend_name, module, source) -> dict:
    """A distribution on PYTHONPATH declaring `backend_name` in the entry-point group dt.backends."""
    (tmp_path / f"{module}.py").write_text(source)
    info = tmp_path / f"{module}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {module}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[dt.backends]\n{backend_name} = {module}:create\n")
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}


def test_plugin_that_fails_to_load_is_reported(tmp_path):
    env = _plugin(tmp_path, "acme", "acme_dt", 'raise ImportError("the ACME driver is not installed")\n')
    done = run_cli("--backend", "acme", "--ops", "exp", env=env)
    assert done.returncode == 2
    assert "backend 'acme' failed to load: ImportError: the ACME driver is not installed" in done.stderr
    via_pytest = subprocess.run([sys.executable, "-m", "pytest", "dt/conformance", "--dt-backend", "acme", "-q",
                                 "-p", "no:cacheprovider"], capture_output=True, text=True, cwd=ROOT, env=env,
                                timeout=300)
    assert via_pytest.returncode == pytest.ExitCode.USAGE_ERROR
    assert "the ACME driver is not installed" in via_pytest.stderr


def test_plugin_supporting_nothing_fails_the_pytest_session(tmp_path):
    env = _plugin(tmp_path, "nothing", "nothing_dt", (
        "from dt.backends.base import Capabilities\n"
        "class Nothing:\n"
        "    name = 'nothing'\n"
        "    capabilities = Capabilities(dtypes=frozenset())\n"
        "def create():\n"
        "    return Nothing()\n"))
    done = subprocess.run([sys.executable, "-m", "pytest", "dt/conformance", "--dt-backend", "nothing",
                           "--dt-ops", "exp", "-q", "-p", "no:cacheprovider"],
                          capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
    assert done.returncode == pytest.ExitCode.TESTS_FAILED, done.stdout
    assert "NO CONFORMANCE CASE RAN on backend nothing" in done.stdout


@pytest.mark.skipif(not any(e.name == "example" for e in entry_points(group="dt.backends")),
                    reason="the example backend is not installed: pip install -e dt/conformance/example_backend")
def test_example_backend_is_found_through_its_entry_point_and_passes():
    backend = backends.get("example")
    assert type(backend).__module__ == "dt_example_backend"
    # `dt conformance --backend example` runs all of it; here, a cross-section of every feature.
    results = results_of(backend, ops=["talk.*", "rmax.negative", "map.orders", "rsum.to_scalar"], dtypes=["f32", "bf16"])
    assert results and [r.describe() for r in results if r.status != "pass"] == []
