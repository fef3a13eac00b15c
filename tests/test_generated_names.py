"""What users name things never breaks or hijacks the generated code (issue 25, items 1, 4, 5, 7).

- A file name reaches generated code only escaped: a name that would close the docstring runs
  nothing, and backslashes, quotes, newlines, NULs, non-ASCII and unprintable characters all work.
- Names in generated code follow one scheme (dt/ir/scheduled.py, dt.backends.pysource.Names): DT
  names that equal a name the generated code derives (`K_global`, `x_SIZE`, `relu_out_kernel`,
  `x_offsets`, `pid`, `tl`, a Numba helper, ...) compute what the reference computes. DT names are
  ASCII from Python as in DT source, and the program's name is made an ASCII identifier, so that
  no name changes when Python reads the generated code (it folds 'ﬁ' to 'fi').
- Rank-0 inputs and expressions of any depth the frontend accepts run on every backend.
"""
from __future__ import annotations

import ast
import io
import linecache
import tokenize
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import dt
from dt import backends
from dt.backends.pysource import load_module, safe_text
from dt.debug import debugger
from dt.errors import Loc
from dt.ir import scheduled as S
from dt.ir.nesting import MAX_NESTING, nesting
from dt.testing import assert_close, random_inputs

BACKENDS = ["interp", "numba", pytest.param("triton", marks=pytest.mark.needs_triton)]


def run_and_compare(prog, backend: str, args: dict):
    if not backends.available(backend):
        pytest.skip(f"backend {backend} is not available: {backends.failures().get(backend)}")
    out, ref = prog(backend=backend, **args), prog.reference(**args)
    for name in ref if isinstance(ref, dict) else [None]:
        assert_close(out[name] if name else out, ref[name] if name else ref, "f32")


# ---------------------------------------------------------------- file names (item 1)

RELU = "Func relu_out;\nIn A;\nVar x;\nrelu_out[x] = maximum(A[x], 0);\nrelu_out.compile();\n"
HIJACK = 'relu""";__import__("os").system("id>pwned.txt");""".dt'
ODD_FILES = [HIJACK, "C:\\Users\\dt\\relu.dt", 'say """hi""".dt', "two\nlines.dt", "nul\0.dt", "crème/ß/ядро.dt",
             "cr\rlf.dt", "line\u2028separator.dt", "undecodable\udcff.dt", "tab\tand\x0cform feed.dt",
             "ends with a backslash\\"]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("file", ODD_FILES, ids=ascii)
def test_a_file_name_is_only_ever_text_in_generated_code(backend, file, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    prog = dt.loads(RELU, file=file)
    if not backends.available(backend):
        pytest.skip(f"backend {backend} is not available: {backends.failures().get(backend)}")
    module = ast.parse(prog.source(backend))
    assert file in ast.get_docstring(module, clean=False)  # the name itself, escaped in the source
    run_and_compare(prog, backend, {"A": np.linspace(-1, 1, 7, dtype=np.float32)})
    assert not (tmp_path / "pwned.txt").exists()


@pytest.mark.parametrize("backend", ["interp", "numba"])
def test_loading_a_file_with_a_hijacking_name_runs_nothing(backend, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = tmp_path / HIJACK
    path.write_text(RELU)
    run_and_compare(dt.load(path), backend, {"A": np.linspace(-1, 1, 9, dtype=np.float32)})
    assert not (tmp_path / "pwned.txt").exists()


@given(st.text())
def test_safe_text_reads_back_as_the_text_on_one_line(text):
    quoted = safe_text(text)
    assert quoted.isprintable()  # no line break of any kind: it cannot end a comment either
    assert ast.literal_eval(f'"""{quoted}"""') == text


def test_a_module_label_is_only_ever_text():
    namespace = load_module("def f():\n    return 1\n", 'x>\0"""\n<y')  # compile() refuses a NUL in a file name
    filename = namespace["f"].__code__.co_filename
    assert "\0" not in filename and "\n" not in filename and "\\x00" in filename
    assert linecache.getline(filename, 2).strip() == "return 1"  # tracebacks still show the source


@pytest.mark.parametrize("file", [HIJACK, 'x.dt\n__import__("os").system("id>pwned.txt")\n#', "nul\0.dt"], ids=ascii)
def test_a_breakpoint_quotes_its_location(file, tmp_path, monkeypatch):
    """The debugger compiles a function per breakpoint with the DT line in a comment."""
    monkeypatch.chdir(tmp_path)
    line = 'f[x] = A[x];\r__import__("os").system("id>pwned.txt")'
    frame = SimpleNamespace(statement_info=SimpleNamespace(stop_functions={}), loc=Loc(file, 4, 1, 1, line),
                            iters={}, tiles={})
    function, names = debugger._stop_function(frame)
    assert names == ["dbg", "pid"] and function.__code__.co_argcount == 2
    assert not (tmp_path / "pwned.txt").exists()


# ---------------------------------------------------------------- names (item 4)

# Every role a DT name can take: inputs, a scalar, a Func computed at root (a temporary, in a kernel
# of its own), one fused into the output's loop, the output, a Var and an RVar; and the program.
TEMPLATE = """Func {OUT}, {TMP}, {FUSED};
In {A}, {B};
SIn {S};
Var {X};
RVar {Y};
{TMP}[{X}, {Y}] = {A}[{X}, {Y}] * {S} + {B}[{Y}];
{FUSED}[{X}] = rsum(exp({TMP}[{X}, {Y}]) * {B}[{Y}], {Y});
{OUT}[{X}, {Y}] = {TMP}[{X}, {Y}] / reshape({FUSED}[{X}], {X}, 1) + {X} * len({Y});
{TMP}.block({X}:2);
{OUT}.block({X}:2);
{OUT}.tensorize({X}:0, {Y}:4);
{FUSED}.tensorize({Y}:3);
{FUSED}.fuse_at({OUT}, {X});
{OUT}.compile();
"""
ROLES = ("A", "B", "S", "TMP", "FUSED", "OUT", "X", "Y", "PROGRAM")
PLAIN = {"A": "A", "B": "B", "S": "s", "TMP": "t", "FUSED": "m", "OUT": "f", "X": "x", "Y": "y", "PROGRAM": "f"}
# Names generated code uses for itself: modules, helpers, builtins, Python keywords, locals.
OWN_NAMES = ("pid", "np", "rt", "tl", "triton", "torch", "math", "numba", "libdevice", "f32", "u64", "i32", "first",
             "last", "out", "device", "njit", "count", "range", "min", "float", "_launch", "_operand", "_result",
             "_dot", "_dot_packing", "_dot_pack_a", "_exp_f32", "_maximum", "_KERNEL", "_POOL", "_tanh", "_check", "_dbg", "_on", "_post",
             "program_count", "USE_TMA", "pid_rest", "lambda", "None", "class")
# What generated code derives from a DT name `n`: n + suffix (or prefix + n).
SUFFIXES = ("_global", "_SIZE", "_kernel", "_pid", "_block_start", "_block_end", "_BLOCK_COUNT", "_iter",
            "_accumulator", "_ptr", "_TILE", "_arange", "_offsets", "_mask", "_valid", "_i", "_start", "_grid",
            "_y_stride", "_x_stride", "_2", "_part", "_tile", "_packing")
PREFIXES = ("sum_", "max_")


def program_with(names: dict[str, str]):
    source = TEMPLATE.format(**names)
    prog = dt.loads(source, name=names["PROGRAM"])
    args = random_inputs(prog, {names["X"]: 5, names["Y"]: 7}, "f32", seed=3)
    args[names["B"]] = args[names["B"]] * 0.1  # exp stays moderate
    return prog, args


COLLISIONS = {
    # an input named like another input's array: a silent wrong answer on interp
    "input_global": dict(A="K", B="K_global"),
    "own_global": dict(A="A_global", B="A"),
    "scalar_global": dict(S="A_global"),
    "scalar_extent": dict(S="x_SIZE"),
    "input_extent": dict(B="x_SIZE", S="y_SIZE"),
    "program_kernel": dict(PROGRAM="f_kernel"),
    "func_kernel": dict(TMP="f_kernel", PROGRAM="t_kernel"),
    "scalar_kernel": dict(S="f_kernel", B="t_kernel"),
    "dims_own_names": dict(X="pid", Y="np"),
    "funcs_own_names": dict(OUT="tl", TMP="first", FUSED="_launch", PROGRAM="out"),
    "inputs_own_names": dict(A="device", B="_dbg", S="_on"),
    "triton_derived": dict(B="x_offsets", S="x_mask", TMP="y_arange", FUSED="A_ptr"),
    "numba_derived": dict(B="x_valid", S="y_i", TMP="sum_y", FUSED="x_start"),
    "lowering_derived": dict(TMP="x_block_start", FUSED="pid_rest", S="y_iter", B="y_accumulator"),
    "keywords": dict(A="lambda", B="None", OUT="class", X="for", Y="if"),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", COLLISIONS)
def test_dt_names_that_generated_code_derives(backend, case):
    prog, args = program_with({**PLAIN, **COLLISIONS[case]})
    run_and_compare(prog, backend, args)


@st.composite
def colliding_names(draw) -> dict[str, str]:
    """A name for every role: plain, one of the generated code's own, or derived from a name drawn
    before it as generated code derives names."""
    names: dict[str, str] = {}
    for role in draw(st.permutations(ROLES)):
        kind = draw(st.sampled_from(("plain", "own", "derived", "derived")))
        if kind == "derived" and names:
            base = draw(st.sampled_from(sorted(names.values())))
            affix = draw(st.sampled_from(SUFFIXES + PREFIXES))
            name = affix + base if affix in PREFIXES else base + affix
        elif kind == "own":
            name = draw(st.sampled_from(OWN_NAMES))
        else:
            name = PLAIN[role]
        names[role] = name
    dt_names = [names[r] for r in ROLES if r != "PROGRAM"]
    assume(len(set(dt_names)) == len(dt_names))  # DT names are distinct; the program may share one
    return names


# Per backend: the interpreter is quick; Numba and Triton pay for every new program.
EXAMPLES = {"interp": 60, "numba": 6, "triton": 4}


@pytest.mark.parametrize("backend", ["interp", pytest.param("numba", marks=pytest.mark.slow),
                                     pytest.param("triton", marks=[pytest.mark.needs_triton, pytest.mark.slow])])
def test_any_names_compute_the_reference(backend):
    if not backends.available(backend):
        pytest.skip(f"backend {backend} is not available: {backends.failures().get(backend)}")

    @settings(max_examples=EXAMPLES[backend], deadline=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
    @given(colliding_names())
    def check(names):
        prog, args = program_with(names)
        run_and_compare(prog, backend, args)

    check()


def test_scheme_keeps_plain_names_and_suffixes_only_clashes():
    plain = program_with(PLAIN)[0].pipeline()
    assert plain.global_names.scalars == {"s": "s"} and [k.name for k in plain.kernels] == ["t_kernel", "f_kernel"]
    assert plain.global_names.tensors == {"A": "A_global", "B": "B_global", "t": "t_global", "f": "f_global"}
    extent = program_with({**PLAIN, "S": "x_SIZE", "B": "A_global"})[0].pipeline().global_names
    assert extent.scalars == {"x_SIZE": "x_SIZE_2"}
    assert extent.tensors == {"A": "A_global", "A_global": "A_global_global", "t": "t_global", "f": "f_global"}
    pointer = program_with({**PLAIN, "S": "A_global"})[0].pipeline().global_names
    assert pointer.scalars == {"A_global": "A_global"} and pointer.tensors["A"] == "A_global_2"
    clash = program_with({**PLAIN, "PROGRAM": "f_kernel"})[0].pipeline()
    assert clash.name == "f_kernel" and [k.name for k in clash.kernels] == ["t_kernel", "f_kernel_2"]


# ---------------------------------------------------------------- non-ASCII names (items 1, 4)

# Python folds these (NFKC) when it parses source: 'ﬁ' (U+FB01) reads as 'fi', 'ℌ' as 'H'.
FOLDED = ("\ufb01", "\u210c", "x\u00b2")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", FOLDED + ("cr\u00e8me", "\u044f\u0434\u0440\u043e"), ids=ascii)
def test_a_python_api_name_is_ascii_as_in_dt_source(backend, name):
    """A DT name is ASCII ([A-Za-z_][A-Za-z0-9_]*, the grammar's NAME) from Python too: where
    generated code holds it, Python would fold some characters and two names could become one."""
    if not backends.available(backend):
        pytest.skip(f"backend {backend} is not available: {backends.failures().get(backend)}")
    x = dt.Var("x")
    with pytest.raises(dt.DTNameError) as info:
        a, fi = dt.In(name), dt.In("fi")  # the line the error points to
    assert info.value.loc.file == __file__ and "a, fi = dt.In(name)" in info.value.loc.text
    assert "ASCII" in info.value.hint
    for make in (dt.Func, dt.In, dt.SIn, dt.Var, dt.RVar):
        with pytest.raises(dt.DTNameError):
            make(name)
    f = dt.Func("f")
    f[x] = dt.In("fi")[x]
    run_and_compare(dt.program(f), backend, {"fi": np.linspace(-1, 1, 5, dtype=np.float32)})


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("inner", ["\ufb01", "1a"], ids=ascii)
def test_the_inner_part_of_a_map_split_is_a_dt_name(backend, inner):
    """`map` names a new dimension, which generated code holds as it does every other."""
    x, y = dt.Var("x"), dt.Var("y")
    f = dt.Func("f")
    f[x, y] = dt.In("A")[x, y] * 2
    f.block(x=2, y=2)
    for split in ((x, inner, 2), f"x:{inner}/2"):
        with pytest.raises(dt.DTNameError) as info:
            f.map(split, y, inner)
        assert info.value.loc.file == __file__ and "ASCII" in info.value.hint
    f.map("x:x1/2", y, "x1")
    run_and_compare(dt.program(f), backend, {"A": np.linspace(-1, 1, 30, dtype=np.float32).reshape(5, 6)})


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", FOLDED + ("crème", "2mm", "relu-v2", "", "min", "f", "fi"), ids=ascii)
def test_a_program_name_is_only_ever_an_ascii_identifier_in_generated_code(backend, name, tmp_path):
    """The program's name (`name=`, a file's stem) keeps its spelling where dt shows it and is
    made an ASCII identifier, distinct from every other name, where generated code holds it."""
    source = "Func fi;\nIn A;\nVar x;\nfi[x] = A[x] * 2;\nfi.compile();\n"
    file = tmp_path / f"{name}.dt"
    file.write_text(source)
    for prog in (dt.loads(source, name=name), dt.load(file)):
        if name:  # an empty name= falls back to the file's stem
            assert prog.name == name
        launcher = prog.pipeline().name
        assert launcher.isascii() and launcher.isidentifier() and launcher not in S.RESERVED_NAMES
        assert launcher != prog.pipeline().kernels[0].name
        run_and_compare(prog, backend, {"A": np.linspace(-1, 1, 6, dtype=np.float32)})


def test_one_scheme_mangles_the_program_name():
    """Program.name is the name as given; the launcher's name comes from S.function_names alone."""
    prog = dt.loads(RELU, name="min")
    assert prog.name == "min" and prog.pipeline().name == "min_2"
    assert dt.loads(RELU, name="2mm").pipeline().name == "dt_2mm"
    assert dt.loads(RELU, name="relu-v2").pipeline().name == "relu_v2"
    with pytest.raises(dt.DTInputError, match=r"'B' is not an input of min\b"):
        prog(A=np.ones(3, np.float32), B=np.ones(3, np.float32), backend="interp")


@given(st.text())
def test_identifier_is_an_ascii_name_that_python_reads_as_written(text):
    name = S.identifier(text)
    assert name.isascii() and name.isidentifier()
    assert S.identifier(name) == name


# ---------------------------------------------------------------- rank 0 (item 5)

@pytest.mark.parametrize("backend", BACKENDS)
def test_rank_0_input_and_output(backend):
    prog = dt.loads("Func f, total;\nIn A, s;\nVar x;\nRVar r;\ntotal[] = rsum(A[r], r) * s[];\n"
                    "f[x] = A[x] * s[] + total[];\nf.block(x:4);\nf.compile();\ntotal.compile();\n")
    run_and_compare(prog, backend, {"A": np.linspace(-1, 2, 10, dtype=np.float32), "s": np.array(1.5, np.float32)})


# ---------------------------------------------------------------- deep expressions (item 7)

def chain(term: str, op: str, n: int) -> str:
    return f" {op} ".join([term] * n)


def nest(fn: str, inner: str, n: int) -> str:
    return fn * n + inner + ")" * n


def functions(n: int) -> str:
    e = "A[x]"
    for i in range(n):
        e = (f"sin({e})", f"sigmoid({e})", f"maximum({e}, A[x])", f"tanh({e})", f"abs({e})")[i % 5]
    return e


DEEP = {
    "sum_250": f"f[x] = {chain('A[x]', '+', 250)};",
    "sum_1000": f"f[x] = {chain('A[x]', '+', 1000)};",
    "difference_of_products_400": f"f[x] = {chain('A[x] * 0.5', '-', 400)};",
    "negations_1000": f"f[x] = {nest('-(', 'A[x]', 1000)};",
    "functions_300": f"f[x] = {functions(300)};",
    "where_250": f"f[x] = {nest('where(A[x] > 0.1, A[x] * 0.5, ', 'A[x]', 250)};",
    "comparisons_250": f"f[x] = {nest('where(A[x] > 0.1, A[x] < 0.5, ', 'A[x] > -0.5', 250)};",
    "reduction_operand_300": f"f[x] = rsum({chain('A[x] * B[y]', '+', 300)}, y);",
}
DEEP_SCHEDULE = "f.block(x:4);\nf.compile();\n"


def deep_program(case: str):
    rvar = "RVar y;\n" if "B[y]" in DEEP[case] else ""
    inputs = "A, B" if rvar else "A"
    return dt.loads(f"Func f;\nIn {inputs};\nVar x;\n{rvar}{DEEP[case]}\n{DEEP_SCHEDULE}")


@pytest.mark.parametrize("backend", ["interp", pytest.param("numba", marks=pytest.mark.slow),  # LLVM takes its time
                                     pytest.param("triton", marks=pytest.mark.needs_triton)])
@pytest.mark.parametrize("case", DEEP)
def test_deep_expressions(backend, case):
    prog = deep_program(case)
    extents = {"x": 9, "y": 5} if "B" in prog.inputs else {"x": 9}
    run_and_compare(prog, backend, random_inputs(prog, extents, "f32", seed=2))


def bracket_depth(source: str) -> int:
    depth = deepest = 0
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.OP and tok.string in "([{":
            depth += 1
            deepest = max(deepest, depth)
        elif tok.type == tokenize.OP and tok.string in ")]}":
            depth -= 1
    return deepest


@pytest.mark.parametrize("backend", BACKENDS)
def test_no_generated_expression_nests_deeply(backend):
    if not backends.available(backend):
        pytest.skip(f"backend {backend} is not available: {backends.failures().get(backend)}")
    for case in DEEP:
        prog = deep_program(case)
        for s in S.walk_statements(prog.pipeline().kernels[0].body):
            if isinstance(s, (S.Assign, S.Store)):
                assert nesting(s.value) <= MAX_NESTING + 1, (case, s)
        assert bracket_depth(prog.source(backend)) <= 4 * MAX_NESTING, case  # Python's parser takes 200


def test_shallow_expressions_are_left_as_they_are():
    prog = dt.loads(f"Func f;\nIn A;\nVar x;\nf[x] = {chain('A[x]', '+', MAX_NESTING - 2)};\n{DEEP_SCHEDULE}")
    assigns = [s for s in S.walk_statements(prog.pipeline().kernels[0].body) if isinstance(s, S.Assign)]
    assert [s.name for s in assigns] == ["A", "f"]


def test_assigned_tiles_hold_numbers():
    """The lowering casts every comparison it assigns to a tile, and so does the splitting of deep
    expressions: only where a tile is read is a number compared again (a Ref of a boolean dtype)."""
    programs = [dt.load(p) for p in sorted(Path(__file__).parent.parent.glob("examples/*.dt"))]
    programs += [deep_program(case) for case in DEEP]
    for prog in programs:
        for kernel in prog.pipeline().kernels:
            for s in S.walk_statements(kernel.body):
                assert not (isinstance(s, S.Assign) and s.value.dtype == "bool"), (prog.name, s.name)
