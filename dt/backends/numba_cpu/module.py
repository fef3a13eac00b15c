"""Scheduled IR → a standalone Python module compiled with Numba: the module around the kernels.

The module mirrors the interpreter's: each kernel becomes a function that runs the IR's
statements for a range of program ids (kernel.py), and `_launch` runs every program instance of
a launch, spread over threads. This file renders the rest: the header (imports, compile
options, `_launch`, argument checks), the helpers the kernels call (helpers.py), and the entry
function at the end, which takes the arrays, scalars and extents by their DT names, checks them
and launches the kernels in order.
"""
from __future__ import annotations

from dt.backends.numba_cpu import helpers
from dt.backends.numba_cpu.expr import AS_BITS
from dt.backends.numba_cpu.kernel import NUMPY_DTYPE, KernelRenderer
from dt.backends.pysource import Names, Writer, safe_text
from dt.dtypes import FLOAT8, INTEGERS, NUMPY, is_integer
from dt.ir import scheduled as S
from dt.ir import uses
from dt.ir.index_expr import index_source as index, renamed

# Kernels may reassociate (vectorised reductions), contract to FMAs and use reciprocals; they
# keep inf and NaN semantics (no 'nnan' / 'ninf'): -inf is the identity of rmax.
KERNEL_FASTMATH = ("afn", "arcp", "contract", "nsz", "reassoc")
HELPER_FASTMATH = ("contract", "nsz")

# NumPy's dtypes from ml_dtypes, by their names there (imported by a module with an output of one
# and no input of it)
ML_DTYPES = {"bf16": "bfloat16", "f8e4m3": "float8_e4m3fn", "f8e5m2": "float8_e5m2"}
DTYPE_NAME = ML_DTYPES | {d: NUMPY[d].name for d in ("f32", "f64", "f16") + INTEGERS}
# helpers written with numba.extending.intrinsic and llvmlite, or calling such helpers
INTRINSICS = {"_reduce_max", "_reduce_min", "_dot", "_pow2_scale"}
MODULE_GLOBALS = ("math", "os", "np", "numba", "njit", "intrinsic", "ir", "get_host_cpu_features", "llvm_version_info",
                  "cgutils",
                  "ThreadPoolExecutor", "count", "f32", "f64",
                  "i32", "i64", "u16", "u32", "u64", "_KERNEL", "_HELPER", "_POOL", "_new_pool", "_launch", "_operand",
                  "_result",
                  "perf_counter", "_SERIAL_BELOW", "_WORK_SECONDS", "_DTYPE_NAMES",
                  *ML_DTYPES.values())

# Threads run the program instances of a launch: numba's parallel loops (prange) cost seconds of
# compile time per kernel, several times what the kernel itself costs, while the serial `nogil`
# kernels below run in parallel from a plain thread pool just as fast.
LAUNCH = '''\
def _launch(kernel, programs, *args):
    """Run program instances 0..programs-1 of `kernel` on numba.get_num_threads() threads
    (NUMBA_NUM_THREADS by default). The threads take chunks of consecutive program ids in turn,
    so that one slowed down by other work on the machine ends up with fewer. A launch that took
    less than _SERIAL_BELOW seconds of work last time (the same kernel and shapes) runs on this
    thread alone: handing chunks to the pool and waiting for it costs tens of microseconds."""
    threads = min(numba.get_num_threads(), programs)
    key = (kernel, tuple(getattr(a, "shape", None) for a in args))
    if len(_WORK_SECONDS) > 4096:  # shapes that change on every call: start afresh rather than grow
        _WORK_SECONDS.clear()
    if threads <= 1 or _WORK_SECONDS.get(key, _SERIAL_BELOW) < _SERIAL_BELOW:
        start = perf_counter()
        kernel(0, programs, *args)
        _WORK_SECONDS[key] = perf_counter() - start
        return
    chunks = min(programs, 4 * threads)
    chunk_ids = count()  # shared by the threads: next() on it is atomic

    def work():
        done = 0
        for chunk in chunk_ids:
            if chunk >= chunks:
                return done
            first, last = programs * chunk // chunks, programs * (chunk + 1) // chunks
            kernel(first, last, *args)
            done += last - first

    kernel(0, 0, *args)  # compiles it, or loads it from the cache, in this thread only
    others = [_POOL.submit(work) for _ in range(threads - 1)]
    start = perf_counter()
    mine = work()
    if mine:  # this thread's pace, over every program: the work of the launch on one thread
        _WORK_SECONDS[key] = (perf_counter() - start) * programs / mine
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
        # a bfloat16 or 8-bit float output takes its dtype from an input of that dtype, else from
        # ml_dtypes (imported then)
        self.input_of = {}
        for t in pipeline.inputs:
            self.input_of.setdefault(t.dtype, t.name)
        self.imports = [name for d, name in ML_DTYPES.items()
                        if d not in self.input_of and any(t.dtype == d for t in pipeline.outputs)]
        self.float8_inputs = any(t.dtype in FLOAT8 for t in pipeline.inputs)

    def render(self) -> str:
        bodies = []
        for kernel, fn in self.kernels:
            gen = KernelRenderer(self.p, kernel, fn, self.names)
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
        needs = "numpy, numba and ml_dtypes" if self.imports else "numpy and numba only"
        w.line(f"`{self.entry}` at the end is the entry point. Needs {needs}.")
        w.line('"""')
        w.line("import math")
        w.line("import os")
        w.line("from concurrent.futures import ThreadPoolExecutor")
        w.line("from itertools import count")
        w.line("from time import perf_counter")
        w.line("")
        w.line("import numba")
        w.line("import numpy as np")
        used = set(helpers.closure(self.helpers))
        intrinsics = bool(used & INTRINSICS)
        if intrinsics:
            w.line("from llvmlite import ir  # numba's own dependency: the LLVM IR of the intrinsics below")
        if "_has_scalef" in used:
            w.line("from llvmlite.binding import llvm_version_info  # llvm.ldexp: LLVM 17 on")
        if self.imports:
            names = ", ".join(self.imports)
            w.line(f"from ml_dtypes import {names}  # the dtype{'s' * (len(self.imports) > 1)} of {names} outputs")
        w.line("from numba import njit")
        if "_dot" in used:
            w.line("from numba.core import cgutils")
        if "_cpu_features" in used:
            w.line("from numba.core.codegen import get_host_cpu_features  # the CPU the helpers below suit")
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
        w.line("")
        w.line("")
        w.line("def _new_pool():")
        w.line('    """The threads launches run on; again after os.fork(), as the child has none of the')
        w.line('    parent\'s (a launch would wait on them for ever: a DataLoader worker calling a DT kernel)."""')
        w.line("    global _POOL")
        w.line('    _POOL = ThreadPoolExecutor(max(1, numba.config.NUMBA_NUM_THREADS - 1), thread_name_prefix="dt")')
        w.line("")
        w.line("")
        w.line("_new_pool()")
        w.line('if hasattr(os, "register_at_fork"):  # POSIX')
        w.line("    os.register_at_fork(after_in_child=_new_pool)")
        w.line("# A launch with less work than this (seconds, on one thread) runs on the calling thread only: two")
        w.line("# threads would save less than the pool's hand-off and join cost (PyTorch's grain size, timed).")
        w.line("_SERIAL_BELOW = 1e-4")
        w.line("_WORK_SECONDS = {}  # (kernel, the arguments' shapes) -> the last launch's work on one thread")
        w.line("_DTYPE_NAMES = {}  # dtype -> its name: numpy works a name out afresh on every ask (about 1.5 µs)")
        w.line("")
        w.line("")
        w.lines += LAUNCH.rstrip("\n").split("\n")
        w.line("")
        w.line("")
        w.line("def _operand(array, name, dtype, shape):")
        if self.float8_inputs:
            w.line('    """`array` as the kernels take it: C-contiguous, float16 / bfloat16 as their uint16 bits,')
            w.line('    8-bit floats as their uint8 bits."""')
        else:
            w.line('    """`array` as the kernels take it: C-contiguous, float16 / bfloat16 as their uint16 bits."""')
        w.line("    array = np.asarray(array, order=\"C\")  # a 0-d array stays 0-d")
        w.line("    given = _DTYPE_NAMES.get(array.dtype) or _DTYPE_NAMES.setdefault(array.dtype, array.dtype.name)")
        w.line("    if given != dtype or array.shape != shape:")
        w.line('        raise ValueError(f"{name} must be a {dtype} array of shape {shape}, not {given} {array.shape}")')
        if self.float8_inputs:
            w.line('    if dtype.startswith("float8"):')
            w.line("        return array.view(np.uint8)")
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
            for t in p.outputs:  # first: a bfloat16 / 8-bit float output may take its dtype from an input
                given = "out" if single else f'None if out is None else out.get("{t.name}")'
                dtype = self.array_dtype(t, params)
                w.line(f'{params[t.name]} = _result({given}, "{t.name}", {dtype}, {shape(t)})')
            for t in p.inputs:
                w.line(f'{params[t.name]} = _operand({params[t.name]}, "{t.name}", "{DTYPE_NAME[t.dtype]}", {shape(t)})')
            integers = self.integer_scalars()
            for s in p.scalars:
                w.line(f"{scalars[s]} = {'i64' if s in integers else p.compute_dtype}({scalars[s]})")
            for t in p.temporaries:
                dtype = AS_BITS.get(t.dtype) or self.array_dtype(t, params)
                w.line(f"{params[t.name]} = np.empty({shape(t)}, {dtype})")
            for kernel, fn in self.kernels:
                ps = uses.kernel_params(kernel, p)
                extents = {S.size_name(d): name for d, name in sizes.items()}
                call = [fn, index(renamed(kernel.program_count, lambda n: extents.get(n, n)))]
                for name in ps.tensors:
                    spec = p.tensor(name)
                    view = f".view({AS_BITS[spec.dtype]})" if spec.role == "output" and spec.dtype in AS_BITS else ""
                    call.append(params[name] + view)
                call += [scalars[s] for s in ps.scalars] + [extents[s] for s in ps.sizes]
                if any(isinstance(s, S.Scatter) and s.accumulate for s in S.walk_statements(kernel.body)):
                    # an update adding into elements that several programs may share: one thread,
                    # the programs in order, so that adds never race and round alike every run
                    w.line(f"{call[0]}(0, {', '.join(call[1:])})")
                else:
                    w.line(f"_launch({', '.join(call)})")
            outs = ", ".join(f'"{t.name}": {params[t.name]}' for t in p.outputs)
            w.line(f"return {{{outs}}}")

    def array_dtype(self, t: S.TensorSpec, params) -> str:
        """The dtype of output or temporary `t`, as an expression of the entry function."""
        if t.dtype in ML_DTYPES:
            return f"{params[self.input_of[t.dtype]]}.dtype" if t.dtype in self.input_of else ML_DTYPES[t.dtype]
        return NUMPY_DTYPE[t.dtype]

    def integer_scalars(self) -> set[str]:
        """The scalars the kernels use as integers (Python ints, as int64)."""
        values = [s.value for k in self.p.kernels for s in S.walk_statements(k.body) if isinstance(s, (S.Assign, S.Store))]
        return {node.name for value in values for node in S.walk_texpr(value)
                if isinstance(node, S.Param) and is_integer(node.dtype)}
