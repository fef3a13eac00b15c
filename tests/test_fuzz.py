"""Fuzzing: mutated DT programs and bad calls fail only with a DTError, never touch the inputs,
and whatever runs agrees with the reference.

Each test draws a few hundred cases in CI. A longer run (docs/security.md gives the command):

    DT_FUZZ_EXAMPLES=20000 python -m pytest tests/test_fuzz.py -q -p no:cacheprovider

Each run draws from a new seed; on a failure the report shows the falsifying case (the mutated
source or the call) and `DT_FUZZ_SEED=N`, which runs the same cases again.
"""
from __future__ import annotations

import os
import random
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, note, seed, settings
from hypothesis import strategies as st

import dt
from dt.errors import DTError
from dt.testing import compare, random_inputs

EXAMPLES = int(os.environ.get("DT_FUZZ_EXAMPLES", "300"))
SEED = int(os.environ.get("DT_FUZZ_SEED") or random.randrange(2 ** 32))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, print_blob=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.filter_too_much])

ROOT = Path(__file__).resolve().parents[1]
BASES = sorted(p.read_text() for p in (ROOT / "examples").glob("*.dt"))
# Text a mutation inserts: the language's own tokens, numbers at and past every limit, and
# characters that have broken lexers, line counting and generated code before.
TOKENS = ("Func", "In", "SIn", "Var", "RVar", ";", ",", "[", "]", "(", ")", "=", ".", ":", "/", "+", "-", "*",
          "**", "<=", "==", "rsum", "rmax", "rmin", "rdot", "exp", "where", "len", "reshape", "pow", "maximum",
          "block", "tensorize", "map", "fuse_at", "compute_with", "inline", "num_warps", "num_stages",
          "compile", "compile_to_kernel", "persistent", "tma", "x", "y", "k", "A", "B", "_sum", "backend",
          "sizes", "K_global", "x_SIZE", "pid", "np", "tl", "range", "0", "1", "-1", "3", "1e400", "0.5",
          str(2 ** 20 + 1), str(2 ** 32), str(10 ** 26), "\x00", "\ufeff", "\u2028", "\x85", "\f", "\r",
          '"""', "\\U", "é", "#", "\n")
_TOKEN = re.compile(r"\w+|\s+|.", re.S)


@st.composite
def mutated_programs(draw) -> str:
    tokens = _TOKEN.findall(draw(st.sampled_from(BASES)))
    for _ in range(draw(st.integers(1, 4))):
        i = draw(st.integers(0, len(tokens) - 1))
        kind = draw(st.sampled_from(("insert", "delete", "replace", "swap", "duplicate_line", "delete_line")))
        if kind == "insert":
            tokens.insert(i, draw(st.sampled_from(TOKENS)))
        elif kind == "delete":
            del tokens[i:i + draw(st.integers(1, 3))]
        elif kind == "replace":
            words = [t for t in tokens if t.strip()]
            tokens[i] = draw(st.sampled_from(words + list(TOKENS)))
        elif kind == "swap":
            j = draw(st.integers(0, len(tokens) - 1))
            tokens[i], tokens[j] = tokens[j], tokens[i]
        else:
            lines = "".join(tokens).split("\n")
            n = draw(st.integers(0, len(lines) - 1))
            lines[n:n + 1] = [lines[n], lines[n]] if kind == "duplicate_line" else []
            tokens = _TOKEN.findall("\n".join(lines))
        if not tokens:
            tokens = [";"]
    return "".join(tokens)


def _dims(prog) -> list[str]:
    return list(prog.checked.dim_kinds)


def _snapshot(args: dict) -> dict:
    return {k: v.copy() if isinstance(v, np.ndarray) else v for k, v in args.items()}


def _assert_untouched(args: dict, before: dict):
    for k, v in before.items():
        if isinstance(v, np.ndarray):
            nan_aware = v.dtype.kind in "fc"  # equal_nan needs a numeric dtype
            assert np.array_equal(args[k], v, equal_nan=nan_aware), f"input {k} was modified"


def _run_and_check(prog, extents: dict, backend: str):
    """Run `prog` on seeded inputs: a DTError is an accepted outcome; anything else that runs
    must leave the inputs alone and agree with the reference."""
    try:
        args = random_inputs(prog, extents, "f32", seed=3)
    except DTError:
        return
    bound = prog.input_dims
    sizes = {d: n for d, n in extents.items() if d not in bound} or None
    before = _snapshot(args)
    try:
        out = prog(backend=backend, sizes=sizes, **args)
    except DTError:
        _assert_untouched(args, before)
        return
    _assert_untouched(args, before)
    ref = prog.reference(sizes=sizes, **args)
    outs, refs = (out, ref) if isinstance(out, dict) else ({0: out}, {0: ref})
    for name in refs:
        result = compare(outs[name], refs[name], "f32", rtol=1e-3, atol=1e-4)
        assert result.ok, f"output {name}: {result}"


def _load_run_and_check(source: str, extent: int, backend: str):
    note(f"run these cases again with DT_FUZZ_SEED={SEED}")
    try:
        prog = dt.loads(source, name="fuzz", file="fuzz.dt")
    except DTError as e:
        assert e.loc is not None and e.loc.file == "fuzz.dt" and e.loc.line >= 1, e.render()
        assert "^" in e.render(), e.render()
        return
    _run_and_check(prog, {d: extent for d in _dims(prog)}, backend)


@seed(SEED)
@FUZZ
@given(source=mutated_programs(), extent=st.integers(1, 9))
def test_mutated_programs_fail_only_with_located_dt_errors(source, extent):
    _load_run_and_check(source, extent, "interp")


@pytest.mark.slow
@seed(SEED)
@settings(FUZZ, max_examples=max(EXAMPLES // 10, 1))
@given(source=mutated_programs(), extent=st.integers(1, 9))
def test_mutated_programs_on_numba(source, extent):
    """A tenth as many cases: each new program costs a Numba compilation."""
    if not dt.backends.available("numba"):
        pytest.skip(f"backend numba is not available: {dt.backends.failures().get('numba')}")
    _load_run_and_check(source, extent, "numba")


SOFTMAX = (ROOT / "examples" / "softmax_safe.dt").read_text()
SCALED = """Func out;
In A;
SIn alpha;
Var x, y;
out[x, y] = alpha * A[x, y];
out.block(x:4);
out.tensorize(x:2, y:8);
out.compile();
"""
# Values no argument should take, and some it may.
ODD_VALUES = (None, "A", b"A", 1j, True, 2.5, float("nan"), float("inf"), -1, 0, 2 ** 63, 10 ** 400, [1.0, 2.0],
              [[1.0]], (), {}, object(), np.float32(1.5), np.int64(3), np.array(2.0), np.zeros((0, 3)),
              np.zeros((3,)), np.ones((2, 3), np.int32), np.ones((2, 3), np.complex64), np.ones((2, 3), bool),
              np.array(["a"]), np.ones((2, 3, 1)))


@st.composite
def bad_calls(draw):
    """A call of one of two programs with some arguments replaced, dropped, renamed or added."""
    source = draw(st.sampled_from((SOFTMAX, SCALED)))
    a = np.random.default_rng(0).standard_normal((3, 5)).astype(np.float32)
    args: dict = {"A": a} if source == SOFTMAX else {"A": a, "alpha": 0.5}
    kwargs: dict = {}
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(("value", "drop", "rename", "extra", "sizes", "backend", "positional")))
        name = draw(st.sampled_from(sorted(args) or ["A"]))
        if kind == "value":
            args[name] = draw(st.sampled_from(ODD_VALUES))
        elif kind == "drop":
            args.pop(name, None)
        elif kind == "rename":
            args[draw(st.sampled_from(("B", "a", "alpha_", "x", "out")))] = args.pop(name, a)
        elif kind == "extra":
            args[draw(st.sampled_from(("B", "x", "y", "A_global")))] = draw(st.sampled_from(ODD_VALUES))
        elif kind == "sizes":
            kwargs["sizes"] = draw(st.sampled_from(
                ({"x": 3}, {"x": 4}, {"z": 1}, {"y": 2.5}, {"y": float("nan")}, {"y": "5"}, {"y": None},
                 {"y": 2 ** 63}, {"y": 10 ** 12}, {"y": [5]}, {"y": 0}, {"y": -1}, {"y": True}, [("y", 5)], "y")))
        elif kind == "backend":
            kwargs["backend"] = draw(st.sampled_from(("interp", "nope", "", None, 3, "triton ")))
        else:
            kwargs["_positional"] = (a,)
    return source, args, kwargs


@seed(SEED)
@FUZZ
@given(call=bad_calls())
def test_bad_calls_fail_only_with_dt_errors(call):
    note(f"run these cases again with DT_FUZZ_SEED={SEED}")
    source, args, kwargs = call
    prog = dt.loads(source, name="fuzz")
    positional = kwargs.pop("_positional", ())
    before = _snapshot(args)
    kwargs.setdefault("backend", "interp")
    try:
        out = prog(*positional, **kwargs, **args)
    except DTError:
        _assert_untouched(args, before)
        return
    _assert_untouched(args, before)
    # `out` is a keyword of the call (arrays to write into), not an input: the reference has none
    ref = prog.reference(sizes=kwargs.get("sizes"), **{n: v for n, v in args.items() if n != "out"})
    result = compare(out, ref, "f32", rtol=1e-3, atol=1e-4)
    assert result.ok, str(result)


