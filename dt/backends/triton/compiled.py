"""What Triton's compiler makes of each kernel at given extents: registers and spills (from
ptxas, as the driver would report them), shared memory, warps and the occupancy they allow,
and the performance warnings those facts give (`spills`, `occupancy`). Kernels are compiled
without launching, for the GPU here or, without one, for an H100 (sm_90): the launcher runs on
tensors without storage (torch's meta device) and its launches are recorded, then compiled
with the arguments, constants and options they would have had; under Triton's interpreter,
in a fresh process without it."""
from __future__ import annotations

import os
import pickle
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from dt.backends.pysource import load_module
from dt.backends.triton.integers import integer_scalars
from dt.errors import PerformanceWarning
from dt.ir import scheduled as S
from dt.ir.lint.facts import WARP, Context
from dt.ir.lint.registers import REGISTERS_PER_SM

H100 = 90  # the compute capability compiled for without a GPU
CODES = ("spills", "occupancy")
SHARED_RESERVED = 1024  # bytes the driver keeps per program
# compute capability -> (shared memory bytes a multiprocessor gives its programs, warps it holds,
# programs it holds); 65,536 registers each (dt.ir.lint.registers.REGISTERS_PER_SM)
MULTIPROCESSOR = {80: (164 * 1024, 64, 32), 86: (100 * 1024, 48, 16), 89: (100 * 1024, 48, 24),
                  90: (228 * 1024, 64, 32), 100: (228 * 1024, 64, 32), 120: (100 * 1024, 48, 32)}
LOW_OCCUPANCY = 0.25  # warn below this share of a multiprocessor's warps, for kernels that stream memory
STREAMING_SHARED = 16 * 1024  # a kernel using less shared memory than this streams from memory


@dataclass(frozen=True)
class CompiledKernel:
    kernel: str
    func: str  # the DT Func the kernel computes and stores
    warps: int
    registers: int  # a thread
    spill_stores: int  # bytes a thread
    spill_loads: int
    shared: int  # bytes a program
    programs_per_sm: int  # programs a multiprocessor holds at once
    limited_by: str  # 'registers', 'shared memory', 'warps' or 'programs'
    occupancy: float  # the share of a multiprocessor's warps they are


def occupancy(registers: int, warps: int, shared: int, capability: int = H100) -> tuple[int, str, float]:
    """Programs a multiprocessor holds at once, what limits them, and the share of its warps."""
    shared_per_sm, max_warps, max_programs = MULTIPROCESSOR.get(capability, MULTIPROCESSOR[H100])
    per_warp = -(-registers * WARP // 256) * 256  # registers are allocated to warps 256 at a time
    limits = {"warps": max_warps // warps, "programs": max_programs,  # ties name these first
              "registers": REGISTERS_PER_SM // (per_warp * warps) if per_warp else max_programs,
              "shared memory": shared_per_sm // (shared + SHARED_RESERVED)}
    limiter = min(limits, key=limits.get)
    return limits[limiter], limiter, limits[limiter] * warps / max_warps


def record_launches(module, pipeline: S.Pipeline, tensors: list, scalars: list, extents: dict,
                    gluon: bool = False) -> list[tuple]:
    """Run the module's launcher with kernels that record their launches: (the JIT function,
    its arguments, its launch options) of each; with `gluon`, the launches of the kernels'
    Gluon twins where they have one (as on a Hopper GPU)."""
    namespace = load_module(module.source, f"compiled {pipeline.name}", {"__name__": f"dt_compiled_{pipeline.name}"})
    launches = []
    if gluon:
        namespace["_gluon_wanted"] = lambda device: True
        namespace["_tma_ready"] = lambda device, *boxes: True
        for name in module.gluon_kernels:
            namespace[name] = Record(namespace[name], launches)
    for k in pipeline.kernels:
        namespace[k.name] = Record(namespace[k.name], launches)
    namespace[module.function](*tensors, *scalars, *[extents[d] for d in module.call_extents])
    return launches


class Record:
    """A JIT function whose launches are recorded, not run."""

    def __init__(self, fn, launches: list):
        self.fn = fn
        self.launches = launches

    def __getitem__(self, grid):
        return lambda *args, **options: self.launches.append((self.fn, args, options))


def compile_launch(fn, args, options, capability: int):
    """The compiled kernel for one recorded launch, for a GPU of `capability` (90: sm_90)."""
    import torch
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from triton.tools.tensor_descriptor import TensorDescriptor
    pointer = {torch.float32: "*fp32", torch.float16: "*fp16", torch.bfloat16: "*bf16", torch.bool: "*i1",
               torch.int8: "*i8", torch.uint8: "*u8", torch.int16: "*i16", torch.int32: "*i32", torch.int64: "*i64",
               torch.float8_e4m3fn: "*fp8e4nv", torch.float8_e5m2: "*fp8e5"}
    signature, constants, attrs = {}, {}, {}
    for i, (param, value) in enumerate(zip(fn.params, args)):
        if param.is_constexpr or value is None:
            signature[param.name], constants[(i,)] = "constexpr", value
        elif isinstance(value, torch.Tensor):
            signature[param.name] = pointer[value.dtype]
            attrs[(i,)] = [["tt.divisibility", 16]]  # as Triton specialises aligned pointers
        elif isinstance(value, TensorDescriptor):
            signature[param.name] = f"tensordesc<{pointer[value.base.dtype][1:]}{list(value.block_shape)}>"
        elif type(value).__name__ == "TensorDescriptor":  # Gluon's: its shared layout is part of its type
            dtype = pointer[value.base.dtype][1:]
            signature[param.name] = f"tensordesc<{dtype}{list(value.block_shape)},{value.layout!r}>"
        else:  # a scalar: an integer one is annotated int64
            signature[param.name] = param.annotation or "fp32"
    source = ASTSource
    if type(fn).__name__ == "GluonJITFunction":
        from triton.experimental.gluon._runtime import GluonASTSource as source
    return triton.compile(source(fn, signature, constants, attrs), target=GPUTarget("cuda", capability, 32),
                          options=options)


def ptxas_facts(compiled, capability: int) -> tuple[int, int, int]:
    """(registers, spill store bytes, spill load bytes) of a thread, as ptxas reports them."""
    from triton.backends.nvidia.compiler import get_ptxas, sm_arch_from_capability
    with tempfile.NamedTemporaryFile("w", suffix=".ptx") as ptx:
        ptx.write(compiled.asm["ptx"])
        ptx.flush()
        log = subprocess.run([get_ptxas(capability).path, "-v", f"--gpu-name={sm_arch_from_capability(capability)}",
                              ptx.name, "-o", "/dev/null"], capture_output=True, text=True, check=True).stderr
    registers = int(re.search(r"Used (\d+) registers", log).group(1))
    spills = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", log)
    return registers, int(spills.group(1)), int(spills.group(2))


def capability_here() -> int:
    import torch
    if torch.cuda.is_available():
        major, minor = torch.cuda.get_device_capability()
        return major * 10 + minor
    return H100


def compiled_facts(pipeline: S.Pipeline, context: Context, module) -> tuple[list[CompiledKernel], list]:
    """Each kernel's facts at the context's extents, and the warnings they give."""
    extents = dict(context.extents)
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        facts = _facts_in_a_compiler_process(pipeline, extents, module)
    else:
        facts = facts_here(pipeline, extents, module)
    by_name = {k.name: k for k in pipeline.kernels}
    found = [w for f in facts for w in _warnings(f, by_name[f.kernel], context)]
    return facts, [w for w in found if w.code not in context.allowed]


def facts_here(pipeline: S.Pipeline, extents: dict, module) -> list[CompiledKernel]:
    """The facts of each kernel, compiled in this process (Triton imported for compiling)."""
    import torch
    from dt.dtypes import TORCH_BY_NAME
    capability = capability_here()
    dtype = {name: getattr(torch, TORCH_BY_NAME[name].split(".")[1]) for name in TORCH_BY_NAME}
    tensors = [torch.empty([extents[d] for d in spec.dims], dtype=dtype[spec.dtype], device="meta")
               for spec in (pipeline.tensor(n) for n in module.inputs)]
    integers = integer_scalars(pipeline)
    scalars = [1 if s in integers else 1.0 for s in module.scalars]
    by_name = {k.name: k for k in pipeline.kernels}
    facts = []
    for fn, args, options in record_launches(module, pipeline, tensors, scalars, extents):
        kernel = by_name[fn.__name__]
        compiled = compile_launch(fn, args, options, capability)
        registers, stores, loads = ptxas_facts(compiled, capability)
        warps, shared = compiled.metadata.num_warps, compiled.metadata.shared
        programs, limiter, share = occupancy(registers, warps, shared, capability)
        facts.append(CompiledKernel(kernel.name, kernel.func, warps, registers, stores, loads, shared, programs,
                                    limiter, share))
    return facts


def _facts_in_a_compiler_process(pipeline: S.Pipeline, extents: dict, module) -> list[CompiledKernel]:
    """facts_here in a fresh Python without TRITON_INTERPRET: Triton imported for its
    interpreter has made its standard library's functions for the interpreter, which its
    compiler cannot compile."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    root = str(Path(__file__).resolve().parents[3])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
    code = ("import pickle, sys; from dt.backends.triton.compiled import facts_here; "
            "pickle.dump(facts_here(*pickle.load(sys.stdin.buffer)), sys.stdout.buffer)")
    proc = subprocess.run([sys.executable, "-c", code], input=pickle.dumps((pipeline, extents, module)), env=env,
                          capture_output=True)
    if proc.returncode:
        raise RuntimeError(f"compiling the kernels of {pipeline.name} failed:\n{proc.stderr.decode()[-3000:]}")
    return pickle.loads(proc.stdout)


def _warnings(facts: CompiledKernel, kernel: S.Kernel, context: Context):
    func = kernel.schedule_func
    loc = context.schedule_loc(func, "num_warps", "tensorize") or kernel.loc
    if facts.spill_stores or facts.spill_loads:
        yield PerformanceWarning(
            "spills", f"kernel '{kernel.name}' spills registers to local memory: {facts.registers} registers a "
            f"thread in {facts.warps} warps are not enough", loc,
            cost=f"{facts.spill_stores} bytes stored and {facts.spill_loads} loaded a thread through local memory "
                 f"(the L1 cache, and DRAM past it)",
            hint=f"more warps ({func}.num_warps({min(facts.warps * 2, 32)})) or smaller tiles ({func}.tensorize(...))",
            func=func)
    if facts.occupancy < LOW_OCCUPANCY and facts.shared < STREAMING_SHARED and facts.limited_by == "registers":
        yield PerformanceWarning(
            "occupancy", f"kernel '{kernel.name}' fits {facts.programs_per_sm} program(s) of {facts.warps} warps on "
            f"a multiprocessor, limited by its {facts.registers} registers a thread", loc,
            cost=f"{facts.occupancy:.0%} of a multiprocessor's warps: too few loads in flight to hide memory latency",
            hint=f"smaller tiles a thread ({func}.tensorize(...) smaller, or {func}.num_warps more), so that each "
                 f"thread needs fewer registers", func=func)
