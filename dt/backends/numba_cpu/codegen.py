"""Scheduled IR → a standalone Python module compiled with Numba.

The module mirrors the interpreter's: each kernel becomes a function that runs the IR's
statements for a range of program ids (the same block decomposition, tile loops and
accumulators), and `_launch` runs every program instance of a launch, spread over threads. The
entry function at the end takes the arrays, scalars and extents by their DT names, checks them
and launches the kernels in order.

Tiles are not NumPy temporaries: every tile statement becomes scalar loops over the *valid*
lanes of its axes (masked lanes are never computed, loaded or stored, so `Mask` is true wherever
it is evaluated), with the element-wise work fused into one loop body LLVM vectorises:
- a tile assigned once and used where it is computed is inlined into its uses (loads are read
  straight from the tensors); other tiles (accumulators, tiles used twice or in a deeper loop)
  live in scratch arrays allocated once per call of the kernel function, or in scalars
  where every axis has one lane;
- a `Reduce` is a loop over its axis with a scalar accumulator, placed at the outermost lane
  loop its operand allows;
- a `Dot` calls the `_dot` micro-kernel, on operands in memory (a tensor, a stored tile) in
  place, on others after packing them into a scratch tile.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from dt.backends.numba_cpu import helpers
from dt.backends.pysource import Names, Writer, index, number, safe_text
from dt.ir import scheduled as S
from dt.ir.nesting import MAX_NESTING

# Kernels may reassociate (vectorised reductions), contract to FMAs and use reciprocals; they
# keep inf and NaN semantics (no 'nnan' / 'ninf'): -inf is the identity of rmax.
KERNEL_FASTMATH = ("afn", "arcp", "contract", "nsz", "reassoc")
HELPER_FASTMATH = ("contract", "nsz")

NUMPY_DTYPE = {"f32": "np.float32", "f64": "np.float64", "f16": "np.float16"}
DTYPE_NAME = {"f32": "float32", "f64": "float64", "f16": "float16", "bf16": "bfloat16"}
HALF = ("f16", "bf16")  # stored as uint16 bits
INTRINSICS = {"_reduce_max", "_reduce_min"}  # helpers written with numba.extending.intrinsic and llvmlite
MODULE_GLOBALS = ("math", "np", "numba", "njit", "intrinsic", "ir", "ThreadPoolExecutor", "count", "f32", "f64",
                  "i32", "i64", "u16", "u32", "u64", "_KERNEL", "_HELPER", "_POOL", "_launch", "_operand", "_result")

# Threads run the program instances of a launch: numba's parallel loops (prange) cost seconds of
# compile time per kernel, several times what the kernel itself costs, while the serial `nogil`
# kernels below run in parallel from a plain thread pool just as fast.
LAUNCH = '''\
def _launch(kernel, programs, *args):
    """Run program instances 0..programs-1 of `kernel` on numba.get_num_threads() threads
    (NUMBA_NUM_THREADS by default). The threads take chunks of consecutive program ids in turn,
    so that one slowed down by other work on the machine ends up with fewer."""
    threads = min(numba.get_num_threads(), programs)
    if threads == 1:
        kernel(0, programs, *args)
        return
    chunks = min(programs, 4 * threads)
    chunk_ids = count()  # shared by the threads: next() on it is atomic

    def work():
        for chunk in chunk_ids:
            if chunk >= chunks:
                return
            kernel(programs * chunk // chunks, programs * (chunk + 1) // chunks, *args)

    kernel(0, 0, *args)  # compiles it, or loads it from the cache, in this thread only
    others = [_POOL.submit(work) for _ in range(threads - 1)]
    work()
    for other in others:
        other.result()
'''
BUILTINS = ("abs", "dict", "float", "int", "len", "max", "min", "range", "tuple", "ValueError", "True", "False",
            "None")


def render(pipeline: S.Pipeline) -> str:
    return _Module(pipeline).render()


def entry_name(pipeline: S.Pipeline) -> str:
    """The name of the module's entry function."""
    return _Module(pipeline).entry


class _Module:
    def __init__(self, pipeline: S.Pipeline):
        self.p = pipeline
        self.names = Names(MODULE_GLOBALS + BUILTINS + tuple(helpers.HELPERS))
        self.entry = self.names.ir(pipeline.name)
        self.kernels = [(k, self.names.ir(k.name)) for k in pipeline.kernels]
        self.helpers: set[str] = set()

    def render(self) -> str:
        bodies = []
        for kernel, fn in self.kernels:
            gen = _Kernel(self.p, kernel, fn, self.names)
            bodies.append(gen.render())
            self.helpers |= gen.helpers
        w = Writer()
        self.header(w)
        for name in helpers.closure(self.helpers):
            w.line("")
            w.line("")
            w.lines += helpers.HELPERS[name].rstrip("\n").split("\n")
        for text in bodies:
            w.line("")
            w.line("")
            w.lines += text.rstrip("\n").split("\n")
        w.line("")
        w.line("")
        self.entry_function(w)
        return w.text()

    def header(self, w: Writer):
        p = self.p
        w.line(f'"""{p.name}: generated by dt from {safe_text(p.file) or "a DT program"} for the Numba CPU backend.')
        w.line("")
        w.line("Each *_kernel function runs a range of the program instances of a kernel launch, computing")
        w.line("their tiles with loops over the valid lanes; _launch spreads a launch over threads.")
        w.line(f"`{self.entry}` at the end is the entry point. Needs numpy and numba only.")
        w.line('"""')
        w.line("import math")
        w.line("from concurrent.futures import ThreadPoolExecutor")
        w.line("from itertools import count")
        w.line("")
        w.line("import numba")
        w.line("import numpy as np")
        intrinsics = bool(self.helpers & INTRINSICS)
        if intrinsics:
            w.line("from llvmlite import ir  # numba's own dependency: the LLVM types of _reduce_max / _reduce_min")
        w.line("from numba import njit")
        if intrinsics:
            w.line("from numba.extending import intrinsic")
        w.line("")
        w.line("f32, f64, i32, i64 = np.float32, np.float64, np.int32, np.int64")
        w.line("u16, u32, u64 = np.uint16, np.uint32, np.uint64")
        w.line("# cache=True: numba keeps the machine code next to this file for the next process.")
        w.line("# nogil=True: the kernels of one launch run in several threads at once.")
        w.line('# error_model="numpy": division by zero gives inf / NaN, as in NumPy, without checks.')
        fm = ", ".join(f'"{f}"' for f in KERNEL_FASTMATH)
        w.line(f'_KERNEL = dict(cache=True, nogil=True, error_model="numpy", fastmath={{{fm}}})')
        hfm = ", ".join(f'"{f}"' for f in HELPER_FASTMATH)
        w.line(f'_HELPER = dict(cache=True, error_model="numpy", fastmath={{{hfm}}})')
        w.line('_POOL = ThreadPoolExecutor(max(1, numba.config.NUMBA_NUM_THREADS - 1), thread_name_prefix="dt")')
        w.line("")
        w.line("")
        w.lines += LAUNCH.rstrip("\n").split("\n")
        w.line("")
        w.line("")
        w.line("def _operand(array, name, dtype, shape):")
        w.line('    """`array` as the kernels take it: C-contiguous, float16 / bfloat16 as their uint16 bits."""')
        w.line("    array = np.asarray(array, order=\"C\")  # a 0-d array stays 0-d")
        w.line("    if array.dtype.name != dtype or array.shape != shape:")
        w.line('        raise ValueError(f"{name} must be a {dtype} array of shape {shape}, "')
        w.line('                         f"not {array.dtype.name} {array.shape}")')
        w.line('    return array.view(np.uint16) if dtype in ("float16", "bfloat16") else array')
        w.line("")
        w.line("")
        w.line("def _result(out, name, dtype, shape):")
        w.line('    """A new output array, or `out` checked to be one the kernels can write."""')
        w.line("    if out is None:")
        w.line("        return np.empty(shape, dtype)")
        w.line("    if out.dtype != dtype or out.shape != shape or not out.flags.c_contiguous:")
        w.line('        raise ValueError(f"{name} must be a C-contiguous {np.dtype(dtype).name} array of shape {shape}")')
        w.line("    return out")

    def entry_function(self, w: Writer):
        p = self.p
        # Tensors are called by their DT names here, as the docstring says; a scalar, an extent or a
        # tensor may be called what another is (`x_SIZE`), hence three tables.
        local = Names(self.names.taken | {"out"})
        params = {t.name: local.fresh(t.name) for t in p.inputs}
        scalars = {s: local.fresh(s) for s in p.scalars}
        sizes = {d: local.fresh(S.size_name(d)) for d in p.sizes}
        params.update({t.name: local.fresh(t.name) for t in p.outputs + p.temporaries})

        def shape(t: S.TensorSpec) -> str:
            dims = [sizes[d] for d in t.dims]
            return f"({dims[0]},)" if len(dims) == 1 else f"({', '.join(dims)})"

        storage = self.storage_dtype(params)
        args = [params[t.name] for t in p.inputs] + [scalars[s] for s in p.scalars] \
            + [sizes[d] for d in p.sizes] + ["out=None"]
        single = len(p.outputs) == 1
        w.line(f"def {self.entry}({', '.join(args)}):")
        with w.indent():
            ins = ", ".join(f"{t.name}[{', '.join(t.dims)}] {t.dtype}" for t in p.inputs) or "no tensors"
            outs = ", ".join(f"{t.name}[{', '.join(t.dims)}] {t.dtype}" for t in p.outputs)
            w.line(f'"""{ins} -> {outs}, returned by name. Extents are passed as <dim>_SIZE.')
            w.line("out: an existing C-contiguous array of the output's dtype and shape to write it into" if single
                   else "out: a dict of existing C-contiguous arrays, by output name, to write outputs into")
            w.line('(then no output is allocated)."""')
            for t in p.outputs:  # first: a bfloat16 output takes its dtype from an input
                given = "out" if single else f'None if out is None else out.get("{t.name}")'
                w.line(f'{params[t.name]} = _result({given}, "{t.name}", {storage}, {shape(t)})')
            for t in p.inputs:
                w.line(f'{params[t.name]} = _operand({params[t.name]}, "{t.name}", "{DTYPE_NAME[t.dtype]}", {shape(t)})')
            for s in p.scalars:
                w.line(f"{scalars[s]} = {p.compute_dtype}({scalars[s]})")
            for t in p.temporaries:
                dtype = "np.uint16" if t.dtype in HALF else storage
                w.line(f"{params[t.name]} = np.empty({shape(t)}, {dtype})")
            for kernel, fn in self.kernels:
                ps = S.kernel_params(kernel, p)
                extents = {S.size_name(d): name for d, name in sizes.items()}
                call = [fn, index(_rename(kernel.program_count, lambda n: extents.get(n, n)))]
                for name in ps.tensors:
                    spec = p.tensor(name)
                    view = ".view(np.uint16)" if spec.role == "output" and spec.dtype in HALF else ""
                    call.append(params[name] + view)
                call += [scalars[s] for s in ps.scalars] + [extents[s] for s in ps.sizes]
                w.line(f"_launch({', '.join(call)})")
            outs = ", ".join(f'"{t.name}": {params[t.name]}' for t in p.outputs)
            w.line(f"return {{{outs}}}")

    def storage_dtype(self, params) -> str:
        """The dtype of outputs, as an expression of the entry function."""
        dtype = next(iter({t.dtype for t in self.p.outputs}), "f32")
        if dtype == "bf16":  # the inputs carry the bfloat16 dtype object: no ml_dtypes import
            source = next(t for t in self.p.inputs if t.dtype == "bf16")
            return f"{params[source.name]}.dtype"
        return NUMPY_DTYPE[dtype]


# ---------------------------------------------------------------------------- one kernel


@dataclass
class _Storage:
    """Where a materialised tile lives, in the compute dtype: a scratch array over `dims`, or a
    scalar (no dims)."""
    name: str
    dims: tuple[str, ...]


@dataclass
class _Level:
    """One loop of a statement's lane-loop nest (axis None: the statement's own level). `lines`
    run once per lane; an item that is a _Level is a nested loop (a reduction); `inner` runs
    after the lines."""
    axis: str | None
    lines: list = field(default_factory=list)
    inner: "_Level | None" = None


class _Kernel:
    def __init__(self, pipeline: S.Pipeline, kernel: S.Kernel, fn: str, module_names: Names):
        self.p = pipeline
        self.k = kernel
        self.fn = fn
        self.compute = pipeline.compute_dtype
        self.helpers: set[str] = set()
        # The kernel's IR names first (as they are), then the names it derives (`x_valid`, `sum_y`).
        self.names = Names(module_names.taken | {"first", "last"})
        self.params = S.kernel_params(kernel, pipeline)
        self.pid = self.names.ir("pid")
        global_names = pipeline.global_names
        self.tensor = {t: self.names.ir(global_names.tensors[t]) for t in self.params.tensors}  # its parameter
        self.scalar = {s: self.names.ir(global_names.scalars[s]) for s in self.params.scalars}
        for size in self.params.sizes:
            self.names.ir(size)
        self.axes: dict[str, S.Axis] = {}
        self.assigns: dict[str, list[S.Assign]] = {}
        for s in S.walk_statements(kernel.body):
            if isinstance(s, S.Axis):
                self.axes[s.name] = s
            elif isinstance(s, S.Assign):
                self.assigns.setdefault(s.name, []).append(s)
            if isinstance(s, (S.Let, S.Assign)):
                self.names.ir(s.name)
            elif isinstance(s, S.For):
                self.names.ir(s.var)
        # per axis: its first index, its number of valid lanes, and its lane variable
        self.start: dict[str, str] = {}
        self.count: dict[str, str] = {}
        self.lane: dict[str, str] = {}
        for a in self.axes.values():
            if not self.single(a.name):
                self.count[a.name] = self.names.fresh(f"{a.name}_valid")
                self.lane[a.name] = self.names.fresh(f"{a.name}_i")
        self.dot_targets = {s.name for ss in self.assigns.values() for s in ss if isinstance(s.value, S.Dot)}
        self.inlined: dict[str, S.TExpr] = {}
        self.storage: dict[str, _Storage] = {}
        self.scratch: list[tuple[str, tuple[str, ...]]] = []  # (name, shape) of each scratch tile
        self.plan()

    # ------------------------------------------------------------------ analysis
    def single(self, axis: str) -> bool:
        """An axis of one lane that is always valid: no loop, lane 0."""
        a = self.axes[axis]
        return a.size == S.IConst(1) and a.limit is None

    def plan(self):
        """Which tiles are inlined into their uses, and where the others are kept."""
        order = []  # statements in program order with their enclosing loops
        def visit(body, loops):
            for s in body:
                order.append((s, loops))
                if isinstance(s, S.For):
                    visit(s.body, loops + (id(s),))
        visit(self.k.body, ())
        writes: dict[str, list[int]] = {}
        for i, (s, _) in enumerate(order):
            if isinstance(s, S.Assign):
                writes.setdefault(s.name, []).append(i)
        uses: dict[str, list[tuple[int, tuple, tuple[str, ...]]]] = {}
        for i, (s, loops) in enumerate(order):
            if isinstance(s, (S.Assign, S.Store)):
                for name, lanes in self.refs(s.value, self.lanes_of(s.value)):
                    uses.setdefault(name, []).append((i, loops, lanes))
        reads: dict[str, set[str]] = {}  # the stored tiles an inlined tile's value reads
        for i, (s, loops) in enumerate(order):
            if not isinstance(s, S.Assign):
                continue
            own = {r for r, _ in self.refs(s.value, ())}
            reads[s.name] = set().union(*(reads.get(r, {r}) for r in own)) if own else set()
            if self.inlinable(s, i, loops, writes, uses.get(s.name, []), reads[s.name], order):
                self.inlined[s.name] = s.value
            else:
                reads[s.name] = {s.name}
        for name, ss in self.assigns.items():
            if name in self.inlined:
                continue
            value = ss[0].value
            if name in self.dot_targets:
                dims = value.dims
            else:
                dims = tuple(d for d in value.dims if d not in value.unit and not self.single(d))
            self.storage[name] = _Storage(self.names.ir(name), dims)
            if dims:
                self.scratch.append((self.names.ir(name), tuple(self.idx(self.axes[d].size) for d in dims)))

    def inlinable(self, s: S.Assign, i, loops, writes, uses, reads, order) -> bool:
        if len(writes[s.name]) > 1 or any(isinstance(n, (S.Reduce, S.Dot)) for n in S.walk_texpr(s.value)):
            return False
        cheap = self.cheap(s.value)
        if not cheap:
            if len(uses) > 1:
                return False
            value_lanes = tuple(sorted(self.lanes_of(s.value)))
            if any(use_loops != loops or tuple(sorted(lanes)) != value_lanes for _, use_loops, lanes in uses):
                return False  # it would be recomputed per iteration of a loop, or per lane of an axis
        for j, use_loops, _ in uses:
            entered = set(use_loops) - set(loops)
            for w in (w for r in reads for w in writes.get(r, ())):
                if i < w < j or entered & set(order[w][1]):
                    return False  # what it reads changes before the use, or in a loop around the use
        # the lowering split deep expressions into tiles (dt.ir.nesting): inlining must not join them again
        return self.inlined_nesting(s.value) <= MAX_NESTING

    def inlined_nesting(self, e: S.TExpr) -> int:
        """How deep e nests with the tiles inlined into it."""
        if isinstance(e, S.Ref) and e.name in self.inlined:
            return self.inlined_nesting(self.inlined[e.name])
        return 1 + max((self.inlined_nesting(c) for c in S.texpr_children(e)), default=0)

    def cheap(self, e: S.TExpr) -> bool:
        """Costs no more to recompute than to keep: loads, references, constants, relayouts."""
        if isinstance(e, (S.Load, S.Literal, S.Param, S.Extent, S.IndexOf, S.Mask, S.Full)):
            return True
        if isinstance(e, S.Ref):
            return e.name not in self.inlined or self.cheap(self.inlined[e.name])
        if isinstance(e, (S.Expand, S.BroadcastTo)):
            return self.cheap(e.x)
        if isinstance(e, S.Cast):
            return e.dtype == self.compute and self.cheap(e.x)
        return False

    def lanes_of(self, e: S.TExpr) -> tuple[str, ...]:
        """The axes whose lanes a value is computed over."""
        return tuple(d for d in e.dims if d not in e.unit and not self.single(d))

    def refs(self, e: S.TExpr, lanes):
        """(tile name, axes of the loops it is evaluated in) for every Ref in e."""
        if isinstance(e, S.Ref):
            yield e.name, lanes
            return
        if isinstance(e, S.Reduce):
            yield from self.refs(e.x, self.lanes_of(e.x))
            return
        if isinstance(e, S.Dot):
            yield from self.refs(e.a, self.lanes_of(e.a))
            yield from self.refs(e.b, self.lanes_of(e.b))
            if e.acc is not None:
                yield from self.refs(e.acc, lanes)
            return
        for c in S.texpr_children(e):
            yield from self.refs(c, lanes)

    def deps(self, e: S.TExpr) -> set[str]:
        """The looped axes a value varies along."""
        if isinstance(e, S.Load):
            return {a for a in e.indices if not self.single(a)}
        if isinstance(e, S.IndexOf):
            return set() if self.single(e.axis) else {e.axis}
        if isinstance(e, S.Ref):
            if e.name in self.inlined:
                return self.deps(self.inlined[e.name])
            return {d for d in self.storage[e.name].dims if not self.single(d)}
        if isinstance(e, S.Reduce):
            return self.deps(e.x) - {e.axis}
        out: set[str] = set()
        for c in S.texpr_children(e):
            out |= self.deps(c)
        return out

    # ------------------------------------------------------------------ rendering
    def render(self) -> str:
        body = Writer()
        body.depth = 2
        self.body(body, self.k.body)  # first: it adds the Dots' operand tiles to the scratch
        w = Writer()
        w.line("@njit(**_KERNEL)")
        w.line(f"def {self.fn}({', '.join(['first', 'last'] + self.args())}):")
        with w.indent():
            where = f" (line {self.k.loc.line})" if self.k.loc else ""
            w.line(f'"""Program instances first..last-1 of the kernel computing {self.k.func}{where}."""')
            if self.scratch:
                w.line("# scratch tiles, reused by every program instance")
            for name, shape in self.scratch:
                shape_text = f"({shape[0]},)" if len(shape) == 1 else f"({', '.join(shape)})"
                w.line(f"{name} = np.empty({shape_text}, {NUMPY_DTYPE[self.compute]})")
            w.line(f"for {self.pid} in range(first, last):")
        w.lines += body.lines
        return w.text()

    def args(self) -> list[str]:
        return [self.tensor[t] for t in self.params.tensors] + [self.scalar[s] for s in self.params.scalars] \
            + [self.names.ir(s) for s in self.params.sizes]

    def idx(self, e: S.IExpr) -> str:
        return index(_rename(e, self.names.ir))

    def body(self, w: Writer, stmts):
        written = len(w.lines)
        for s in stmts:
            self.stmt(w, s)
        if len(w.lines) == written:  # nothing, or only tiles inlined into later uses
            w.line("pass")

    def stmt(self, w: Writer, s):
        if isinstance(s, S.Let):
            w.line(f"{self.names.ir(s.name)} = {self.idx(s.value)}")
        elif isinstance(s, S.Axis):
            self.axis(w, s)
        elif isinstance(s, S.For):
            step = f", {s.step}" if s.step != 1 else ""
            w.line(f"for {self.names.ir(s.var)} in range({self.idx(s.start)}, {self.idx(s.stop)}{step}):")
            with w.indent():
                self.body(w, s.body)
        elif isinstance(s, S.Assign):
            self.assign(w, s)
        elif isinstance(s, S.Store):
            self.store(w, s)
        else:
            raise AssertionError(s)

    def axis(self, w: Writer, a: S.Axis):
        # Indices are uint64: numba then skips its negative-index wraparound, whose selects
        # would keep LLVM from vectorising the lane loops.
        start = self.idx(a.start)
        self.start[a.name] = self.names.fresh(f"{a.name}_start")
        w.line(f"{self.start[a.name]} = u64({start})")
        if a.name in self.count:
            size = self.idx(a.size)
            if not isinstance(a.start, (S.IVar, S.IConst)):
                start = f"({start})"
            valid = size if a.limit is None else f"min({size}, {self.idx(a.limit)} - {start})"
            w.line(f"{self.count[a.name]} = u64({valid})  # valid lanes of {a.dim}")

    def counted(self, axis: str) -> str:
        return "u64(1)" if self.single(axis) else self.count[axis]

    # ---- statements
    def assign(self, w: Writer, s: S.Assign):
        if s.name in self.inlined:
            return
        store = self.storage[s.name]
        if isinstance(s.value, S.Dot):
            self.dot(w, s, store)
            return
        self.nest(w, store.dims, lambda env: f"{self.at(store, env)} = ", s.value)

    def store(self, w: Writer, s: S.Store):
        spec = self.p.tensor(s.tensor)
        tensor = self.tensor[s.tensor]
        convert = {"f16": "_f32_to_f16", "bf16": "_f32_to_bf16"}.get(spec.dtype)
        if convert:
            self.helpers.add(convert)

        def target(env):
            return f"{tensor}[{self.subscript(s.indices, env)}] = " + (f"{convert}(" if convert else "")

        self.nest(w, s.indices, target, s.value, ")" if convert else "")

    def nest(self, w: Writer, dims, target, value: S.TExpr, close: str = ""):
        """target(env) + value + close, for every valid lane of `dims` (loops over those with
        more than one lane, the first outermost)."""
        looped = [d for d in dims if not self.single(d)]
        levels = [_Level(None)] + [_Level(d) for d in looped]
        for outer, inner in zip(levels, levels[1:]):
            outer.inner = inner
        env = {d: self.lane[d] for d in looped}
        env.update({d: "0" for d in dims if self.single(d)})
        text = self.expr(value, env, levels)
        levels[-1].lines.append(f"{target(env)}{text}{close}")
        self.emit(w, levels[0])

    def emit(self, w: Writer, level: _Level):
        for item in level.lines:
            if isinstance(item, _Level):
                self.loop(w, item)
            else:
                w.line(item)
        if level.inner is not None:
            self.loop(w, level.inner)

    def loop(self, w: Writer, level: _Level):
        if level.axis is None:
            self.emit(w, level)
            return
        w.line(f"for {self.lane[level.axis]} in range({self.count[level.axis]}):")
        with w.indent():
            self.emit(w, level)

    def at(self, store: _Storage, env) -> str:
        """The element of a stored tile at the lanes in env."""
        if not store.dims:
            return store.name
        return f"{store.name}[{', '.join(env.get(d, '0') for d in store.dims)}]"

    def subscript(self, axes, env) -> str:
        """The index of a tensor element at the lanes in env; () for a rank-0 tensor."""
        return ", ".join(self.absolute(a, env) for a in axes) or "()"

    def absolute(self, axis: str, env) -> str:
        lane, start = env.get(axis, "0"), self.start[axis]
        return start if lane == "0" else f"{start} + {lane}"

    # ---- Dot: the micro-kernel reads operands in memory in place, others are packed first
    def dot(self, w: Writer, s: S.Assign, store: _Storage):
        d: S.Dot = s.value
        i, j, k = d.a.dims[0], d.b.dims[1], d.axis
        assert store.dims == (i, j), (store.dims, i, j)
        operands = []
        for operand, dims, side in ((d.a, (i, k), "lhs"), (d.b, (k, j), "rhs")):
            found = self.in_memory(operand, dims)
            if found is None:
                base = _operand_name(operand) or f"{s.name}_{side}"
                pack = _Storage(self.names.fresh(f"{base}_tile"), dims)
                self.scratch.append((pack.name, tuple(self.idx(self.axes[x].size) for x in dims)))
                self.nest(w, dims, lambda env, pack=pack: f"{self.at(pack, env)} = ", operand)
                found = pack.name, "u64(0)", "u64(0)"
            operands.append(", ".join(found))
        if d.acc is None:
            self.nest(w, (i, j), lambda env: f"{self.at(store, env)} = ", S.Literal(0.0))
        elif not (isinstance(d.acc, S.Ref) and d.acc.name == s.name):
            self.nest(w, (i, j), lambda env: f"{self.at(store, env)} = ", d.acc)
        self.helpers.add("_dot")
        w.line(f"_dot({store.name}, {operands[0]}, {operands[1]}, {self.counted(i)}, {self.counted(j)}, "
               f"{self.counted(k)})")

    def in_memory(self, e: S.TExpr, dims) -> tuple[str, str, str] | None:
        """(array, first row, first column) holding operand e over `dims` as it is, if any: a load
        without conversion, or a stored tile laid out as `dims`."""
        while True:
            if isinstance(e, S.Where) and _is_mask(e.cond):
                e = e.a  # only valid lanes are read
            elif isinstance(e, S.Cast) and (e.dtype == self.compute or _exact_in(e.x, e.dtype, self)):
                e = e.x
            elif isinstance(e, S.Expand) and e.x.dims == e.dims:
                e = e.x
            elif isinstance(e, S.Ref) and e.name in self.inlined:
                e = self.inlined[e.name]
            else:
                break
        if isinstance(e, S.Ref) and self.storage[e.name].dims == tuple(dims):
            return self.storage[e.name].name, "u64(0)", "u64(0)"
        if isinstance(e, S.Load) and e.indices == tuple(dims) \
                and self.p.tensor(e.tensor).dtype == e.dtype == self.compute:
            return (self.tensor[e.tensor],) + tuple(self.absolute(a, {}) for a in dims)
        return None

    # ---- expressions, one lane at a time
    def const(self, value: float) -> str:
        text = number(value, "np.inf")
        return text if self.compute == "f64" else f"f32({text})"

    def expr(self, e: S.TExpr, env, levels) -> str:
        c = self.compute
        if isinstance(e, S.Literal):
            return self.const(e.value)
        if isinstance(e, S.Full):
            return self.const(e.value)
        if isinstance(e, S.Param):
            return self.scalar[e.name]
        if isinstance(e, S.Extent):
            return f"{c}({self.names.ir(S.size_name(e.dim))})"
        if isinstance(e, S.IndexOf):
            return f"{c}({self.absolute(e.axis, env)})"
        if isinstance(e, S.Index):
            return f"{c}({self.idx(e.value)})"
        if isinstance(e, S.Mask):
            return "True"  # only valid lanes are ever computed
        if isinstance(e, S.Ref):
            if e.name in self.inlined:
                return self.expr(self.inlined[e.name], env, levels)
            return self.at(self.storage[e.name], env)
        if isinstance(e, S.Load):
            return self.load(e, env)
        if isinstance(e, (S.Expand, S.BroadcastTo)):
            return self.expr(e.x, env, levels)
        if isinstance(e, S.Unary):
            return self.unary(e.op, self.expr(e.x, env, levels))
        if isinstance(e, S.Binary):
            a, b = self.expr(e.a, env, levels), self.expr(e.b, env, levels)
            if e.op == "and":
                return f"({a} & {b})"
            if e.op in ("maximum", "minimum"):
                self.helpers.add(f"_{e.op}")
                return f"_{e.op}({a}, {b})"
            if e.op == "pow":
                return f"({a} ** {b})"
            return f"({a} {e.op} {b})"
        if isinstance(e, S.Where):
            if _is_mask(e.cond):
                return self.expr(e.a, env, levels)
            cond = self.expr(e.cond, env, levels)
            return f"({self.expr(e.a, env, levels)} if {cond} else {self.expr(e.b, env, levels)})"
        if isinstance(e, S.Cast):
            return self.cast(e, env, levels)
        if isinstance(e, S.Reduce):
            return self.reduce(e, env, levels)
        raise AssertionError(f"the Numba backend cannot evaluate {type(e).__name__} inside an expression")

    def load(self, e: S.Load, env) -> str:
        """The element in e.dtype (a float16 / bfloat16 value is held exactly in a float32)."""
        stored = self.p.tensor(e.tensor).dtype
        value = f"{self.tensor[e.tensor]}[{self.subscript(e.indices, env)}]"
        if stored in HALF:
            self.helpers.add(f"_{stored}_to_f32")
            value, stored = f"_{stored}_to_f32({value})", "f32"
        if e.dtype in HALF and e.dtype != self.p.tensor(e.tensor).dtype:
            self.helpers.add(f"_round_{e.dtype}")
            value = f"_round_{e.dtype}({value if stored == 'f32' else f'f32({value})'})"
            stored = "f32"
        target = self.compute if e.dtype in HALF else e.dtype
        return value if stored == target else f"{target}({value})"

    def unary(self, op: str, x: str) -> str:
        c = self.compute
        if op == "neg":
            return f"(-{x})"
        if op == "not":
            return f"(not {x})"
        if op in ("exp", "tanh", "sigmoid"):
            if c == "f32":
                self.helpers.add(f"_{op}_f32")
                return f"_{op}_f32({x})"
            if op == "sigmoid":
                self.helpers.add("_sigmoid_f64")
                return f"_sigmoid_f64({x})"
            return f"math.{op}({x})"
        if op == "rsqrt":
            return f"({self.const(1.0)} / np.sqrt({x}))"
        if op == "erf":
            return f"{c}(math.erf({x}))"
        if op == "abs":
            return f"abs({x})"
        return f"np.{op}({x})"  # exp2 log log2 sqrt sin cos floor ceil: NumPy's, in the argument's dtype

    def cast(self, e: S.Cast, env, levels) -> str:
        x = self.expr(e.x, env, levels)
        if S.is_boolean(e.x, self.inlined):
            return f"{self.compute}({x})"
        if e.dtype == self.compute or _exact_in(e.x, e.dtype, self):
            return x
        name = f"_round_{e.dtype}"
        self.helpers.add(name)
        return f"{name}({x})"

    def reduce(self, e: S.Reduce, env, levels) -> str:
        """A scalar accumulator over the valid lanes of the axis, at the outermost level its
        operand allows; returns its name."""
        deps = self.deps(e.x) - {e.axis}
        depth = max((n for n, level in enumerate(levels) if level.axis in deps), default=0)
        r = self.names.fresh(f"{e.op}_{self.axes[e.axis].dim}")
        looped = not self.single(e.axis)
        child = _Level(e.axis if looped else None)
        env2 = {**env, e.axis: self.lane[e.axis] if looped else "0"}
        x = self.expr(e.x, env2, levels[:depth + 1] + [child])
        if e.op == "sum":
            child.lines.append(f"{r} += {x}")
        else:  # an LLVM intrinsic, which vectorises where _maximum would not (helpers.py)
            self.helpers.add(f"_reduce_{e.op}")
            child.lines.append(f"{r} = _reduce_{e.op}({r}, {x})")
        parent = levels[depth]
        parent.lines.append(f"{r} = {self.const(S.REDUCE_IDENTITY[e.op])}")
        parent.lines.append(child)
        return r


def _is_mask(e: S.TExpr) -> bool:
    while isinstance(e, (S.Expand, S.BroadcastTo)):
        e = e.x
    return isinstance(e, S.Mask)


def _exact_in(e: S.TExpr, dtype: str, kernel: _Kernel) -> bool:
    """e's values are already representable in `dtype` (a load of a tensor of that dtype)."""
    while True:
        if isinstance(e, (S.Expand, S.BroadcastTo)):
            e = e.x
        elif isinstance(e, S.Where) and _is_mask(e.cond):
            e = e.a
        elif isinstance(e, S.Ref) and e.name in kernel.inlined:
            e = kernel.inlined[e.name]
        else:
            return isinstance(e, S.Load) and dtype in (e.dtype, kernel.p.tensor(e.tensor).dtype)


def _operand_name(e: S.TExpr) -> str | None:
    while isinstance(e, (S.Expand, S.BroadcastTo, S.Cast)) or (isinstance(e, S.Where) and _is_mask(e.cond)):
        e = e.a if isinstance(e, S.Where) else e.x
    return e.name if isinstance(e, S.Ref) else None


def _rename(e: S.IExpr, rename) -> S.IExpr:
    if isinstance(e, S.IVar):
        return S.IVar(rename(e.name))
    if isinstance(e, S.IBin):
        return S.IBin(e.op, _rename(e.a, rename), _rename(e.b, rename))
    return e
