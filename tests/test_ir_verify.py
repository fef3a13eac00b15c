"""The scheduled IR's verifier (dt.ir.verify), its dtypes and its printer (dt.ir.printer)."""
from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
from pathlib import Path

import pytest

import dt
from dt.ir import scheduled as S
from dt.ir.index_expr import IVar
from dt.ir.nesting import MAX_NESTING
from dt.ir.ops import result_dtype
from dt.ir.printer import ir_text
from dt.ir.verify import IRVerificationError, verify

ROOT = Path(__file__).resolve().parents[1]
SOFTMAX = ROOT / "examples" / "softmax_safe.dt"
MATMUL = ROOT / "examples" / "matmul.dt"


def _pipeline(path=SOFTMAX, dtype="f32") -> S.Pipeline:
    return dt.load(path).pipeline(dtype)


def _edit(pipeline: S.Pipeline, edit) -> S.Pipeline:
    """`pipeline` with `edit(body) -> body` applied to its first kernel's body."""
    kernel = pipeline.kernels[0]
    return dataclasses.replace(pipeline, kernels=(dataclasses.replace(kernel, body=edit(kernel.body)),)
                               + pipeline.kernels[1:])


def _in_loops(body, fn):
    """body with fn applied to each statement, inside loops too."""
    out = []
    for s in body:
        if isinstance(s, S.For):
            s = dataclasses.replace(s, body=_in_loops(s.body, fn))
        out.append(fn(s))
    return tuple(out)


@pytest.mark.parametrize("path", sorted((ROOT / "examples").glob("*.dt")), ids=lambda p: p.stem)
def test_every_example_lowers_to_ir_the_verifier_accepts(path):
    for dtype in ("f32", "bf16"):
        assert verify(_pipeline(path, dtype)) is not None


def _break_ref(body):
    return (S.Assign("ghost", S.Ref("never_assigned", (), "f32"), "ghost"),) + body


def _break_store(body):
    def fn(s):
        if isinstance(s, S.Store):
            return dataclasses.replace(s, indices=s.indices[::-1])
        return s
    return _in_loops(body, fn)


def _break_index(body):
    return (S.Let("stride", IVar("undefined_SIZE")),) + body


def _break_twice(body):
    let = next(s for s in body if isinstance(s, S.Let))
    return (let,) + body


def _break_reduce(body):
    def fn(s):
        if isinstance(s, S.Assign) and isinstance(s.value, S.Binary) and isinstance(s.value.b, S.Reduce):
            return dataclasses.replace(s, value=dataclasses.replace(
                s.value, b=dataclasses.replace(s.value.b, axis="nowhere")))
        return s
    return _in_loops(body, fn)


def _break_depth(body):
    value = S.Literal(1.0, "f32")
    for _ in range(MAX_NESTING + 1):
        value = S.Unary("neg", value)
    return (S.Assign("deep", value, "deep"),) + body


def _break_boolean_store(body):
    def fn(s):
        if isinstance(s, S.Store):
            return dataclasses.replace(s, value=S.Binary("<", s.value, S.Literal(0.0, s.value.dtype)))
        return s
    return _in_loops(body, fn)


def _break_let_value(body):
    return (S.Assign("half", S.Literal(0.5, "f32"), "half"), S.LetValue("rounds", S.Ref("half", (), "f32"))) + body


@pytest.mark.parametrize("breakage, message", [
    (_break_ref, "reads tile 'never_assigned' before any assignment"),
    (_break_store, "it must be full-size over the store's axes"),
    (_break_index, "reads undefined_SIZE, bound nowhere"),
    (_break_twice, "is bound twice"),
    (_break_reduce, "reduces over 'nowhere'"),
    (_break_depth, "levels deep"),
    (_break_boolean_store, "holds bool values"),
    (_break_let_value, "a LetValue takes a tile holding one integer"),
])
def test_the_verifier_names_each_broken_invariant(breakage, message):
    broken = _edit(_pipeline(), breakage)
    with pytest.raises(IRVerificationError, match=message) as info:
        verify(broken)
    assert "_softmax_kernel" in str(info.value)


def test_an_ir_node_of_an_op_the_table_lacks_cannot_be_made():
    with pytest.raises(ValueError, match="'softsign' is not an op of dt.ir.ops"):
        S.Unary("softsign", S.Literal(1.0, "f32"))


def test_an_op_of_the_wrong_arity_is_refused():
    pipeline = _pipeline()

    def fn(s):
        if isinstance(s, S.Assign) and isinstance(s.value, S.Binary) and s.value.op == "maximum":
            return dataclasses.replace(s, value=S.Binary("exp", s.value.a, s.value.b))
        return s
    with pytest.raises(IRVerificationError, match="'exp' is not an op of 2 operand"):
        verify(_edit(pipeline, lambda body: _in_loops(body, fn)))


def test_operands_over_different_axes_are_refused():
    pipeline = _pipeline(MATMUL)

    def fn(s):
        if isinstance(s, S.Store):
            other = S.IndexOf(pipeline_axes[0], "f32")
            return dataclasses.replace(s, value=S.Binary("+", s.value, other))
        return s

    pipeline_axes = [s.name for s in S.walk_statements(pipeline.kernels[0].body) if isinstance(s, S.Axis)]
    with pytest.raises(IRVerificationError, match="operands of Binary over different axes"):
        verify(_edit(pipeline, lambda body: _in_loops(body, fn)))


W8A8 = ROOT / "examples" / "llm" / "w8a8_matmul.dt"
INT8 = {"Xq": "i8", "Wq": "i8", "Sx": "f32", "Sw": "f32"}


def _in_values(body, fn):
    """body with fn applied to every node of each Assign's value, operands first, inside loops too."""
    def rewrite(e):
        return fn(S.with_children(e, tuple(map(rewrite, S.texpr_children(e)))))
    return _in_loops(body, lambda s: dataclasses.replace(s, value=rewrite(s.value)) if isinstance(s, S.Assign) else s)


def _retyped(fn):
    """An edit of a body: fn applied to its Dots, and to the Full that starts their accumulator."""
    return lambda body: _in_values(body, lambda e: fn(e) if isinstance(e, (S.Dot, S.Full)) else e)


@pytest.mark.parametrize("path, dtype, edit, message", [
    # an i8 x i8 product accumulating in f32, as a float product would
    (W8A8, INT8, _retyped(lambda e: dataclasses.replace(e, acc_dtype="f32") if isinstance(e, S.Dot) else e),
     "a product of i8 and i8 accumulates in f32: two i8 operands accumulate in i32, any others in f32 or f64"),
    # a float product accumulating in i32
    (MATMUL, "bf16", _retyped(lambda e: dataclasses.replace(e, acc_dtype="i32") if isinstance(e, S.Dot) else e),
     "a product of bf16 and bf16 accumulates in i32"),
    # an i32 product added to an f32 accumulator (declared f32 and read as f32)
    (W8A8, INT8, _retyped(lambda e: dataclasses.replace(e, acc=dataclasses.replace(e.acc, dtype="f32"))
                          if isinstance(e, S.Dot) else dataclasses.replace(e, dtype="f32")),
     "a product in i32 adds to an accumulator of f32"),
    # the accumulator declared f32, the product reading it as the i32 it makes
    (W8A8, INT8, _retyped(lambda e: dataclasses.replace(e, dtype="f32") if isinstance(e, S.Full) else e),
     "reads 'k_accumulator' as i32, assigned in f32"),
], ids=["i8-product-in-f32", "bf16-product-in-i32", "accumulator-f32", "accumulator-declared-f32"])
def test_the_verifier_refuses_a_product_whose_dtype_disagrees_with_its_accumulator(path, dtype, edit, message):
    pipeline = dt.load(path).pipeline(dtype)
    assert verify(pipeline) is pipeline
    with pytest.raises(IRVerificationError, match=re.escape(message)):
        verify(_edit(pipeline, edit))


def test_the_verifier_refuses_a_tile_reassigned_in_another_dtype():
    def fn(s):  # the product's update cast to f32: k_accumulator starts as i32
        if isinstance(s, S.Assign) and isinstance(s.value, S.Dot):
            return dataclasses.replace(s, value=S.Cast(s.value, "f32"))
        return s
    with pytest.raises(IRVerificationError, match="reassigned in f32, first assigned in i32"):
        verify(_edit(dt.load(W8A8).pipeline(INT8), lambda body: _in_loops(body, fn)))

def test_every_tile_expression_carries_the_dtype_the_lowering_chose():
    pipeline = _pipeline(MATMUL, "bf16")
    nodes = [n for s in S.walk_statements(pipeline.kernels[0].body) if isinstance(s, (S.Assign, S.Store))
             for n in S.walk_texpr(s.value)]
    loads = [n for n in nodes if isinstance(n, S.Load)]
    dots = [n for n in nodes if isinstance(n, S.Dot)]
    assert loads and all(n.dtype == "bf16" for n in loads)  # the matrix units take bf16 as it is
    assert dots and all(n.dtype == "f32" and n.acc_dtype == "f32" for n in dots)  # and accumulate in f32
    softmax = _pipeline(SOFTMAX, "bf16")
    for s in S.walk_statements(softmax.kernels[0].body):
        if isinstance(s, (S.Assign, S.Store)):
            for n in S.walk_texpr(s.value):
                if isinstance(n, S.Binary) and n.op == "==":
                    assert n.dtype == "bool"
                elif isinstance(n, (S.Load, S.Reduce)):
                    assert n.dtype == "f32"  # bf16 inputs are computed on in f32


@pytest.mark.parametrize("op, operands, expected", [
    ("exp", ("bf16",), "bf16"), ("+", ("f32", "f32"), "f32"), ("+", ("bf16", "f32"), "f32"),
    ("*", ("f64", "f32"), "f64"), ("+", ("f16", "bf16"), "f32"), ("<", ("f32", "f32"), "bool"),
    ("and", ("bool", "bool"), "bool"), ("where", ("bool", "bf16", "bf16"), "bf16"),
    ("where", ("f32", "bool", "bool"), "bool"), ("maximum", ("bool", "f64"), "f64"),
])
def test_result_dtypes_follow_the_op_tables_rules(op, operands, expected):
    assert result_dtype(op, operands) == expected


def test_the_ir_printer_shows_each_statement_with_its_dtype_and_axes():
    text = ir_text(_pipeline(SOFTMAX))
    assert text.startswith("pipeline softmax_safe: compute f32\n  inputs A: f32[x, y]\n")
    assert "kernel _softmax_kernel computes _softmax in (x_SIZE + 3) // 4 programs (warps 8):  # line 13" in text
    # the max's walk: its whole tiles, every lane valid, then the last, cut tile
    assert "  for y_iter in range(0, y_SIZE // 512 * 512, 512):  # reduction loop over y, line 11" in text
    assert "    y_max: f32[x] = maximum(y_max_accumulator, rmax(A, y))  # line 11" in text
    assert "  for y_iter_2 in range(y_SIZE // 512 * 512, y_SIZE, 512):  # tail loop over y, line 11" in text
    assert "    y_max_2: f32[x] = maximum(y_max_accumulator, rmax(where(expand(valid(y_2), [x, y_2]), A_2, -inf), " \
           "y_2))" in text
    assert "    store _softmax[x, y_3] = _softmax  # line 13" in text
    assert dt.load(SOFTMAX).ir("f32") == text


def test_dt_compile_prints_the_ir():
    run = subprocess.run([sys.executable, "-m", "dt.cli", "compile", str(MATMUL), "--backend", "ir", "--dtype",
                          "bf16"], capture_output=True, text=True, cwd=ROOT)
    assert run.returncode == 0, run.stderr
    assert "dot(" in run.stdout and ", f32)" in run.stdout
    assert "load(A[x, k], bf16)" in run.stdout or "load(A[" in run.stdout


def test_a_loop_bound_from_the_data_prints_as_a_let_of_its_tile():
    text = ir_text(dt.load(ROOT / "examples" / "llm" / "topk.dt").pipeline("f32"))
    assert "let v_rounds = v_entering" in text
    assert "for i_round in range(0, v_rounds, 1):" in text
