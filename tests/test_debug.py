"""dt.debug on the interpreter: DT_BACKEND selection, breakpoints (pdb driven through a real
session, the breakpoint hook, the API), stepping, tracing, the four sanitizers and the
shuffled launch order, and a breakpoint + trace on every example."""
import dataclasses
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

import dt
from dt import backends
from dt.debug import (DTDebugError, DTNonFiniteError, DTOutOfBoundsError, DTRaceError, DTSanitizerError, debugger,
                      DTUninitializedReadError)
from dt.errors import DTBackendError, DTError
from dt.ir import scheduled as S
from dt.testing import random_inputs
from example_sizes import SIZES, example_path

ROOT = Path(__file__).resolve().parent.parent
SOFTMAX = example_path("softmax")

# t is computed at root (its own kernel, a temporary in memory) and read transposed by out.
TRANSPOSE = """
Func out, t;
In A;
Var x, y;
t[x, y] = A[x, y] * 2;
out[x, y] = t[y, x] + 1;
t.block(x:4, y:4);
t.tensorize(x:4, y:4);
out.block(x:4, y:4);
out.tensorize(x:4, y:4);
out.compile();
"""

# Softmax that subtracts the row maximum: an rmax accumulator starts at -inf.
SAFE_SOFTMAX = """
Func sm, mx, s;
In A;
Var x;
RVar y;
mx[x] = rmax(A[x, y], y);
s[x] = rsum(exp(A[x, y] - mx[x]), y);
sm[x, y] = exp(A[x, y] - mx[x]) / reshape(s[x], x, 1);
sm.block(x:4);
sm.tensorize(y:512);
sm.tensorize(x:0);
mx.fuse_at(sm, x);
s.fuse_at(sm, x);
sm.compile_to_kernel();
"""

# log of the loaded tile: masked lanes load 0 and hold -inf, valid lanes are finite.
LOG = """
Func out;
In A;
Var x, y;
out[x, y] = log(A[x, y]);
out.block(x:1, y:64);
out.tensorize(y:64);
out.compile();
"""


@pytest.fixture(autouse=True)
def clean_debug_state(monkeypatch):
    for var in ("DT_BREAK", "DT_SANITIZE", "DT_SHUFFLE", "DT_BACKEND", "PYTHONBREAKPOINT"):
        monkeypatch.delenv(var, raising=False)
    dt.debug.clear()
    yield
    dt.debug.clear()


def softmax_input(rows=7, cols=600, scale=1.0):
    return (np.random.default_rng(0).standard_normal((rows, cols)) * scale).astype(np.float32)


def place(loc):
    return f"{Path(loc.file).name}:{loc.line}:{loc.col}"


def sizes_of(**extents):
    return {S.size_name(d): n for d, n in extents.items()}


# ---------------------------------------------------------------- corrupted pipelines (IR passes)

def _map_bodies(pipeline, fn):
    return dataclasses.replace(pipeline, kernels=tuple(dataclasses.replace(k, body=fn(k.body))
                                                       for k in pipeline.kernels))


def drop_axis_limit(pipeline, dim):
    """A broken pass: the axes of `dim` lose their limit, so their overhanging lanes are unmasked."""
    def fix(body):
        return tuple(dataclasses.replace(s, limit=None) if isinstance(s, S.Axis) and s.dim == dim else
                     dataclasses.replace(s, body=fix(s.body)) if isinstance(s, S.For) else s for s in body)
    return _map_bodies(pipeline, fix)


def shift_store(pipeline, dim):
    """A broken pass: the Store writes through an unmasked axis of `dim` one element further on."""
    def fix(body):
        out = []
        for s in body:
            if isinstance(s, S.For):
                s = dataclasses.replace(s, body=fix(s.body))
            elif isinstance(s, S.Store):
                axes = {a.dim: a for a in walk_axes(pipeline) if a.name in s.indices}
                shifted = S.Axis(f"{dim}_shifted", dim, S.iadd(axes[dim].start, 1), axes[dim].size, None)
                out.append(shifted)
                s = dataclasses.replace(s, indices=tuple(shifted.name if i == axes[dim].name else i
                                                         for i in s.indices))
            out.append(s)
        return tuple(out)
    return _map_bodies(pipeline, fix)


def walk_axes(pipeline):
    return [s for k in pipeline.kernels for s in S.walk_statements(k.body) if isinstance(s, S.Axis)]


def fold_program_ids(pipeline):
    """A broken program-id mapping: pids 2i and 2i+1 both compute block i (not a bijection)."""
    return _map_bodies(pipeline, lambda body: tuple(
        S.Let(s.name, S.ifloordiv(S.IVar("pid"), 2)) if isinstance(s, S.Let) and s.name == "x_pid" else s
        for s in body))


def merge_kernels(pipeline):
    """A broken fusion: the producer kernel's body runs inside the consumer's program instances,
    so an instance reads the producer's tiles that other instances of the same launch write."""
    k0, k1 = pipeline.kernels
    defined = {s.name for s in k0.body if isinstance(s, (S.Let, S.Axis))}
    body = k0.body + tuple(s for s in k1.body if not (isinstance(s, (S.Let, S.Axis)) and s.name in defined))
    merged = dataclasses.replace(k1, body=body, reads=k0.reads + k1.reads, writes=k0.writes + k1.writes)
    return dataclasses.replace(pipeline, kernels=(merged,))


def interp(pipeline):
    return backends.get("interp").compile(pipeline)


# ---------------------------------------------------------------- DT_BACKEND, plain path


USER_SCRIPT = """
import linecache
import numpy as np
import dt

prog = dt.load({softmax!r})
a = np.random.default_rng(0).standard_normal((7, 600)).astype(np.float32)
out = prog(A=a)
print("max error", float(np.abs(out - prog.reference(A=a)).max()))
print("generated:", sorted(k.split(" #")[0] for k in linecache.cache if k.startswith("<dt-generated")))
"""


def run_user_script(tmp_path, env_extra, stdin=""):
    script = tmp_path / "user_script.py"
    script.write_text(USER_SCRIPT.format(softmax=str(SOFTMAX)))
    env = {k: v for k, v in os.environ.items() if not k.startswith("DT_") and k != "PYTHONBREAKPOINT"}
    env.update(HOME=str(tmp_path), PYTHONPATH=str(ROOT), **env_extra)  # HOME: no user .pdbrc
    result = subprocess.run([sys.executable, str(script)], input=stdin, capture_output=True, text=True,
                            env=env, cwd=str(tmp_path), timeout=120)
    return result.stdout + result.stderr


def test_dt_backend_env_runs_unchanged_script_on_interp(tmp_path):
    out = run_user_script(tmp_path, {"DT_BACKEND": "interp"})
    assert "max error" in out
    assert "generated: ['<dt-generated interp softmax']" in out  # the interpreter, and only it, ran


def test_dt_backend_is_read_at_call_time(monkeypatch):
    prog = dt.load(SOFTMAX)
    a = softmax_input()
    prog(A=a, backend="interp")
    monkeypatch.setenv("DT_BACKEND", "no_such_backend")
    with pytest.raises(DTBackendError, match="unknown backend 'no_such_backend'"):
        prog(A=a)


def test_debugging_makes_the_interpreter_the_default(monkeypatch):
    from dt.runtime import resolve_backend
    monkeypatch.setenv("DT_BREAK", "softmax.dt:10@pid=99")
    assert resolve_backend(None) == "interp"
    monkeypatch.setenv("DT_BACKEND", "numba")  # an explicit choice still wins
    assert resolve_backend(None) == "numba"


def test_plain_runs_never_build_the_instrumented_variant(monkeypatch):
    from dt.debug import instrument

    def refuse(self, pipeline):
        raise AssertionError("instrumented variant built without a debugging feature")

    monkeypatch.setattr(instrument.Instrumented, "__init__", refuse)
    prog = dt.load(SOFTMAX)
    a = softmax_input()
    np.testing.assert_allclose(prog(A=a, backend="interp"), prog.reference(A=a), rtol=1e-5)
    assert "_dbg" not in prog.source("interp")


def test_instrumented_source_hooks_every_tile_statement():
    prog = dt.load(SOFTMAX)
    source = dt.debug.instrumented_source(prog)
    listing = dt.debug.statements(prog).splitlines()
    assert len(listing) == 9  # the sum's walk is two loops: its whole tiles, then its last, cut one
    for sid in range(9):
        assert f"if _on[{sid}]: _dbg.stop({sid}, locals())" in source
    assert '_dbg.load(1, "A", A_global' in source and '_dbg.store(8, "_softmax"' in source
    assert "examples/softmax.dt:9:27" in listing[1] and "y_iter" in listing[1]
    assert "examples/softmax.dt:9:27" in listing[3] and "y_iter_2" in listing[3]


# ---------------------------------------------------------------- a real pdb session


def test_pdb_session_break_at_func_for_one_pid_print_step_continue(tmp_path):
    commands = ["dwhere", "p pid", "p _sum.shape", "dshow _sum", "dtiles",
                "ds", "p A_2.shape", "p dbg.statement",
                "c", "p y_iter_3", "p dbg.ranges['y']", "c"]
    out = run_user_script(tmp_path, {"DT_BREAK": "_softmax@pid=1"}, "\n".join(commands) + "\n")
    stops = out.split("(Pdb) ")
    # The first stop: the DT line with a marker and caret, the program instance, the tiles.
    assert "examples/softmax.dt:10:22 in _softmax_kernel (Func _softmax), program 1 of 2, y_iter_3=0" in stops[0]
    assert "-> 10 | _softmax[x, y] = exp(A[x, y]) / reshape(_sum[x], x, 1);" in stops[0]
    assert "|                      ^^^^^^^" in stops[0]
    assert "axes: x 4:8 (3 of 4 lanes valid); y 0:512" in stops[0]
    assert "tiles: y_accumulator, _sum" in stops[0]
    assert "-> pass  # " in stops[0]  # pdb shows the stop frame's line
    dwhere, pid, shape, dshow, dtiles, ds, a2, statement, cont, y_iter, y_range, _ = stops[1:]
    assert "program 1 of 2" in dwhere
    assert pid.strip() == "1"
    assert shape.strip() == "(4,)"
    assert "_sum = tile of _sum (softmax.dt:9:1) [x 4:8 (3 of 4 lanes valid)] float32" in dshow
    assert dshow.rstrip().endswith("--]")  # the masked lane (row 7 does not exist)
    assert "y_accumulator  rsum accumulator (softmax.dt:9:18)" in dtiles
    # dstep: the next tile statement, with the load of A now in scope.
    assert "examples/softmax.dt:10:1 in _softmax_kernel" in ds
    assert "next tile statement: _softmax = (np.exp(A_3) / _sum[:, None])" in ds
    assert "tiles: y_accumulator, _sum, A" in ds
    assert a2.strip().startswith("*** NameError")  # tiles go by their DT names
    assert "_softmax = (np.exp(A_3)" in statement
    # continue: the next hit is the same program's next tile of y.
    assert "program 1 of 2, y_iter_3=512" in cont
    assert y_iter.strip() == "512"
    assert y_range.strip() == "(512, 600, 1024)"  # lanes 600.. of the last y tile are masked
    assert "max error" in stops[-1]
    assert float(stops[-1].split("max error")[1].split()[0]) < 1e-6


def test_pdb_session_masks_steps_into_generated_code_and_sets_breakpoints(tmp_path):
    commands = ["p bool(A.mask[:, 88:].all()), bool(A.mask[:3, :88].any())", "n", "n", "n", "p A.shape",
                "dbreak softmax.dt:10:1@pid=1", "c", "dbreak", "dclear", "c"]
    # the sum's last, cut tile of y is its walk's second loop's
    out = run_user_script(tmp_path, {"DT_BREAK": "softmax.dt:9:18@pid=1@y_iter_2=512"}, "\n".join(commands) + "\n")
    stops = out.split("(Pdb) ")
    assert "examples/softmax.dt:9:18 in _softmax_kernel (Func _softmax), program 1 of 2, y_iter_2=512" in stops[0]
    masks, ret, n1, n2, shape, dbreak, cont, listed, _, end = stops[1:]
    assert masks.strip() == "(True, False)"  # lanes past y's extent, and row 7, are masked
    # pdb's own `next` leaves the stop and walks the generated kernel, a real linecache'd file.
    assert "--Return--" in ret
    assert "<dt-generated interp softmax (dt.debug)" in n1 and \
        "-> y_accumulator = (y_accumulator + np.sum(np.where(rt.mask(y_2)[None, :], np.exp(A_2), 0.0), axis=1))" in n1
    assert "-> if _post[4]: _dbg.post(4, locals())" in n2
    assert shape.strip() == "(4, 512)"
    # A breakpoint set from pdb applies to the program already running.
    assert "dt breakpoint" in dbreak and "softmax.dt:10:1@pid=1" in dbreak
    assert "examples/softmax.dt:10:1 in _softmax_kernel (Func _softmax), program 1 of 2, y_iter_3=0" in cont
    assert "softmax.dt:9:18@pid=1@y_iter_2=512 (1 hit(s))" in listed and "softmax.dt:10:1@pid=1 (1 hit(s))" in listed
    assert "max error" in end  # dclear removed it: no stop at y_iter_3=512


def test_pdb_dnext_steps_over_a_dt_line(tmp_path):
    out = run_user_script(tmp_path, {"DT_BREAK": "_sum@pid=0"}, "p _sum\ndn\np int(_sum.count())\nc\n")
    stops = out.split("(Pdb) ")
    assert "NameError" in stops[1]  # _sum is not computed yet at its own breakpoint
    assert "examples/softmax.dt:10:22" in stops[2] and "tiles: y_accumulator, _sum" in stops[2]
    assert stops[3].strip() == "4"


# ---------------------------------------------------------------- breakpoint hook and API


def test_breakpoint_hook_is_called_from_a_frame_holding_the_dt_state(monkeypatch, capsys):
    seen = []

    def hook(*args, **kwargs):
        seen.append(dict(sys._getframe(1).f_locals))

    monkeypatch.setattr(sys, "breakpointhook", hook)
    # the hint is printed at a process's first stop: another test in this worker may have had it
    monkeypatch.setattr(debugger, "_hinted", False)
    dt.debug.break_at("softmax.dt:10", pid=0)
    prog = dt.load(SOFTMAX)
    prog(A=softmax_input())
    assert len(seen) == 2  # program 0, both tiles of y
    first = seen[0]
    assert set(first) >= {"dbg", "pid", "y_iter_3", "_sum", "y_accumulator"}
    assert first["pid"] == 0 and first["y_iter_3"] == 0 and seen[1]["y_iter_3"] == 512
    assert isinstance(first["_sum"], np.ma.MaskedArray) and not first["_sum"].mask.any()
    assert isinstance(first["dbg"], dt.debug.Frame)
    assert "dbg.step()" in capsys.readouterr().out  # the hint for hooks other than dt's pdb


def test_pythonbreakpoint_0_disables_stopping(monkeypatch, capsys):
    monkeypatch.setenv("PYTHONBREAKPOINT", "0")
    bp = dt.debug.break_at(func="_sum")
    out = dt.load(SOFTMAX)(A=softmax_input())
    assert out.shape == (7, 600) and bp.hits == 2
    assert "program 1 of 2" in capsys.readouterr().out


def test_func_breakpoint_is_its_definition_line_and_steps_statement_by_statement():
    prog = dt.load(SOFTMAX)
    trail = []

    def walk(frame):
        trail.append((frame.pid, place(frame.loc), dict(frame.iters), tuple(frame.tiles)))
        if len(trail) < 9:
            frame.step()

    with dt.debug.break_at(func="_sum", pid=1, action=walk) as bp:
        prog(A=softmax_input())
    assert bp.hits == 1
    assert trail == [
        (1, "softmax.dt:9:18", {}, ()),
        (1, "softmax.dt:9:27", {"y_iter": 0}, ("y_accumulator",)),
        (1, "softmax.dt:9:18", {"y_iter": 0}, ("y_accumulator", "A")),
        (1, "softmax.dt:9:27", {"y_iter_2": 512}, ("y_accumulator",)),  # the last, cut tile's loop
        (1, "softmax.dt:9:18", {"y_iter_2": 512}, ("y_accumulator", "A")),
        (1, "softmax.dt:9:1", {}, ("y_accumulator",)),
        (1, "softmax.dt:10:22", {"y_iter_3": 0}, ("y_accumulator", "_sum")),
        (1, "softmax.dt:10:1", {"y_iter_3": 0}, ("y_accumulator", "_sum", "A")),
        (1, "softmax.dt:10:1", {"y_iter_3": 0}, ("y_accumulator", "_sum", "A", "_softmax")),
    ]
    with dt.debug.break_at("softmax.dt:9", action=lambda f: trail.append(f.pid)) as line_bp:
        prog(A=softmax_input())
    assert line_bp.hits == 2 and trail[-2:] == [0, 1]  # once per program: like the Func


def test_stepping_crosses_into_the_next_program_instance():
    pids = []

    def walk(frame):
        pids.append((frame.pid, place(frame.loc)))
        if len(pids) < 3:
            frame.step()

    dt.debug.break_at("softmax.dt:10:1", pid=0, when={"y_iter_3": 512}, action=walk)
    dt.load(SOFTMAX)(A=softmax_input())
    assert pids == [(0, "softmax.dt:10:1"), (0, "softmax.dt:10:1"),
                    (1, "softmax.dt:9:18")]


def test_frame_shows_tiles_with_masked_lanes_and_index_ranges(capsys):
    frames = []
    dt.debug.break_at("softmax.dt:10:1@pid=1@y=550", action=frames.append)
    a = softmax_input()
    dt.load(SOFTMAX)(A=a)
    (f,) = frames
    assert f.iters == {"y_iter_3": 512} and f.ranges == {"x": (4, 7, 8), "y": (512, 600, 1024)}
    tile = f.tiles["A"]
    assert tile.shape == (4, 512) and tile.mask.sum() == 4 * 512 - 3 * 88
    np.testing.assert_array_equal(tile.compressed().reshape(3, 88), a[4:7, 512:600])
    assert (f.raw("A")[3] == 0).all()  # masked lanes of a load hold 0
    assert f.index("A") == {"x": (4, 7, 8), "y": (512, 600, 1024)}
    assert f.meaning("A") == "load of A (softmax.dt:10:22)"
    np.testing.assert_allclose(f.tiles["_sum"].compressed(), np.exp(a[4:7]).sum(1), rtol=1e-5)
    f.show("_sum")
    assert "x 4:8 (3 of 4 lanes valid)" in capsys.readouterr().out
    assert "-> 10 | _softmax[x, y]" in f.where() and "program 1 of 2, y_iter_3=512" in f.where()
    with pytest.raises(KeyError, match="no tile '_softmax' in scope"):
        f.raw("_softmax")


def test_a_one_pass_update_shows_its_values_as_the_reductions_they_belong_to():
    """The online softmax's running max, shift and rescaled sum are parts of rmax's and rsum's
    updates, shown under their generated names at the DT expression they come from, never as
    Funcs named 'rmax' or 'rsum'."""
    frames = []
    prog = dt.load(example_path("softmax_safe"))
    dt.debug.break_at("softmax_safe.dt:12@pid=0@y_iter=512", action=frames.append)
    a = np.random.default_rng(1).standard_normal((4, 1100)).astype(np.float32)
    with dt.debug.trace() as t:
        prog(A=a)
    f = frames[0]  # in the loop over y, at the sum's first statement of its second tile
    assert f.meaning("y_max") == "rmax update value (softmax_safe.dt:11:18)"
    assert f.meaning("y_max_accumulator") == "rmax accumulator (softmax_safe.dt:11:18)"
    np.testing.assert_allclose(f.tiles["y_max"].compressed(), a[:4, :1024].max(1))
    assert {r.name for r in t.records} == {"_max", "_sum", "_softmax"}
    np.testing.assert_allclose(t.tensor("_max"), a.max(1))


def test_breakpoint_conditions_pid_list_loop_variable_callable():
    hits = []
    prog = dt.load(SOFTMAX)
    with dt.debug.break_at("softmax.dt:10:22", pid=[0, 1], when={"y_iter_3": 512},
                           action=lambda f: hits.append((f.pid, f.iters["y_iter_3"]))):
        prog(A=softmax_input())
    assert hits == [(0, 512), (1, 512)]
    hits.clear()
    with dt.debug.break_at("_softmax", when=lambda f: f.pid == 1 and f.ranges["y"][0] == 0,
                           action=lambda f: hits.append(f.pid)):
        prog(A=softmax_input())
    assert hits == [1]


def test_breakpoint_added_during_a_stop_applies_to_the_same_run():
    hits = []

    def add_another(frame):
        hits.append(("first", frame.pid))
        dt.debug.break_at("softmax.dt:10:1", pid=1, action=lambda f: hits.append(("added", f.pid)))

    dt.debug.break_at("_sum", pid=0, action=add_another)
    dt.load(SOFTMAX)(A=softmax_input())
    assert hits == [("first", 0), ("added", 1), ("added", 1)]


def test_a_bad_breakpoint_set_during_a_stop_is_refused_there():
    errors = []

    def add_bad(frame):
        try:
            dt.debug.break_at("softmax.dt:4")
        except DTDebugError as e:
            errors.append(e)

    first = dt.debug.break_at("_sum", pid=0, action=add_bad)
    dt.load(SOFTMAX)(A=softmax_input())
    assert len(errors) == 1 and "no tile statement at line 4" in str(errors[0])
    assert dt.debug.breakpoints() == [first]


def test_dt_break_environment_several_specs(monkeypatch):
    seen = []
    monkeypatch.setattr(sys, "breakpointhook", lambda: seen.append(sys._getframe(1).f_locals["dbg"]))
    monkeypatch.setenv("DT_BREAK", "softmax.dt:9:1@pid=0; _softmax@pid=1@y=10 ,")
    dt.load(SOFTMAX)(A=softmax_input())
    assert [(f.pid, place(f.loc)) for f in seen] == [(0, "softmax.dt:9:1"), (1, "softmax.dt:10:22")]
    assert [b.spec for b in dt.debug.breakpoints()] == ["softmax.dt:9:1@pid=0", "_softmax@pid=1@y=10"]


def test_bad_breakpoints_are_clear_errors(monkeypatch):
    prog = dt.load(SOFTMAX)
    a = softmax_input()
    with pytest.raises(DTDebugError, match="a condition is name=value"):
        dt.debug.break_at("softmax.dt:9@pid")
    with pytest.raises(DTDebugError, match="cannot read breakpoint"):
        dt.debug.break_at("softmax.dt:nine")
    with pytest.raises(DTDebugError, match="needs a place"):
        dt.debug.break_at()
    with dt.debug.break_at("softmax.dt:4"):
        with pytest.raises(DTDebugError, match="no tile statement at line 4") as e:
            prog(A=a)
        assert "lines with statements: 9, 10" in e.value.render()
    with dt.debug.break_at("_sum@k_iter=0"):
        with pytest.raises(DTDebugError, match="k_iter names no loop variable or dimension"):
            prog(A=a)
    monkeypatch.setenv("DT_BREAK", "@@")
    with pytest.raises(DTDebugError):
        prog(A=a)
    monkeypatch.setenv("DT_BREAK", "other.dt:3")  # another program's file: nothing to do here
    assert prog(A=a).shape == (7, 600)


def test_clear_and_list_breakpoints():
    a = dt.debug.break_at("softmax.dt:9")
    b = dt.debug.break_at(func="_sum", pid=2)
    assert dt.debug.breakpoints() == [a, b] and b.spec == "_sum@pid=2"
    dt.debug.clear(a.id)
    assert dt.debug.breakpoints() == [b]
    with pytest.raises(DTDebugError, match="no breakpoint"):
        dt.debug.clear(a)
    dt.debug.clear()
    assert dt.debug.breakpoints() == []


def test_breakpoint_in_a_program_built_with_the_python_api():
    x, y = dt.Var("x"), dt.RVar("y")
    A = dt.In("A")
    s, sm = dt.Func("s"), dt.Func("sm")
    s[x] = dt.rsum(dt.exp(A[x, y]), y)
    sm[x, y] = dt.exp(A[x, y]) / s[x]
    s.fuse_at(sm, x)
    sm.block(x=4)
    sm.tensorize(x=0, y=512)
    sm.compile_to_kernel()
    prog = dt.program(sm)
    hits = []
    with dt.debug.break_at(func="s", pid=1, action=lambda f: hits.append(f.loc)):
        prog(A=softmax_input())
    assert len(hits) == 1 and hits[0].file == __file__ and "dt.rsum" in hits[0].text


def test_func_breakpoint_stops_only_in_its_func_when_another_is_defined_on_its_line():
    prog = dt.loads("Func f, g; In A; Var x;\nf[x] = A[x] * 2; g[x] = f[x] + 1;\ng.block(x:4);\nf.block(x:2);\n"
                    "f.compile();\ng.compile();\n", name="two", file="two.dt")
    for func, first in (("f", "two.dt:2:8"), ("g", "two.dt:2:25")):  # each stops at the first load it computes
        stops = []
        with dt.debug.break_at(func=func, action=lambda f: stops.append((f.func, place(f.loc)))) as bp:
            prog(A=np.arange(6, dtype=np.float32))
        assert bp.hits == len(stops) and set(stops) == {(func, first)}, stops


# ---------------------------------------------------------------- tracing


def test_trace_records_tiles_and_assembles_tensors():
    prog = dt.load(SOFTMAX)
    a = softmax_input()
    with dt.debug.trace("_sum", "_softmax", "A") as t:
        out = prog(A=a)
    sums = t.tiles("_sum")
    assert [(r.pid, r.kernel, r.index, r.iters, r.value.shape) for r in sums] == [
        (0, "_softmax_kernel", {"x": (0, 4)}, {}, (4,)), (1, "_softmax_kernel", {"x": (4, 7)}, {}, (3,))]
    np.testing.assert_allclose(t.tensor("_sum"), np.exp(a.astype(np.float64)).sum(1), rtol=1e-5)
    assert [r.index for r in t.tiles("_softmax", pid=1)] == [{"x": (4, 7), "y": (0, 512)},
                                                              {"x": (4, 7), "y": (512, 600)}]
    assert t.tiles("_softmax", pid=1)[1].iters == {"y_iter_3": 512}
    np.testing.assert_array_equal(t.tensor("_softmax"), out)  # an output: as its kernel stored it
    np.testing.assert_array_equal(t.tensor("A"), a)  # the loaded tiles of an input cover it
    with pytest.raises(DTDebugError, match="recorded nothing of 'mm'"):
        t.tensor("mm")


def test_trace_every_func_of_a_multi_kernel_program_and_chosen_pids():
    prog = dt.loads(TRANSPOSE, "transpose")
    a = np.arange(36, dtype=np.float32).reshape(6, 6)  # square: out[x, y] reads t[y, x]
    with dt.debug.trace() as every, dt.debug.trace("t", pid=0) as first:
        prog(A=a)
    assert {r.name for r in every.records} == {"t", "out"}
    np.testing.assert_array_equal(every.tensor("t"), a * 2)  # the temporary, from memory
    assert {r.pid for r in first.records} == {0} and len(first.records) == 1
    assert first.records[0].index == {"x": (0, 4), "y": (0, 4)}
    assert len(every.runs) == 1 and every.runs[0]["program"] == "transpose"


def test_trace_plot():
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    with dt.debug.trace("_softmax") as t:
        dt.load(SOFTMAX)(A=softmax_input())
    ax = t.plot("_softmax")
    assert ax.get_title() == "_softmax (4 tiles)" and len(ax.patches) == 4


# ---------------------------------------------------------------- sanitizers


def test_sanitizer_bounds_unmasked_load_out_of_bounds():
    prog = dt.load(SOFTMAX)
    a = softmax_input()
    sizes = sizes_of(x=7, y=600)
    broken = interp(drop_axis_limit(prog.pipeline("f32"), "y"))
    with pytest.raises(ValueError):  # unsanitized, NumPy trips over it somewhere, far from the cause
        broken({"A": a}, {}, sizes)
    with dt.debug.sanitize("bounds"), pytest.raises(DTOutOfBoundsError) as e:
        broken({"A": a}, {}, sizes)
    err = e.value
    assert isinstance(err, DTSanitizerError) and isinstance(err, DTError)
    # (the sum's last, cut tile of y, in its walk's second loop)
    assert (err.pid, err.tensor, err.index, err.iters, err.kernel) == (0, "A", (0, 600), {"y_iter_2": 512},
                                                                         "_softmax_kernel")
    assert place(err.loc) == "softmax.dt:9:27"
    assert "load of 'A' reads A[0, 600], outside its shape (7, 600)" in err.render()
    with dt.debug.sanitize("bounds"):  # the correct pipeline does not trip it
        np.testing.assert_allclose(interp(prog.pipeline("f32"))({"A": a}, {}, sizes)["_softmax"],
                                   prog.reference(A=a), rtol=1e-5)


def test_sanitizer_bounds_unmasked_store_out_of_bounds():
    prog = dt.load(example_path("add"))
    args = random_inputs(prog, dict(x=3, y=100), seed=1)
    broken = interp(shift_store(prog.pipeline("f32"), "y"))
    with dt.debug.sanitize(), pytest.raises(DTOutOfBoundsError) as e:
        broken({"A": args["A"], "B": args["B"]}, {"alpha": args["alpha"]}, sizes_of(x=3, y=100))
    assert "store of 'add_out' writes add_out[0, 100]" in str(e.value) and e.value.pid == 0
    with dt.debug.sanitize():
        np.testing.assert_allclose(prog(**args), prog.reference(**args), rtol=1e-5)


def test_sanitizer_uninit_read_of_a_temporary_never_written():
    prog = dt.loads(TRANSPOSE, "transpose")
    a = np.arange(64, dtype=np.float32).reshape(8, 8)
    broken = interp(merge_kernels(prog.pipeline("f32")))
    with dt.debug.sanitize("uninit"), pytest.raises(DTUninitializedReadError) as e:
        broken({"A": a}, {}, sizes_of(x=8, y=8))
    assert (e.value.pid, e.value.tensor, e.value.index) == (1, "t", (0, 4))
    assert "which no program instance has written" in str(e.value) and e.value.loc.line == 6
    with dt.debug.sanitize("uninit"):  # the two kernels, in order: every read was written
        np.testing.assert_array_equal(prog(A=a), a.T * 2 + 1)


def test_sanitizer_uninit_does_not_rely_on_nan():
    """A temporary that legitimately holds NaN is read without complaint: the shadow tracks writes."""
    prog = dt.loads(TRANSPOSE, "transpose")
    a = np.full((4, 4), np.nan, dtype=np.float32)
    with dt.debug.sanitize("uninit", "bounds", "race"):
        assert np.isnan(prog(A=a)).all()


def test_sanitizer_race_two_instances_write_one_element():
    prog = dt.load(SOFTMAX)
    a = softmax_input(8, 600)
    broken = interp(fold_program_ids(prog.pipeline("f32")))
    with dt.debug.sanitize("race"), pytest.raises(DTRaceError) as e:
        broken({"A": a}, {}, sizes_of(x=8, y=600))
    assert (e.value.pid, e.value.tensor, e.value.index) == (1, "_softmax", (0, 0))
    assert "program 0 of the same launch wrote it too" in str(e.value)
    with dt.debug.sanitize("race"):
        prog(A=a)


def test_sanitizer_race_read_of_what_another_instance_wrote_and_shuffled_order():
    prog = dt.loads(TRANSPOSE, "transpose")
    a = np.arange(144, dtype=np.float32).reshape(12, 12)
    broken = interp(merge_kernels(prog.pipeline("f32")))
    sizes = sizes_of(x=12, y=12)
    results = []
    for seed in range(4):  # the hidden order dependence shows as results that move with the order
        with dt.debug.shuffle(seed):
            results.append(np.isnan(broken({"A": a}, {}, sizes)["out"]))
    assert any(not np.array_equal(results[0], r) for r in results[1:])
    with dt.debug.sanitize("race", shuffle=0), pytest.raises(DTRaceError) as e:
        broken({"A": a}, {}, sizes)
    assert "reads t[8, 0]; program 2 of the same launch wrote it earlier" in str(e.value)
    with dt.debug.shuffle(3), dt.debug.trace("out") as t:  # a correct program: any order, same result
        np.testing.assert_array_equal(prog(A=a), a.T * 2 + 1)
    pids = [r.pid for r in t.records]
    assert sorted(pids) == list(range(9)) and pids != sorted(pids)


def test_sanitizer_nan_first_non_finite_on_a_valid_lane():
    prog = dt.load(SOFTMAX)
    big = softmax_input(scale=100)  # exp overflows: the naive softmax's bug
    with dt.debug.sanitize("nan"), pytest.raises(DTNonFiniteError) as e:
        prog(A=big)
    err = e.value
    assert place(err.loc) == "softmax.dt:9:18" and err.pid == 0 and err.iters == {"y_iter": 0}
    assert err.index == {"x": 0} and "rsum accumulator (softmax.dt:9:18) is inf at x=0" in str(err)
    assert "DT_BREAK=softmax.dt:9:18@pid=0@y_iter=0" in err.render()
    with dt.debug.sanitize("nan"):
        prog(A=softmax_input())
        dt.loads(SAFE_SOFTMAX, "safe_softmax")(A=big)  # -inf accumulator init is not a fault


def test_sanitizer_nan_ignores_masked_lanes():
    prog = dt.loads(LOG, "logs")
    a = np.random.default_rng(0).random((3, 100)).astype(np.float32) + 0.5
    with dt.debug.sanitize("nan"):  # lanes 100..127 load 0 and their log is -inf, never stored
        np.testing.assert_allclose(prog(A=a), np.log(a), rtol=1e-6)
    a[2, 70] = 0.0
    with dt.debug.sanitize("nan"), pytest.raises(DTNonFiniteError) as e:
        prog(A=a)
    assert e.value.index == {"x": 2, "y": 70} and "tile of out" in str(e.value)


def test_sanitizers_from_the_environment_and_a_clean_stop(monkeypatch):
    prog = dt.load(SOFTMAX)
    monkeypatch.setenv("DT_SANITIZE", "1")
    with pytest.raises(DTNonFiniteError):
        prog(A=softmax_input(scale=100))
    monkeypatch.setenv("DT_SANITIZE", "bounds,nonsense")
    with pytest.raises(DTDebugError, match="unknown sanitizer 'nonsense'"):
        prog(A=softmax_input())
    monkeypatch.setenv("DT_SANITIZE", "0")
    monkeypatch.setenv("DT_SHUFFLE", "x")
    with pytest.raises(DTDebugError, match="DT_SHUFFLE must be an integer"):
        prog(A=softmax_input())
    monkeypatch.delenv("DT_SHUFFLE")
    a = softmax_input()
    np.testing.assert_allclose(prog(A=a), prog.reference(A=a), rtol=1e-5)  # nothing left over


@pytest.mark.parametrize("variable,value", [("DT_SANITIZE", "0"), ("DT_SANITIZE", "off"), ("DT_SANITIZE", "No"),
                                            ("DT_SANITIZE", "false"), ("DT_BREAK", ";"), ("DT_BREAK", " , ")])
def test_environment_values_meaning_off_turn_nothing_on(monkeypatch, variable, value):
    from dt.debug import config
    from dt.runtime import resolve_backend
    default = resolve_backend(None)
    monkeypatch.setenv(variable, value)
    assert config.current() is None
    assert resolve_backend(None) == default  # not the interpreter, as while debugging
    with warnings.catch_warnings():
        warnings.simplefilter("error", dt.debug.DTDebugWarning)
        config.warn_if_ignored("numba", "relu")  # nothing is set, so nothing is ignored
    monkeypatch.setenv("DT_SANITIZE", "bounds")  # and a value that means on still is
    assert config.current().checks == {"bounds"} and resolve_backend(None) == "interp"


# ---------------------------------------------------------------- every example


@pytest.mark.parametrize("name", sorted(SIZES))
def test_breakpoint_trace_and_sanitizers_on_every_example(name):
    prog = dt.load(example_path(name))
    extents = SIZES[name][-1]  # sizes that divide nothing
    args = random_inputs(prog, extents, "f32", seed=2)
    output = prog.outputs[0]
    expected = prog(backend="interp", **args)
    frames = []
    with dt.debug.break_at(func=output, action=frames.append) as bp, dt.debug.trace() as t, \
            dt.debug.sanitize(shuffle=1):
        out = prog(**args)
    np.testing.assert_array_equal(out, expected)
    assert bp.hits == len(frames) >= 1
    last = max(frames, key=lambda f: f.pid)
    assert last.func == output and last.loc.line == prog.checked.funcs[output].loc.line
    assert last.pid == last.program_count - 1 >= 0
    np.testing.assert_array_equal(t.tensor(output), out)
    produced = {r.name for r in t.records}
    assert produced == set(prog.checked.funcs)  # every Func, fused ones included
    for record in t.records:
        assert record.value.shape == tuple(b - a for a, b in record.index.values())
