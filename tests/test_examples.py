"""Every example of the talk runs on the interpreter and matches the reference, at divisible
sizes and at sizes that divide nothing, in f32, f16 and bf16, through the API and `dt run`."""
import glob

import pytest

import dt
from dt.cli import main
from dt.testing import assert_close, random_inputs
from example_sizes import EXAMPLES_DIR, SIZES, cases, example_path


def test_every_example_has_sizes():
    assert sorted(p.split("/")[-1][:-3] for p in glob.glob(str(EXAMPLES_DIR / "*.dt"))) == sorted(SIZES)


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("name,extents", cases(), ids=lambda v: v if isinstance(v, str) else
                         "-".join(f"{k}{n}" for k, n in v.items()))
def test_example_on_interp(name, extents, dtype):
    prog = dt.load(example_path(name))
    args = random_inputs(prog, extents, dtype, seed=3)
    out = prog(backend="interp", **args)
    assert out.dtype == args[prog.inputs[0]].dtype
    assert out.shape == tuple(extents[d] for d in prog.checked.funcs[prog.outputs[0]].dims)
    assert_close(out, prog.reference(**args), dtype)


@pytest.mark.parametrize("name", sorted(SIZES))
def test_example_through_dt_run(name, capsys):
    extents = SIZES[name][-1]
    argv = ["run", str(example_path(name)), "--backend", "interp", "--repeat", "1", "--dtype", "f16"]
    for d, n in extents.items():
        argv += ["--size", f"{d}={n}"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "-> ok" in out and "MISMATCH" not in out
