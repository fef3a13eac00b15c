"""The dt command line: run, check, compile; exit codes."""
import subprocess
import sys

import numpy as np

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
