"""Every schedule dt ships is linted where it runs: each schedule of the GPU benchmark's rows
(benchmarks/gpu/cases.py: the table's and each device's tuned ones) at each row's shape and dtype, every
GPU schedule in examples/ and benchmarks/gpu/schedules/ at its header's `dt run` line's sizes
too (or without extents), and the CPU examples on the CPU's rules. A
warning is either absent or allowed in the file's header with the reason (`# allow: CODE --
why`): a fast schedule whose warning costs nothing here, or a slow row whose fix dt lacks."""
import re
import sys
from pathlib import Path

import pytest

import dt
from dt.lint import allowed

ROOT = Path(__file__).resolve().parents[1]
RUN_SIZES = re.compile(r"dt run \S+((?: --size \w+=\d+)+)")


class Shaped:
    """An input as lint takes it: a shape."""

    def __init__(self, shape):
        self.shape = shape


def run_sizes(path: Path) -> dict[str, int] | None:
    m = RUN_SIZES.search(path.read_text())
    return dict((d, int(n)) for d, n in re.findall(r"--size (\w+)=(\d+)", m.group(1))) if m else None


def gpu_targets():
    """(schedule, description, lint arguments) for every GPU schedule and where it runs."""
    cases = pytest.importorskip("cases", reason="the benchmark's rows need torch (benchmarks/gpu/cases.py)")
    seen: dict[Path, list] = {}
    for case in cases.cases(cases.KERNELS):
        extents = case.kernel.extents(case.shape)
        inputs = {n: Shaped(tuple(extents[d] for d in dims)) for n, dims in case.kernel.inputs.items()}
        sizes = {d: extents[d] for d in case.kernel.dt_sizes}
        # the row's schedule on each device with tuned schedules (schedules/tuned/<device>/), each file once
        devices = cases.tuned_devices() or ["cpu"]
        for path in dict.fromkeys(cases.schedule_for(case, device=d).resolve() for d in devices):
            seen.setdefault(path, []).append((case.title, dict(sizes=sizes, dtype=case.dtype, **inputs)))
    files = sorted(p.resolve() for p in (ROOT / "examples").glob("*.dt")) + \
        sorted(p.resolve() for p in (ROOT / "examples" / "llm").glob("*.dt")) + \
        sorted(p.resolve() for p in (ROOT / "benchmarks" / "gpu" / "schedules").rglob("*.dt"))
    for path in files:  # and where their header runs them (no extents: the warnings no extent decides)
        sizes = run_sizes(path)
        seen.setdefault(path, []).append((f"dt run sizes {sizes}", dict(sizes=sizes, dtype="bf16")) if sizes else
                                         ("no extents", dict(dtype="bf16")))
    return seen


def violations(path: Path, runs, backend: str) -> list[str]:
    prog = dt.load(path)
    allows = allowed(path.read_text())
    found = []
    for where, arguments in runs:
        for w in prog.lint(backend=backend, **arguments):
            if w.code not in allows:
                found.append(f"{path.relative_to(ROOT)} at {where}:\n{w}")
    return found


@pytest.mark.slow
def test_every_gpu_schedule_lints_clean_or_says_why():
    found = [v for path, runs in gpu_targets().items() for v in violations(path, runs, "triton")]
    assert not found, f"{len(found)} performance warnings not allowed in the file's header:\n\n" + "\n\n".join(found)


def test_every_cpu_example_lints_clean_or_says_why():
    found = []
    for path in sorted((ROOT / "examples" / "cpu").glob("*.dt")):
        sizes = run_sizes(path)
        assert sizes is not None, f"{path}: its header has no `dt run ... --size` line"
        found += violations(path, [(f"dt run sizes {sizes}", dict(sizes=sizes, dtype="f32"))], "numba")
    assert not found, "\n\n".join(found)


def test_allow_lines_give_a_reason():
    for path in ROOT.glob("**/*.dt"):
        for line in path.read_text().splitlines():
            if re.match(r"\s*#\s*allow:", line):
                assert re.match(r"\s*#\s*allow:\s*[a-z-]+\s*--\s*\S", line), f"{path}: {line!r} gives no reason"
                code = line.split(":", 1)[1].split("--")[0].strip()
                assert code in dt.lint.all_codes(dt.backends.get("triton")), f"{path}: {line!r} names no warning"


sys.path.insert(0, str(ROOT / "benchmarks" / "gpu"))


def test_a_fused_producer_read_back_by_another_kernel_is_not_recomputed_there():
    """group norm's d_rstd is computed in d_mean's kernel and stored; grad_X, blocked along p, reads
    it back in every program: a load, not a computation (the lint counted it 4 times)."""
    prog = dt.load(ROOT / "benchmarks" / "gpu" / "schedules" / "group_norm_grad.dt")
    sizes = {"b": 2, "c": 64, "s": 4096, "p": 4096, "g": 32, "cg": 2}
    codes = [w.code for w in prog.lint(sizes, backend="triton")]
    assert "recomputed" not in codes, codes
    # a producer fused where a loop repeats it is still reported
    fused = dt.loads("Func o, p;\nIn A;\nVar x, y;\np[x] = exp(A[x, 0]);\no[x, y] = p[x] * A[x, y];\n"
                     "o.block(x:1, y:128);\no.tensorize(y:128);\np.fuse_at(o, y);\no.compile();\n")
    assert "recomputed" in [w.code for w in fused.lint({"x": 64, "y": 4096}, backend="triton")]
