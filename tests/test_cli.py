"""The dt command line: run, check, compile; exit codes."""
import os
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import numpy as np
import pytest

import dt
from dt import backends
from dt.cli import main


def test_check(capsys):
    assert main(["check", "examples/attention.dt"]) == 0
    assert "ok — 1 kernel(s) (attention_kernel)" in capsys.readouterr().out


def test_check_reports_errors_with_location(tmp_path, capsys):
    bad = tmp_path / "bad.dt"
    bad.write_text("Func f;\nIn A;\nVar x;\nf[x] = B[x];\nf.compile();\n")
    assert main(["check", str(bad)]) == 2
    err = capsys.readouterr().err
    assert f"{bad}:4:8: name error: unknown name 'B'" in err and "^" in err


def test_compile_writes_the_generated_code(tmp_path):
    out = tmp_path / "mm.py"
    assert main(["compile", "examples/matmul.dt", "--backend", "interp", "-o", str(out)]) == 0
    assert "def mm_kernel(pid" in out.read_text()


def test_run_reports_missing_sizes(capsys):
    assert main(["run", "examples/matmul.dt", "--size", "x=4", "--backend", "interp"]) == 2
    assert "--size y=N" in capsys.readouterr().err


class _WrongBackend:
    """Wraps the interpreter and perturbs one output element."""
    name = "wrong"

    def __init__(self):
        self.inner = backends.get("interp")
        self.capabilities = self.inner.capabilities

    def source(self, pipeline):
        return self.inner.source(pipeline)

    def compile(self, pipeline):
        run = self.inner.compile(pipeline)

        def wrong(tensors, scalars, sizes):
            outs = run(tensors, scalars, sizes)
            for o in outs.values():
                o.flat[-1] += np.float32(1.0)
            return outs
        return wrong


def test_run_exits_1_on_mismatch(capsys):
    backends.register("wrong", _WrongBackend())
    assert main(["run", "examples/relu.dt", "--size", "x=3", "--size", "y=5", "--backend", "wrong"]) == 1
    out = capsys.readouterr().out
    assert "MISMATCH" in out and "first mismatch at (2, 4)" in out


def test_console_script_runs():
    result = subprocess.run([sys.executable, "-m", "dt.cli", "run", "examples/add.dt", "--size", "x=3",
                             "--size", "y=300", "--backend", "interp", "--scalar", "alpha=2"],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "add_out: max abs error" in result.stdout


# ---------------------------------------------------------------- what a user expects (issue 25, item 11)

ROOT = Path(__file__).resolve().parents[1]


def _dt(*args, env=None):
    """`dt ARGS` in a fresh process, from the repository root."""
    return subprocess.run([sys.executable, "-m", "dt.cli", *args], capture_output=True, text=True, cwd=ROOT,
                          env=env, timeout=300)


def _without_gpu_or_interpreter() -> dict:
    """The environment of a laptop: no CUDA device visible, TRITON_INTERPRET not set."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["CUDA_VISIBLE_DEVICES"] = ""
    return env


def test_version(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0
    assert capsys.readouterr().out.strip() == f"dt {dt.__version__}"
    assert dt.__version__ == metadata.version("dt")  # one version: the package's is read from dt/__init__.py


def test_compile_triton_needs_no_gpu_and_writes_the_gpu_module():
    pytest.importorskip("torch")
    pytest.importorskip("triton")
    done = _dt("compile", "examples/dyt.dt", "--backend", "triton", env=_without_gpu_or_interpreter())
    assert done.returncode == 0, done.stderr
    assert "@triton.jit" in done.stdout and "return libdevice.tanh(x)" in done.stdout


def test_compile_triton_under_the_interpreter_still_writes_the_gpu_module(tmp_path):
    """Running under TRITON_INTERPRET=1 (as the tests do without a GPU) changes what runs, not
    what `dt compile` writes; --interpret asks for the interpreter's module."""
    pytest.importorskip("torch")
    pytest.importorskip("triton")
    env = {**_without_gpu_or_interpreter(), "TRITON_INTERPRET": "1"}
    done = _dt("compile", "examples/dyt.dt", "--backend", "triton", env=env)
    assert done.returncode == 0, done.stderr
    assert "libdevice.tanh" in done.stdout
    interpreted = _dt("compile", "examples/dyt.dt", "--backend", "triton", "--interpret", env=env)
    assert interpreted.returncode == 0, interpreted.stderr
    assert "libdevice" not in interpreted.stdout and "tl.exp(-2.0 * tl.abs(x))" in interpreted.stdout
    wrong = _dt("compile", "examples/dyt.dt", "--backend", "interp", "--interpret")
    assert wrong.returncode == 2 and "--interpret" in wrong.stderr


def test_run_triton_without_gpu_runs_under_the_interpreter_and_says_so():
    pytest.importorskip("torch")
    pytest.importorskip("triton")
    # softmax's kernel calls tl.sum, a @triton.jit function of Triton's own: the interpreter must
    # be on before triton is imported
    done = _dt("run", "examples/softmax.dt", "--size", "x=3", "--size", "y=5", "--backend", "triton", "--repeat", "0",
               env=_without_gpu_or_interpreter())
    assert done.returncode == 0, done.stderr
    assert "_softmax: max abs error" in done.stdout and "-> ok" in done.stdout
    assert "no CUDA GPU: running the Triton kernels under Triton's interpreter (TRITON_INTERPRET=1)" in done.stderr


def test_calling_the_triton_backend_without_gpu_or_interpreter_says_how():
    pytest.importorskip("torch")
    pytest.importorskip("triton")
    script = ("import numpy as np, dt\n"
              "prog = dt.load('examples/softmax.dt')\n"
              "try:\n"
              "    prog(A=np.ones((3, 5), np.float32), backend='triton')\n"
              "except dt.DTBackendError as e:\n"
              "    print(e.render())\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT,
                          env=_without_gpu_or_interpreter(), timeout=300)
    assert done.returncode == 0, done.stderr
    assert "the triton backend cannot run kernels here: no CUDA GPU is visible to torch, and TRITON_INTERPRET " \
           "is not set" in done.stdout
    assert "hint: run on a machine with an NVIDIA GPU, or set TRITON_INTERPRET=1" in done.stdout


def _run_attention(capsys, *extra) -> tuple[int, str]:
    code = main(["run", "examples/attention.dt", "--backend", "interp", "--dtype", "f16", "--repeat", "0",
                 "--size", "m=17", "--size", "l=33", "--size", "k=7", "--size", "n=65", *extra])
    return code, capsys.readouterr().out


def test_run_says_what_it_judged_against(capsys):
    code, out = _run_attention(capsys)
    assert code == 0
    assert "attention: max abs error" in out and "-> ok" in out
    assert "judged by |out - ref| <= rtol*|ref| + atol*max|ref| at every element: rtol 0.01, atol 0.005 " \
           "(the f16 defaults; --rtol, --atol)" in out
    closest = re.search(r"closest to its limit: \(\d+, \d+\): got \S+, want \S+, \|out - ref\| \S+ is (\d+)% "
                        r"of the \S+ allowed there", out)
    assert closest and int(closest[1]) <= 100


def test_run_takes_rtol_and_atol(capsys):
    code, out = _run_attention(capsys, "--rtol", "0", "--atol", "0")  # f16 against a float64 reference
    assert code == 1
    assert "-> MISMATCH" in out and "elements outside tolerance; first mismatch at (" in out
    assert "rtol 0, atol 0 (given)" in out
    assert _run_attention(capsys, "--rtol", "0.5", "--atol", "0.5")[0] == 0
    with pytest.raises(SystemExit):
        main(["run", "examples/relu.dt", "--rtol", "-1"])
    assert "--rtol" in capsys.readouterr().err


class _Recording:
    """The interpreter, recording the arrays each call receives."""
    name = "recording"

    def __init__(self):
        self.inner = backends.get("interp")
        self.capabilities = self.inner.capabilities
        self.received = []

    def source(self, pipeline):
        return self.inner.source(pipeline)

    def compile(self, pipeline):
        run = self.inner.compile(pipeline)

        def recorded(tensors, scalars, sizes):
            self.received.append({**{n: t.copy() for n, t in tensors.items()}, **scalars})
            return run(tensors, scalars, sizes)
        return recorded


@pytest.fixture
def recording():
    backend = _Recording()
    backends.register("recording", backend)
    return backend


def test_run_reads_inputs_from_npy_and_npz(tmp_path, capsys, recording):
    a = np.arange(-6, 9, dtype=np.float32).reshape(3, 5)
    np.save(tmp_path / "a.npy", a)
    assert main(["run", "examples/relu.dt", "--input", f"A={tmp_path / 'a.npy'}", "--backend", "recording",
                 "--repeat", "0"]) == 0
    out = capsys.readouterr().out
    assert "x=3 y=5" in out and f"A from {tmp_path / 'a.npy'}" in out  # the extents come from the file
    np.testing.assert_array_equal(recording.received[-1]["A"], a)

    gamma, beta = np.linspace(-1, 1, 7).astype(np.float16), np.ones(7, np.float16)
    np.savez(tmp_path / "dyt.npz", gamma=gamma, beta=beta, alpha=np.float64(0.25))
    assert main(["run", "examples/dyt.dt", "--inputs", str(tmp_path / "dyt.npz"), "--size", "x=2",
                 "--backend", "recording", "--repeat", "0"]) == 0
    out = capsys.readouterr().out
    assert "dtype f16" in out and "x=2 y=7" in out and "A random (seed 0)" in out  # the dtype of the files
    got = recording.received[-1]
    np.testing.assert_array_equal(got["gamma"], gamma)
    assert got["A"].shape == (2, 7) and got["A"].dtype == np.float16 and got["alpha"] == 0.25


def test_run_refuses_inputs_it_cannot_use(tmp_path, capsys):
    np.save(tmp_path / "a.npy", np.zeros((3, 5), np.float32))
    assert main(["run", "examples/relu.dt", "--input", f"B={tmp_path / 'a.npy'}"]) == 2
    assert "the program has no input or scalar 'B' (inputs: A)" in capsys.readouterr().err
    assert main(["run", "examples/relu.dt", "--input", f"A={tmp_path / 'a.npy'}", "--size", "x=4"]) == 2
    assert "--size x=4, but A" in capsys.readouterr().err
    (tmp_path / "bad.npy").write_text("not an array")
    assert main(["run", "examples/relu.dt", "--input", f"A={tmp_path / 'bad.npy'}"]) == 2
    assert f"cannot read {tmp_path / 'bad.npy'}" in capsys.readouterr().err
    np.save(tmp_path / "objects.npy", np.array([{}], dtype=object))  # loading it would unpickle
    assert main(["run", "examples/relu.dt", "--input", f"A={tmp_path / 'objects.npy'}"]) == 2
    assert f"cannot read {tmp_path / 'objects.npy'}" in capsys.readouterr().err


def test_dt_break_naming_no_func_warns(monkeypatch, capsys):
    monkeypatch.setenv("PYTHONBREAKPOINT", "0")  # a stop would not wait for a debugger command
    monkeypatch.setenv("DT_BREAK", "_smu")
    with pytest.warns(dt.debug.DTDebugWarning, match=r"breakpoint _smu names no Func of program 'softmax' "
                                                     r"\(its Funcs: _softmax, _sum; did you mean _sum\?\)"):
        assert main(["run", "examples/softmax.dt", "--size", "x=3", "--size", "y=5", "--repeat", "0"]) == 0
    done = _dt("run", "examples/softmax.dt", "--size", "x=3", "--size", "y=5", "--repeat", "0",
               env={**os.environ, "DT_BREAK": "_smu", "PYTHONBREAKPOINT": "0"})
    assert done.returncode == 0, done.stderr
    assert done.stderr.startswith("dt: warning: breakpoint _smu names no Func of program 'softmax'"), done.stderr


def test_dt_break_under_another_backend_warns(monkeypatch, capsys):
    if not backends.available("numba"):
        pytest.skip(f"the numba backend is not available: {backends.failures().get('numba')}")
    monkeypatch.setenv("PYTHONBREAKPOINT", "0")
    monkeypatch.setenv("DT_BREAK", "_sum")
    with pytest.warns(dt.debug.DTDebugWarning, match=r"breakpoints \(DT_BREAK=_sum\) are set, but program 'softmax' "
                                                     r"runs on backend 'numba', where they do nothing"):
        assert main(["run", "examples/softmax.dt", "--size", "x=3", "--size", "y=5", "--repeat", "0",
                     "--backend", "numba"]) == 0


def test_output_into_a_closed_pipe_exits_quietly():
    """`dt conformance --list | head -1`: the reader stops early; no BrokenPipeError traceback."""
    with subprocess.Popen([sys.executable, "-m", "dt.cli", "conformance", "--list"], cwd=ROOT,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE) as listing:
        assert listing.stdout.readline().strip()
        listing.stdout.close()  # the list is larger than the pipe's buffer: dt writes into a closed pipe
        err = listing.stderr.read().decode()
        listing.wait(timeout=300)
    assert "Traceback" not in err and "BrokenPipeError" not in err, err
    assert listing.returncode == 1


@pytest.mark.parametrize("option,value,fragment", [
    ("--seed", "-1", "an integer >= 0"), ("--seed", "1.5", "an integer >= 0"),
    ("--repeat", "-1", "an integer >= 0"), ("--repeat", "x", "an integer >= 0"),
    ("--rtol", "-1", "a finite number >= 0"), ("--rtol", "nan", "a finite number >= 0"),
    ("--atol", "inf", "a finite number >= 0"), ("--atol", "abc", "a finite number >= 0"),
])
def test_run_refuses_bad_numeric_options_as_usage_errors(option, value, fragment, capsys):
    with pytest.raises(SystemExit) as e:
        main(["run", "examples/relu.dt", "--size", "x=2", "--size", "y=3", "--backend", "interp", option, value])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {option}: {fragment}, got {value!r}" in err and "Traceback" not in err


def test_run_takes_seed_and_repeat_of_zero(capsys):
    assert main(["run", "examples/relu.dt", "--size", "x=2", "--size", "y=3", "--backend", "interp",
                 "--seed", "0", "--repeat", "0"]) == 0
    out = capsys.readouterr().out
    assert "random (seed 0)" in out and "then" not in out.split("first call")[1].splitlines()[0]


def test_run_takes_integer_scalars_and_fp8_inputs():
    """--scalar group=2 stays an integer (it indexes); --dtype f8e4m3 draws 8-bit inputs."""
    paged = ("examples/llm/paged_decode.dt --scalar group=2 --scalar scale=0.25 --size b=2 --size h=4 --size d=8 "
             "--size k=8 --size l=32 --size Kc_axis0=4 --size Kc_axis1=16 --size Kc_axis2=2 --size Vc_axis0=4 "
             "--size Vc_axis1=16 --size Vc_axis2=2 --size T_axis1=2 --backend interp").split()
    fp8 = "examples/llm/fp8_matmul.dt --size m=8 --size n=8 --size k=16 --dtype f8e4m3 --backend interp".split()
    for args in (paged, fp8):
        result = _dt("run", *args)
        assert result.returncode == 0, result.stderr
        assert "-> ok" in result.stdout


def test_run_takes_one_inputs_dtype(capsys):
    """--dtype Xq=i8 makes one input int8 beside the default's others (an exact i32 product), and
    the bf16 result is judged with bf16's tolerance; an input the program lacks is refused."""
    args = ["run", "examples/llm/w8a8_matmul.dt", "--size", "m=9", "--size", "n=5", "--size", "k=70", "--dtype", "f32",
            "--dtype", "Xq=i8", "--dtype", "Wq=i8", "--backend", "interp"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "dtype Xq=i8 Wq=i8 Sx=f32 Sw=f32" in out and "the bf16 defaults" in out
    assert main(args[:-2] + ["--dtype", "Q=i8", "--backend", "interp"]) != 0
    assert "which w8a8_matmul does not read" in capsys.readouterr().err


def test_run_reads_an_integer_scalar_from_an_npz_as_an_integer(tmp_path, capsys, recording):
    """start indexes K: an integer in the file stays one (as with --scalar start=2)."""
    shift = tmp_path / "shift.dt"
    shift.write_text("Func o; In K; SIn start; Var l;\no[l] = K[l + start];\no.compile();\n")
    k = np.arange(10, dtype=np.float32)
    np.savez(tmp_path / "shift.npz", K=k, start=np.int64(2))
    assert main(["run", str(shift), "--inputs", str(tmp_path / "shift.npz"), "--backend", "recording",
                 "--repeat", "0"]) == 0
    assert "start 2 from" in capsys.readouterr().out
    got = recording.received[-1]["start"]
    assert got == 2 and isinstance(got, (int, np.integer))


@pytest.mark.parametrize("args,fragment", [
    (["--size", "x=abc"], "--size takes name=integer, got 'x=abc'"),
    (["--size", "x=3.0"], "--size takes name=integer, got 'x=3.0'"),
    (["--size", "x=\u00b2"], "--size takes name=integer, got 'x=\u00b2'"),  # a digit to str.isdigit, not to int
    (["--size", "x"], "--size takes name=integer, got 'x'"),
    (["--size", "x=-1"], "--size gives 'x' = -1; extents must be at least 1"),
    (["--size", "x=0"], "--size gives 'x' = 0; extents must be at least 1"),
    (["--size", "q=3"], "--size names 'q', which is not a dimension of add"),
    (["--scalar", "alpha=abc"], "--scalar takes name=number, got 'alpha=abc'"),
])
def test_run_refuses_bad_sizes_and_scalars_as_usage_errors(args, fragment, capsys):
    given = {a.split("=")[0] for a in args[1::2]}
    defaults = [arg for d in ("x", "y") if d not in given for arg in ("--size", f"{d}=3")]
    assert main(["run", "examples/add.dt", "--backend", "interp", *defaults, *args]) == 2
    err = capsys.readouterr().err
    assert fragment in err and "extents gives" not in err and "extents names" not in err and "Traceback" not in err, err


def test_a_bad_size_exits_2_from_the_console_script():
    done = _dt("run", "examples/add.dt", "--size", "x=abc", "--size", "y=3")
    assert done.returncode == 2 and done.stderr == "dt: --size takes name=integer, got 'x=abc'\n", done.stderr


def test_unwritable_output_files_are_errors_naming_them(tmp_path, capsys):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    inside_a_file = str(blocker / "out.txt")  # NotADirectoryError: an OSError main() did not catch
    layernorm = str(ROOT / "examples" / "layernorm.dt")
    commands = [["compile", "examples/add.dt", "-o", inside_a_file],
                ["grad", layernorm, "-o", inside_a_file],
                ["grad", layernorm, "--save", "mean", "--forward", inside_a_file, "-o", str(tmp_path / "grad.dt")]]
    if Path("/dev/full").exists():  # the write itself fails (no space), after the file opened
        commands.append(["compile", "examples/add.dt", "-o", "/dev/full"])
    for command in commands:
        assert main(command) == 2, command
        err = capsys.readouterr().err
        path = command[command.index("--forward") + 1 if "--forward" in command else -1]
        assert err.startswith(f"dt: cannot write {path}: ") and "Traceback" not in err, err


def test_run_says_a_file_that_is_not_an_array_file_is_not_one(tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("1 2 3\n")
    for option in (["--input", f"A={tmp_path / 'notes.txt'}"], ["--inputs", str(tmp_path / "notes.txt")]):
        assert main(["run", "examples/relu.dt", *option]) == 2
        err = capsys.readouterr().err
        assert f"{tmp_path / 'notes.txt'}" in err and "is not a .npy or .npz file" in err, err
        assert "pickle" not in err and "unsafe" not in err, err


def test_lint_names_the_size_option_in_extent_errors(capsys):
    assert main(["lint", "examples/add.dt", "--size", "x=0", "--size", "y=3", "--no-compiled"]) == 2
    assert "--size gives 'x' = 0; extents must be at least 1" in capsys.readouterr().err
    assert main(["lint", "examples/add.dt", "--size", "q=3", "--no-compiled"]) == 2
    assert "--size names 'q', which is not a dimension of add" in capsys.readouterr().err


def test_conformance_and_lint_say_what_is_wrong_without_a_traceback(tmp_path, capsys):
    report = tmp_path / "missing" / "report.md"  # its folder does not exist
    assert main(["conformance", "--backend", "interp", "--ops", "rsum*", "--dtypes", "f32", "--report",
                 str(report)]) == 2
    assert f"dt: No such file or directory: {report}" in capsys.readouterr().err
    assert main(["lint", str(ROOT / "examples" / "add.dt"), "--size", "x=4"]) == 2
    assert "hint: pass --size y=N" in capsys.readouterr().err
