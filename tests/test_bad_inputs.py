"""Absurd sizes, deep expressions, bad calls and odd source files (issue 25, items 6-9 and 11):
each is a DTError at the DT location that matters, before anything is allocated."""
import threading
from pathlib import Path

import numpy as np
import pytest

import dt
from dt import backends
from dt.cli import main
from dt.errors import DTDimensionError, DTError, DTExtentError, DTInputError, DTNameError, DTScheduleError, DTSyntaxError
from dt.ir.algorithm import MAX_DEPTH

ROOT = Path(__file__).resolve().parents[1]
SCALE = "Func f;\nIn A;\nVar x, y;\nf[x, y] = A[x, y] * 2;\n{}\nf.compile();\n"
ALPHA = "Func f;\nIn A;\nSIn alpha;\nVar x;\nf[x] = A[x] * alpha;\nf.compile();\n"
INDEX = "Func f;\nVar n;\nf[n] = n * 2.0;\nf.compile();\n"


def error_at(err: DTError, line: int, col: int, *fragments: str):
    assert err.loc is not None and (err.loc.line, err.loc.col) == (line, col), err.render()
    for fragment in fragments:
        assert fragment in err.render(), err.render()


# ---------------------------------------------------------------- 6: sizes in schedules and calls


@pytest.mark.parametrize("schedule,col,fragment", [
    ("f.block(x:100000000000000000000000000);", 9, "a block spans at most 2147483647"),
    ("f.tensorize(x:100000000000000000000000000);", 13, "a tile holds at most 1048576"),
    ("f.tensorize(y:4294967296);", 13, "tile size for 'y' is 4294967296"),
    ("f.block(x:4294967296);", 9, "block size for 'x' is 4294967296"),
    ("f.tensorize(x:1024, y:2048);", 21, "1024 x 2048 = 2097152 elements"),
    ("f.block(x:2048);\nf.tensorize(x:0, y:1024);", 13, "2048 x 1024 = 2097152 elements"),
    ("f.block(x:2);\nf.map(x:x1/100000000000000000000000000, x1);", 7, "group size of 'x'"),
    ("f.num_warps(64);", 13, "power of two up to 32"),
    ("f.num_stages(100000000000000000000000000);", 14, "at most 2147483647"),
])
def test_absurd_schedule_sizes_are_refused_at_the_schedule_call(schedule, col, fragment):
    with pytest.raises(DTScheduleError) as info:
        dt.loads(SCALE.format(schedule), file="bad.dt")
    error_at(info.value, 5 + schedule.count("\n"), col, fragment)


def test_persistent_program_count_is_bounded():
    with pytest.raises(DTScheduleError, match="from 1 to 2147483647"):
        dt.loads(SCALE.format("f.persistent(100000000000000000000000000);"), file="bad.dt")


def test_the_python_api_gets_the_same_schedule_checks():
    x, y, A, f = dt.Var("x"), dt.Var("y"), dt.In("A"), dt.Func("f")
    f[x, y] = A[x, y] * 2
    f.tensorize(x=2 ** 20, y=2 ** 20)  # the line the error points at
    with pytest.raises(DTScheduleError) as info:
        dt.program(f)
    assert info.value.loc.file == __file__ and "f.tensorize(x=2 ** 20, y=2 ** 20)" in info.value.render()
    for bad in ({"x": 2.5}, {"x": True}, {"x": 10 ** 26}):
        g = dt.Func("g")
        g[x, y] = A[x, y]
        g.block(bad)
        with pytest.raises(DTScheduleError, match="block size for 'x'"):
            dt.program(g)
    h = dt.Func("h")
    h[x, y] = A[x, y]
    with pytest.raises(DTScheduleError, match="splits like"):
        h.block(x=np.int64(2)).map("x:x1/abc", "x1")


def test_no_schedule_of_the_examples_benchmarks_or_conformance_is_refused():
    from dt.conformance.catalogue import CATALOGUE
    programs = [(p.read_text(), str(p)) for p in [*ROOT.glob("examples/**/*.dt"), *ROOT.glob("benchmarks/**/*.dt")]]
    programs += [(case.source(name), f"{case.name}:{name}") for case in CATALOGUE for name in case.schedules]
    for source, label in programs:  # checked, and with whole-extent tiles of 1000
        prog = dt.loads(source, file=label)
        extents = {d: -(-1000 // prog.checked.chunk_dims[d][1]) if d in prog.checked.chunk_dims else 1000
                   for d in prog.checked.dim_kinds}  # a split's chunks: ceil(1000 / chunk)
        dt.ir.tiles.check_extents(prog.checked.tiles, extents)


def test_a_whole_extent_tile_over_the_limit_is_refused_at_the_call_before_allocating():
    prog = dt.loads("Func s;\nIn A;\nVar x;\nRVar y;\ns[x] = rsum(A[x, y], y);\ns.tensorize(y:0);\ns.compile();\n",
                    file="bad.dt")
    np.testing.assert_allclose(prog(A=np.ones((1, 2 ** 20), np.float32), backend="interp"), [2.0 ** 20])
    with pytest.raises(DTScheduleError) as info:
        prog(A=np.ones((1, 2 ** 20 + 1), np.float32), backend="interp")
    error_at(info.value, 6, 13, "1048577 elements (y) at y=1048577", "tensorize(y:1024)")


@pytest.mark.parametrize("value,fragment", [
    (float("nan"), "not an integer"), (float("inf"), "not an integer"), ("5", "not an integer"),
    (None, "not an integer"), ([5], "not an integer"), (2.5, "not an integer"), (True, "not an integer"),
    (2 ** 63, "at most 2**62"), (0, "at least 1"),
])
def test_bad_sizes_are_extent_errors_at_the_dimension(value, fragment):
    prog = dt.loads(INDEX, file="bad.dt")
    for call in (lambda: prog(sizes={"n": value}, backend="interp"), lambda: prog.reference(sizes={"n": value})):
        with pytest.raises(DTExtentError) as info:
            call()
        error_at(info.value, 2, 5, f"sizes gives 'n' = {value!r}", fragment)


@pytest.mark.parametrize("backend", ["interp", "numba"])
def test_a_func_read_along_a_longer_dimension_is_an_extent_error_not_a_read_past_it(backend):
    # e[z, y] for e[x, y]: z takes x's extent when nothing gives it, may be shorter (a part of e, the
    # reference's too), and longer is refused before running (numba read memory past e; the
    # interpreter crashed in NumPy)
    prog = dt.loads("Func e, s;\nIn A;\nVar x, y;\nRVar z;\ne[x, y] = A[x, y] * 2.0;\n"
                    "s[y] = rsum(e[z, y], z);\ns.compile();\n")
    A = np.arange(12, dtype=np.float32).reshape(3, 4)
    np.testing.assert_allclose(prog(A=A, backend=backend), 2 * A.sum(0))
    np.testing.assert_allclose(prog(A=A, sizes={"z": 2}, backend=backend), 2 * A[:2].sum(0))
    np.testing.assert_allclose(prog.reference(A=A, sizes={"z": 2}), 2 * A[:2].sum(0))
    with pytest.raises(DTExtentError, match=r"e\[z, y\] reads 'e' along 'z' \(5\), past its axis 0, 'x' \(3\)") as info:
        prog(A=A, sizes={"z": 5}, backend=backend)
    assert info.value.loc.line == 6 and "give 'z' at most 3" in str(info.value)
    # which read comes first does not matter: x takes the longer of z (3) and w (5)
    base = "Func e, o;\nIn A, B;\nVar x, z;\nRVar w;\ne[x] = x * 2.0;\n"
    for body in ("o[z] = e[z] + A[z] + rsum(e[w] * B[w], w);", "o[z] = rsum(e[w] * B[w], w) + e[z] + A[z];"):
        prog = dt.loads(base + body + "\no.compile();\n")
        np.testing.assert_allclose(prog(A=np.arange(3.0), B=np.arange(5.0), backend=backend),
                                   2 * np.arange(3.0) + np.arange(3.0) + 2 * (np.arange(5.0) ** 2).sum())


def test_numpy_integer_sizes_are_extents():
    prog = dt.loads(INDEX, file="bad.dt")
    np.testing.assert_array_equal(prog(sizes={"n": np.int64(4)}, backend="interp"), [0, 2, 4, 6])


def test_the_memory_an_output_needs_is_checked_before_allocating():
    prog = dt.loads(INDEX, file="bad.dt")
    with pytest.raises(DTExtentError) as info:
        prog(sizes={"n": 10 ** 12}, backend="interp")
    error_at(info.value, 3, 1, "output 'f' needs 4.0 TB (n=1000000000000; f32)", "memory this machine has")
    with pytest.raises(DTExtentError, match=r"'f' needs 8.0 TB \(n=1000000000000; f64\)"):
        prog.reference(sizes={"n": 10 ** 12})


def test_dt_run_with_a_huge_size_is_an_error_not_a_memory_error(capsys):
    assert main(["run", str(ROOT / "examples/relu.dt"), "--size", "x=100000000000", "--size", "y=4",
                 "--backend", "interp"]) == 2
    assert "needs 1.6 TB (x=100000000000, y=4; f32)" in capsys.readouterr().err


# ---------------------------------------------------------------- 7: deep expressions (the parser's half)


def test_nesting_past_the_bound_is_a_syntax_error_where_it_passes_the_bound():
    with pytest.raises(DTSyntaxError) as info:
        dt.loads(f"Func f;\nIn A;\nVar x;\nf[x] = {'-' * 5000}A[x];\nf.compile();\n", file="bad.dt")
    # the (MAX_DEPTH + 1)th minus, after "f[x] = "
    error_at(info.value, 4, 8 + MAX_DEPTH, f"nests 5001 levels deep; dt takes at most {MAX_DEPTH}")


def test_nesting_past_the_bound_in_python_is_refused_at_the_definition():
    x, A, f = dt.Var("x"), dt.In("A"), dt.Func("f")
    e = A[x]
    for _ in range(MAX_DEPTH + 10):
        e = -e
    f[x] = e  # the line the error points at
    with pytest.raises(DTSyntaxError) as info:
        dt.program(f)
    assert info.value.loc.file == __file__ and "f[x] = e" in info.value.render()


def test_inlining_past_the_bound_is_refused_at_the_inline():
    terms = " + ".join(["A[x]"] * 600)
    with pytest.raises(DTScheduleError) as info:
        dt.loads(f"Func f, g;\nIn A;\nVar x;\nf[x] = {terms};\ng[x] = f[x] * 2 + {terms};\nf.inline();\n"
                 "g.compile();\n", file="bad.dt")
    error_at(info.value, 6, 1, "'g' with 'f' inlined nests 1201 expressions deep")


def test_a_1000_term_sum_parses_checks_and_evaluates():
    source = f"Func f;\nIn A;\nVar x;\nf[x] = {' + '.join(['A[x]'] * 1000)};\nf.compile();\n"
    prog = dt.loads(source, file="sum.dt")
    a = np.arange(3, dtype=np.float32)
    np.testing.assert_allclose(prog.reference(A=a), 1000 * a)
    np.testing.assert_allclose(prog(A=a, backend="interp"), 1000 * a)


@pytest.mark.slow
@pytest.mark.parametrize("fused", [False, True])
def test_a_chain_of_1100_funcs_declared_last_first_runs(fused):
    """Checking walks Funcs in depth-first order; declared last first, the chain is as deep as it
    is long: past Python's recursion limit (the recursive walk it replaced failed at 1000 Funcs)."""
    n = 1100
    lines = ["Func " + ", ".join(f"f{i}" for i in reversed(range(n))) + ";", "In A;", "Var x;",
             "f0[x] = A[x] + 1;"]
    lines += [f"f{i}[x] = f{i - 1}[x] + 1;" for i in reversed(range(1, n))]
    lines += [f"f{i}.fuse_at(f{n - 1}, x);" for i in range(n - 1)] if fused else []
    prog = dt.loads("\n".join(lines + [f"f{n - 1}.compile();"]), file="chain.dt")
    a = np.arange(3, dtype=np.float32)
    np.testing.assert_allclose(prog(A=a, backend="interp"), a + n)


def test_a_cycle_of_funcs_is_named_in_order():
    with pytest.raises(DTDimensionError) as info:
        dt.loads("Func f, g, h;\nIn A;\nVar x;\nf[x] = g[x] + A[x];\ng[x] = h[x];\nh[x] = f[x];\nf.compile();\n",
                 file="bad.dt")
    error_at(info.value, 4, 1, "Funcs depend on each other in a cycle: f -> g -> h -> f")


# ---------------------------------------------------------------- 8: bad calls


@pytest.mark.parametrize("good,bad,fragment", [
    (2, 10 ** 400, "an integer of 1329 bits, too large for i64"),
    (0.5, 1j, "got complex"),
    (0.5, "abc", "got str"),
    (np.float64(0.5), np.complex128(1j), "dtype complex128"),
    (np.array(0.5), np.array("abc"), "dtype <U3"),
    (np.array(0.5), np.array(1j), "dtype complex128"),
    (np.array(0.5), np.array([0.5, 1.5]), "an array of shape (2,)"),
    (1, True, "a bool"),
    (0.5, None, "got NoneType"),
])
def test_scalars_are_checked_on_every_call(good, bad, fragment):
    prog = dt.loads(ALPHA, file="bad.dt")
    a = np.ones(3, np.float32)
    np.testing.assert_allclose(prog(A=a, alpha=good, backend="interp"), a * float(good))
    with pytest.raises(DTInputError) as info:
        prog(A=a, alpha=bad, backend="interp")
    error_at(info.value, 3, 5, "scalar 'alpha' must be a real number", fragment)


def test_nan_and_inf_scalars_pass_through_and_the_plan_is_reused():
    prog = dt.loads(ALPHA, file="bad.dt")
    a = np.ones(2, np.float32)
    assert np.isnan(prog(A=a, alpha=float("nan"), backend="interp")).all()
    np.testing.assert_array_equal(prog(A=a, alpha=float("-inf"), backend="interp"), [-np.inf, -np.inf])
    np.testing.assert_array_equal(prog(A=a, alpha=3.0, backend="interp"), [3.0, 3.0])
    assert len(prog._plans) == 1


def test_positional_arguments_are_an_input_error_naming_the_inputs():
    prog = dt.loads(ALPHA, file="bad.dt")
    for call in (prog, prog.reference):
        with pytest.raises(DTInputError, match="takes its inputs by name") as info:
            call(np.ones(3, np.float32))
        assert "A=..., alpha=..." in info.value.hint


@pytest.mark.parametrize("declaration", ["In backend;", "SIn sizes;"])
def test_inputs_named_like_call_keywords_are_refused_at_the_declaration(declaration):
    name = declaration.split()[1][:-1]
    use = f"{name}[x]" if declaration.startswith("In") else name
    with pytest.raises(DTNameError) as info:
        dt.loads(f"Func f;\nIn A;\n{declaration}\nVar x;\nf[x] = A[x] + {use};\nf.compile();\n", file="bad.dt")
    error_at(info.value, 3, len(declaration.split()[0]) + 2, f"an input cannot be named '{name}'", f"{name}_")
    with pytest.raises(DTNameError):
        x, f = dt.Var("x"), dt.Func("f")
        f[x] = dt.In(name)[x] if declaration.startswith("In") else dt.SIn(name) * 1.0
        dt.program(f)


def test_an_input_named_self_can_be_passed():
    prog = dt.loads("Func f;\nIn self;\nVar x;\nf[x] = self[x] + 1;\nf.compile();\n")
    np.testing.assert_array_equal(prog(self=np.zeros(2, np.float32), backend="interp"), [1.0, 1.0])


# ---------------------------------------------------------------- 9: source files


def test_loading_a_directory_or_a_missing_file_is_a_dt_error(tmp_path):
    for path, fragment in ((tmp_path, "Is a directory"), (tmp_path / "none.dt", "No such file")):
        with pytest.raises(DTError, match=fragment) as info:
            dt.load(path)
        assert str(path) in info.value.message


def test_a_file_that_is_not_utf8_is_a_syntax_error_at_the_byte(tmp_path):
    path = tmp_path / "latin1.dt"
    path.write_bytes("Func f;\r\nIn A;\r\n# café\r\n".encode("latin-1"))
    with pytest.raises(DTSyntaxError) as info:
        dt.load(path)
    assert (info.value.loc.line, info.value.loc.col) == (3, 6), info.value.render()
    assert "not UTF-8" in info.value.message and str(path) in info.value.message


def test_a_byte_order_mark_is_accepted(tmp_path):
    path = tmp_path / "bom.dt"
    path.write_bytes(b"\xef\xbb\xbf" + ALPHA.encode())
    for prog in (dt.load(path), dt.loads("\ufeff" + ALPHA)):
        np.testing.assert_array_equal(prog(A=np.ones(2, np.float32), alpha=2.0, backend="interp"), [2.0, 2.0])
    with pytest.raises(DTSyntaxError) as info:  # columns of the first line count from after the mark
        dt.loads("\ufeffFunc f @;", file="bad.dt")
    error_at(info.value, 1, 8)


@pytest.mark.parametrize("text", [
    "# a \f comment\n", "# a \u2028 comment\n", "# a \x85 comment\n", "# a \x0b comment\n", "# a \x1c comment\n",
    "# a \u2029 comment\n", "# a comment\r\n", "# a comment\r", "Func\fg;\n",
])
def test_lines_are_numbered_alike_in_the_error_and_its_excerpt(text):
    source = f"{text}Func f;\nIn A;\nVar x;\nf[x] = A[x] + B[x];\nf.compile();\n"
    with pytest.raises(DTNameError) as info:
        dt.loads(source, file="bad.dt")
    error_at(info.value, 5, 15, "unknown name 'B'")
    assert info.value.render().splitlines()[1:3] == ["    f[x] = A[x] + B[x];", "                  ^^^^"]


def test_the_excerpt_shows_one_column_per_character():
    with pytest.raises(DTNameError) as info:
        dt.loads("Func f;\nIn A;\nVar x;\nf[x] =\tA[x]\f+ B[x];\nf.compile();\n", file="bad.dt")
    excerpt, caret = info.value.render().splitlines()[1:3]
    assert excerpt == "    f[x] = A[x] + B[x];" and caret.index("^") == excerpt.index("B")


# ---------------------------------------------------------------- 11: `**`


@pytest.mark.parametrize("expr", ["-A[x] ** 2", "A[x] ** -1", "2 ** A[x] ** 2", "3 * A[x] ** 2 / 2",
                                  "(A[x] + 1) ** 0.5"])
def test_power_operator_binds_as_in_python(expr):
    prog = dt.loads(f"Func f;\nIn A;\nVar x;\nf[x] = {expr};\nf.compile();\n")
    a = np.array([0.5, 1.0, 1.5])
    want = eval(expr.replace("A[x]", "a"))
    np.testing.assert_allclose(prog.reference(A=a), want)
    np.testing.assert_allclose(prog(A=a.astype(np.float32), backend="interp"), want, rtol=1e-6)


def test_power_operator_in_python():
    x, A, f = dt.Var("x"), dt.In("A"), dt.Func("f")
    f[x] = A[x] ** 2 + 2 ** A[x]
    np.testing.assert_allclose(dt.program(f)(A=np.array([1.0, 3.0], np.float32), backend="interp"), [3.0, 17.0])


# ---------------------------------------------------------------- review of issue 25: one path for extents

NEEDS = "Func f;\nIn A;\nVar x, y, z;\nRVar k;\nf[x] = rsum(A[x, k], k) * len(y) + len(z);\nf.compile();\n"


def test_lowering_calls_and_dt_run_need_the_same_dimensions(tmp_path, capsys):
    prog = dt.loads(NEEDS, file="needs.dt")
    assert prog.checked.needed_dims == ("x", "k", "y", "z")  # in the order the program first uses them
    assert prog.pipeline().sizes == ("x", "y", "z", "k")  # those, in declaration order
    with pytest.raises(DTExtentError) as info:
        prog(A=np.ones((2, 3), np.float32), backend="interp")
    assert "'y', 'z'" in info.value.message and "sizes={'y': ..., 'z': ...}" in info.value.hint
    path = tmp_path / "needs.dt"
    path.write_text(NEEDS)
    assert main(["run", str(path), "--size", "x=2", "--backend", "interp"]) == 2
    assert "missing --size k=N --size y=N --size z=N" in capsys.readouterr().err


@pytest.mark.parametrize("extents,fragments", [
    ([("x", 4)], ("extents must be a dict of extents by dimension name, got list",)),
    ({"x": 4, "y": 5, "q": 0}, ("extents names 'q', which is not a dimension of program", "x, y")),
    ({"x": 4}, ("no extent given for 'y'", "extents={'y': ...}")),
    ({"x": 4, "y": 0}, ("extents gives 'y' = 0", "at least 1")),
    ({"x": 4, "y": "5"}, ("extents gives 'y' = '5', which is not an integer",)),
])
def test_check_extents_and_random_inputs_report_bad_extents(extents, fragments):
    from dt.testing import random_inputs
    prog = dt.loads(SCALE.format(""), file="bad.dt")
    for call in (lambda: prog.check_extents(extents), lambda: random_inputs(prog, extents)):
        with pytest.raises(DTExtentError) as info:
            call()
        for fragment in fragments:
            assert fragment in info.value.render(), info.value.render()


def test_sizes_of_a_call_must_be_a_dict_even_when_empty():
    prog = dt.loads(SCALE.format(""), file="bad.dt")
    a = np.ones((2, 3), np.float32)
    np.testing.assert_array_equal(prog(A=a, sizes={}, backend="interp"), 2 * a)
    for sizes in ([], 0, ""):
        with pytest.raises(DTExtentError, match="sizes must be a dict of extents by dimension name"):
            prog(A=a, sizes=sizes, backend="interp")


def test_check_extents_names_the_dtypes_dt_supports():
    prog = dt.loads(SCALE.format(""), file="bad.dt")
    for dtype in ("u32", "float32", None):
        with pytest.raises(DTInputError) as info:
            prog.check_extents({"x": 4, "y": 5}, dtype)
        assert f"dtype {dtype!r} is not one dt supports" in info.value.message
        assert info.value.hint == "use one of f32, f16, bf16, f64, f8e4m3, f8e5m2, bool, i8, u8, i16, i32, i64"
    no_inputs = dt.loads(INDEX, file="bad.dt")
    with pytest.raises(DTInputError, match="dtype 'u32'"):
        no_inputs.check_extents({"n": 4}, "u32")
    with pytest.raises(DTInputError, match="dtype 'u32'"):
        prog.source("interp", "u32")
    prog.check_extents({"x": 4, "y": 5}, "bf16")


def test_check_extents_counts_the_inputs_a_call_is_given():
    prog = dt.loads(SCALE.format(""), file="bad.dt")
    with pytest.raises(DTExtentError) as info:
        prog.check_extents({"x": 10 ** 7, "y": 10 ** 7}, "f64")
    error_at(info.value, 4, 11, "input 'A' needs 800.0 TB (x=10000000, y=10000000; f64)")


# ---------------------------------------------------------------- review of issue 25: smaller items


class _Index:
    """An integer type of another library: it has __index__, and is not an int."""

    def __init__(self, n):
        self.n = n

    def __index__(self):
        return self.n

    def __repr__(self):
        return f"_Index({self.n})"


def test_schedule_sizes_take_any_integer_type_but_not_bools():
    x, A = dt.Var("x"), dt.In("A")
    f = dt.Func("f")
    f[x] = A[x] * 2
    f.block(x=_Index(2))
    np.testing.assert_array_equal(dt.program(f)(A=np.ones(3, np.float32), backend="interp"), [2.0, 2.0, 2.0])
    for bad in (np.True_, True, 2.0):
        g = dt.Func("g")
        g[x] = A[x] * 2
        g.block(x=bad)
        with pytest.raises(DTScheduleError, match="block size for 'x' must be an integer"):
            dt.program(g)


def test_a_file_that_cannot_be_read_is_an_input_error(tmp_path):
    for path in (tmp_path, tmp_path / "none.dt"):
        with pytest.raises(DTInputError):
            dt.load(path)


def test_threads_first_getting_a_backend_share_one_instance(tmp_path, monkeypatch):
    """Eight threads asking for a backend no thread has loaded yet: its factory runs once."""
    (tmp_path / "slow_backend.py").write_text(
        "import time\nfrom dt import backends\nbuilt = []\n\n"
        "def create():\n    time.sleep(0.2)  # widens the window in which the other threads arrive\n"
        "    built.append(backends.get('interp'))  # a factory may ask for another backend\n"
        "    return type('Slow', (), {'name': 'slow'})()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(backends._BUILTIN, "slow", "slow_backend:create")
    start, got, errors = threading.Barrier(8), [], []

    def first_get():
        start.wait()
        try:
            got.append(backends.get("slow"))
        except Exception as e:  # collected: an exception in a thread would not fail the test
            errors.append(f"{type(e).__name__}: {e}")

    threads = [threading.Thread(target=first_get) for _ in range(8)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        backends._loaded.pop("slow", None)
    import slow_backend
    assert errors == [] and len(slow_backend.built) == 1
    assert len(got) == 8 and all(b is got[0] for b in got)


def test_index_arithmetic_past_i64_is_refused_at_every_call():
    prog = dt.loads("Func o; In K; SIn s; Var l;\no[l] = K[l * s + 1];\no.compile();\n")
    K = np.arange(1, 9, dtype=np.float32)
    np.testing.assert_array_equal(prog(K=K, s=1, sizes={"l": 4}, backend="numba"), [2, 3, 4, 5])
    for s in (2 ** 62, -2 ** 62):  # the same call signature as the call before: checked at each call
        with pytest.raises(DTInputError, match=r"the index l \* s \+ 1 of 'K' reaches l \* s = -?\d+ at this call"):
            prog(K=K, s=s, sizes={"l": 4}, backend="numba")
    shifted = dt.loads("Func o; In K; SIn start; Var l;\no[l] = K[l + start];\no.compile();\n")
    with pytest.raises(DTInputError, match="past the 64-bit integers"):
        shifted(K=K, start=2 ** 63 - 1, sizes={"l": 8}, backend="interp")


def test_a_divisor_scalar_is_checked_at_every_call():
    prog = dt.loads("In K; SIn p; Var l; Func o;\no[l] = K[l // p];\no.compile();")
    np.testing.assert_array_equal(prog(backend="numba", K=np.ones(3, np.float32), p=2, sizes={"l": 3}), 1.0)
    with pytest.raises(DTError, match="scalar 'p' divides a subscript"):  # the plan of the call before
        prog(backend="numba", K=np.ones(3, np.float32), p=0, sizes={"l": 3})


def test_a_zero_d_integer_array_is_an_integer_scalar():
    torch = pytest.importorskip("torch", reason="torch is not installed (pip install dt[torch])")
    shift = dt.loads("Func o; In K; SIn start; Var l;\no[l] = K[l + start];\no.compile();\n")
    K = np.arange(10, dtype=np.float32)
    for start in (np.array(2), torch.tensor(2), np.uint8(2)):
        np.testing.assert_array_equal(shift(K=K, start=start, backend="interp"), [2, 3, 4, 5, 6, 7, 8, 9, 0, 0])


def test_a_lazily_negated_tensor_is_read_as_its_values_and_sparse_or_meta_ones_are_refused():
    torch = pytest.importorskip("torch", reason="torch is not installed (pip install dt[torch])")
    relu = dt.load(ROOT / "examples" / "relu.dt")
    negated = torch.tensor([[1 + 2j, 3 - 4j]]).conj().imag  # [[-2, 4]] with its negative bit set
    for backend in ("interp", "numba"):
        for _ in range(2):  # the first call plans, the second runs the plan
            assert relu(A=negated, backend=backend).tolist() == [[0.0, 4.0]]
        assert relu(A=torch.tensor([[-2.0, 4.0]]), backend=backend).tolist() == [[0.0, 4.0]]
    for odd, what in ((torch.eye(2).to_sparse(), "sparse"), (torch.empty(2, 2, device="meta"), "meta")):
        with pytest.raises(DTInputError, match=f"input 'A' is a .*{what}.*holds no dense data"):
            relu(A=odd, backend="interp")
