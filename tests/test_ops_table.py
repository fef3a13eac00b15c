"""The op table (dt.ir.ops) is the one definition of DT's element-wise ops: the grammar, the Python
API, the reference evaluator, the conformance catalogue and each backend's supported ops derive
from it, and a backend lacking an op says so at compile time."""
from __future__ import annotations

import numpy as np
import pytest

import dt
from dt import backends
from dt.backends.render import supported_ops
from dt.conformance.catalogue import CATALOGUE
from dt.ir.ops import DT_OPS, FUNCTIONS, OPS, OPS_LIST, REDUCTIONS

ARGUMENTS = {1: "A[x]", 2: "A[x], B[x]", 3: "A[x] > 0, A[x], B[x]"}


def _program(name: str, arity: int):
    return dt.loads(f"Func f;\nIn A, B;\nVar x;\nf[x] = {name}({ARGUMENTS[arity]}) + 0 * B[x];\n"
                    "f.block(x:4);\nf.compile();", name="ops")


@pytest.mark.parametrize("op", FUNCTIONS.values(), ids=lambda op: op.name)
def test_each_function_of_the_table_is_dt_text_and_python_api(op):
    assert getattr(dt, op.name).__name__ == op.name
    rng = np.random.default_rng(0)
    a, b = rng.uniform(0.5, 2.0, 7), rng.uniform(0.5, 2.0, 7)
    prog = _program(op.name, op.arity)
    operands = {1: (a,), 2: (a, b), 3: (a > 0, a, b)}[op.arity]
    with np.errstate(all="ignore"):
        expected = np.asarray(op.reference(*operands), dtype=np.float64)
    np.testing.assert_allclose(prog.reference(A=a, B=b), expected, rtol=1e-12)


def test_the_language_reference_lists_every_function():
    from pathlib import Path
    rows = [line for line in (Path(__file__).resolve().parents[1] / "docs" / "language.md").read_text().splitlines()
            if "element-wise functions of" in line]
    listed = {word.strip("`(),") .split("(")[0] for line in rows for word in line.split("|")[1].split()}
    assert set(FUNCTIONS) - {"where"} <= listed, set(FUNCTIONS) - {"where"} - listed


def test_the_python_api_calls_operators_by_their_table_name():
    assert dt.eq.__name__ == "eq" and dt.ne.__name__ == "ne"
    x = dt.Var("x")
    assert dt.eq(1.0, x).op == OPS["=="].name


@pytest.mark.parametrize("name, args", [("exp", 2), ("maximum", 1), ("where", 2)])
def test_a_function_called_with_the_wrong_arity_is_a_dt_error(name, args):
    with pytest.raises(dt.DTError, match=f"{name} takes {FUNCTIONS[name].arity} argument"):
        getattr(dt, name)(*([1.0] * args))
    with pytest.raises(dt.DTSyntaxError, match=f"{name} takes {FUNCTIONS[name].arity} argument"):
        dt.loads(f"Func f;\nIn A;\nVar x;\nf[x] = {name}({', '.join(['A[x]'] * args)});\nf.compile();")


def test_an_unknown_function_lists_the_tables_functions():
    with pytest.raises(dt.DTNameError) as info:
        dt.loads("Func f;\nIn A;\nVar x;\nf[x] = qqq(A[x]);\nf.compile();")
    hint = info.value.hint
    assert all(name in hint for name in FUNCTIONS) and all(r.function in hint for r in REDUCTIONS.values())


@pytest.mark.parametrize("backend", ["interp", "numba", "triton", "example"])
def test_a_backend_supports_exactly_the_keys_of_its_rendering_table(backend):
    if backend not in backends.names():
        pytest.skip(f"backend {backend} is not installed")
    caps = backends.get(backend).capabilities
    assert caps.ops == DT_OPS  # every built-in backend renders every op today ...
    from importlib import import_module
    table = {"interp": "dt.backends.numpy.codegen", "numba": "dt.backends.numba_cpu.expr",
             "triton": "dt.backends.triton.expressions", "example": "dt_example_backend"}[backend]
    module = import_module(table)
    assert caps.ops == supported_ops(module.OPS, scans=module.SCAN)  # ... and says so through its tables


@pytest.mark.parametrize("backend, table", [("interp", "dt.backends.numpy.codegen"),
                                            ("numba", "dt.backends.numba_cpu.expr"),
                                            ("triton", "dt.backends.triton.expressions")])
def test_an_op_missing_from_a_rendering_table_is_a_backend_error_at_its_dt_line(backend, table, monkeypatch):
    from importlib import import_module
    module = import_module(table)
    monkeypatch.delitem(module.OPS, "sigmoid")
    prog = dt.loads("Func f;\nIn A;\nVar x;\nf[x] = A[x] * sigmoid(A[x]);\nf.block(x:4);\nf.compile();",
                    name="missing")
    with pytest.raises(dt.DTBackendError, match=f"the {backend} backend does not support the op 'sigmoid'") as info:
        prog.source(backend)
    assert info.value.loc is not None and info.value.loc.line == 4


def test_the_catalogue_has_every_check_of_the_table():
    cases = {c.name: c for c in CATALOGUE}
    for op in OPS_LIST:
        for check in op.checks:
            case = cases[check.name]
            assert case.reference is check.expected
            assert list(case.domains.values()) == list(check.domains)
            written = check.expression or (f"{op.name}(" if op.syntax == "function" else f" {op.name} ")
            assert written in case.algorithm, (check.name, case.algorithm)
