"""The triton backend's Gluon twins (dt/backends/triton/gluon.py): which kernels get one, what
the twin does (the first product of each step issued before the previous step's second, waited
for alone), the launcher's choice, and that each twin compiles for sm_90 (no GPU needed)."""
import importlib.util
import re

import pytest

import dt
from dt.backends.triton import codegen
from dt.testing import random_inputs

ATTENTION = ["examples/llm/mha.dt", "examples/llm/causal_mha.dt", "examples/llm/gqa_attention.dt",
             "benchmarks/gpu/schedules/causal_mha_m64.dt"]
SIZES = {"b": 1, "h": 4, "m": 200, "l": 200, "k": 64, "n": 64}
CAUSAL_4_WARPS = "benchmarks/gpu/schedules/causal_mha_m64.dt"  # one warpgroup: the twin of one partition


def module(path, dtype="bf16"):
    prog = dt.load(path)
    return prog, codegen.render(prog.pipeline(dtype))


def twin(source: str) -> str:
    start = source.index("if GLUON:")
    return source[start:source.index("\n\ndef ", start)]


@pytest.mark.parametrize("path", ATTENTION)
def test_attention_kernels_have_a_gluon_twin_that_overlaps_the_second_product(path):
    prog, m = module(path)
    assert m.gluon_kernels == ("attention_kernel_gluon",)
    text = twin(m.source)
    # each step: its scores' product, then the previous step's P·V, then a wait for the first only
    step = text[text.index("for t in range(1,"):]
    first = step.index("k_accumulator = warpgroup_mma(")
    second = step.index("l_num_accumulator = warpgroup_mma(")
    wait_one = step.index("k_accumulator, Q_tile = warpgroup_mma_wait(1, deps=(k_accumulator, Q_tile))")
    softmax = step.index("gl.exp2(")
    wait_all = step.index("warpgroup_mma_wait(\n") if "warpgroup_mma_wait(\n" in step else \
        step.index("warpgroup_mma_wait(0")
    assert first < second < wait_one < softmax < wait_all
    assert "_tma_load(K_desc" in text and "_tma_load(V_desc" in text and "mbarrier.wait(" in text
    assert "tl.dot" not in text and "tl.load" not in text
    # Q waits in registers (wgmma reads only K from shared memory); P·V's result has a layout of
    # its own, one instruction as wide as the head; the result leaves by TMA
    assert "Q_tile = Q_smem.reshape([64, k_TILE]).load(operand_layout)" in text or \
        "Q_tile = Q_smem.reshape([128, k_TILE]).load(operand_layout)" in text
    assert "instr_shape=[16, MMA_N_n, 16]" in text and "MMA_N_n: gl.constexpr = (n_TILE if n_TILE < 256 else 256)" in text
    assert "gl.convert_layout(l_exp.to(tl.bfloat16), operand_layout_n)" in " ".join(text.split()).replace("( ", "(")
    assert "_tma_store(attention_desc," in text and "gl.store(" not in text
    # the Triton kernel stays, launched where the twin is not
    assert "@triton.jit\ndef attention_kernel(" in m.source
    launch = m.source[m.source.index("attention_gluon = GLUON and _gluon_wanted(device)"):]
    assert "attention_gluon = _tma_ready(device, (Q, Q_box" in launch
    assert "_gluon_launch(attention_kernel_gluon, " in launch and "if not attention_gluon:\n        attention_kernel[" in launch


@pytest.mark.parametrize("path, reason", [
    ("examples/matmul.dt", "a product outside a loop|a loop of 1 products|the first product"),
    ("examples/softmax.dt", "no product"),
])
def test_other_kernels_have_no_twin_and_say_why(path, reason):
    _, m = module(path, "f16")
    assert m.gluon_kernels == ()
    assert "if GLUON" not in m.source and "gluon" not in m.source
    prog = dt.load(path)
    from dt.backends.triton.gluon import GluonKernelRenderer, NotPipelined
    pipeline = prog.pipeline("f16")
    with pytest.raises(NotPipelined, match=reason):
        GluonKernelRenderer(pipeline.kernels[0], pipeline, "ieee", set(codegen.GLOBALS_USED), {}, "k_gluon")


def refusal(source: str) -> str:
    """Why the Gluon renderer refuses the one kernel of DT program `source` (bf16)."""
    from dt.backends.triton.gluon import GluonKernelRenderer, NotPipelined
    pipeline = dt.loads(source).pipeline("bf16")
    with pytest.raises(NotPipelined) as refused:
        GluonKernelRenderer(pipeline.kernels[0], pipeline, "ieee", set(codegen.GLOBALS_USED), {}, "k_gluon")
    return str(refused.value)


TWO_ATTENTIONS = """
Func out, s1, e1, num1, s2, e2, num2;
In A, B, C, D, E;
Var m, n;
RVar k, l, j;
s1[m, l] = rdot(A[m, k], B[k, l], k);
e1[m, l] = exp(s1[m, l]);
num1[m, n] = rdot(e1[m, l], C[l, n], l);
s2[m, j] = rdot(A[m, k], D[k, j], k);
e2[m, j] = exp(s2[m, j]);
num2[m, n] = rdot(e2[m, j], E[j, n], j);
out[m, n] = num1[m, n] + num2[m, n];
out.block(m:64);
out.tensorize(m:64, n:0, k:0, l:64, j:64);
s1.inline(); e1.inline(); s2.inline(); e2.inline();
num1.fuse_at(out, m);
num2.fuse_at(out, m);
out.num_warps(4);
out.compile_to_kernel();
"""


def test_loops_through_different_rings_have_no_twin():
    """One count of the tiles loaded gives every ring's slot and barrier phase: a second loop
    through other rings (D and E, after B and C) would wait for phases its barriers never had."""
    assert "rings" in refusal(TWO_ATTENTIONS)
    # the same rings in both loops (causal attention's unmasked and diagonal tiles) keep the count
    _, m = module(CAUSAL_4_WARPS)
    assert m.source.count("tiles_loaded += ") == 2



def test_a_causal_kernels_two_loops_load_one_stream_of_tiles():
    """The loop below the diagonal and the diagonal's share the K/V rings: the first loop's last
    steps (and its last P·V's freed slot) load the diagonal's first tiles, so the second loop
    starts on tiles already there instead of refilling the ring from empty."""
    _, m = module(CAUSAL_4_WARPS)
    text = twin(m.source)
    assert text.count("for tile in gl.static_range(") == 1  # one ring fill, before the first loop
    assert text.index("l_iter_2_count = ") < text.index("if l_iter_count > 0:")
    stream = "(l_iter_count + l_iter_2_count)"
    first_loop = " ".join(text[text.index("if l_iter_count > 0:"):text.index("if l_iter_2_count > 0:")].split())
    assert first_loop.count(f"< {stream})") == 2 * 3  # K at step 0 and each step, V each step
    for ahead in ("t + STAGES", "t - 1 + STAGES"):  # K a ring ahead, V (freed a step later) one fewer
        assert f"l_iter_at = gl.cast(l_iter_2_start + ({ahead} - l_iter_count) * 64, gl.int32)" in first_loop
    # the last P·V frees the slot of the diagonal's tile STAGES - 1 (the ones before are in)
    drain = first_loop[first_loop.rindex("warpgroup_mma_wait("):]
    assert "pred=STAGES - 1 < l_iter_2_count)" in drain and "l_iter_2_start + (STAGES - 1) * 64" in drain
    # past the stream's end nothing loads; the diagonal loop loads only within its own tiles
    second_loop = text[text.index("if l_iter_2_count > 0:"):]
    assert "pred=t + STAGES < l_iter_2_count)" in second_loop and stream not in second_loop


def test_a_loop_whose_bounds_are_set_after_the_stream_starts_refills_its_ring():
    """The next loop's first tiles are loaded during the loop before it only if where they lie
    is known when the first loop starts: a bound set between the loops ends the stream."""
    import dataclasses

    from dt.backends.triton.gluon import GluonKernelRenderer
    from dt.ir import scheduled as S
    from dt.ir.index_expr import IVar
    pipeline = dt.load(CAUSAL_4_WARPS).pipeline("bf16")
    kernel = pipeline.kernels[0]
    loops = [i for i, s in enumerate(kernel.body) if isinstance(s, S.For)]
    assert len(loops) == 2
    second = kernel.body[loops[1]]
    body = list(kernel.body)
    body[loops[1]] = dataclasses.replace(second, start=IVar("diagonal_start"))
    body.insert(loops[1], S.Let("diagonal_start", second.start))
    late = dataclasses.replace(kernel, body=tuple(body))
    class HelperNames(dict):
        def __missing__(self, name):
            return name

    for k, streams in ((kernel, 1), (late, 0)):
        renderer = GluonKernelRenderer(k, pipeline, "ieee", set(codegen.GLOBALS_USED), HelperNames(), "k_gluon")
        assert len(set(map(id, renderer.chains.values()))) == streams
        assert "\n".join(renderer.render()).count("for tile in gl.static_range(") == 2 - streams


def test_a_forward_that_saves_its_row_statistics_keeps_its_twin():
    """A training forward stores each row's max and sum for its backward (dt.grad's save=, as
    FlashAttention's does): those rows are no two-dimensional box TMA could store, so they go
    through pointers, masked as the Triton kernel's, and the result by TMA."""
    prog = dt.load("benchmarks/gpu/schedules/causal_mha_hopper.dt")
    forward, _ = dt.grad(prog, save=("mx", "dvsr", "attention"))
    m = codegen.render(forward.pipeline("bf16"))
    assert m.gluon_kernels == ("attention_kernel_gluon",)
    text = " ".join(twin(m.source).split()).replace("( ", "(")
    assert "gl.store(mx_ptr + " in text and "mx_m_stride, mx, mask=m_mask)" in text
    assert "gl.store(dvsr_ptr + " in text and "_tma_store(attention_desc," in text
    assert "mx_desc" not in m.source and "_tma_ready(device, (Q, Q_box" in m.source


def test_a_kernel_of_fewer_than_four_warps_has_no_twin():
    """wgmma is a warpgroup's (four warps): with two, the twin would not compile on the GPU."""
    source = open("examples/attention_safe_onepass.dt").read()
    assert "num_warps(4)" in source
    assert "warpgroups of 4" in refusal(source.replace("num_warps(4)", "num_warps(2)"))


def test_a_padded_tile_has_no_twin():
    """A tile of 48 keys is padded to 64 lanes, which a box would read from the tensor: the next
    tile's rows of V, weighted 0, where an inf makes NaN (the Triton kernel masks them to 0)."""
    source = open("examples/attention_safe_onepass.dt").read()
    assert "padded to 64 lanes" in refusal(source.replace("l:64", "l:48"))


def test_an_operand_of_six_dimensions_has_no_twin():
    """A TMA descriptor has at most five dimensions: Gluon's refuses a sixth at the launch."""
    source = open("benchmarks/gpu/schedules/mha_m64.dt").read()
    six = source.replace("[b, h, ", "[a, c, b, h, ").replace("Var b,", "Var a, c, b,")
    six = six.replace("block(b:1,", "block(a:1, c:1, b:1,")
    assert "Q[a, c, b, h, m, k]" in six
    assert "more than 5 dimensions" in refusal(six)

def test_the_module_docstring_names_each_twin_and_why_several_products_have_none():
    _, m = module("examples/llm/causal_mha.dt")
    doc = " ".join(m.source[:m.source.index('"""', 3)].split())
    assert "attention_kernel runs as attention_kernel_gluon" in doc
    _, backward = module("benchmarks/gpu/schedules/causal_mha_grad_flash.dt")
    assert backward.gluon_kernels == ()
    doc = " ".join(backward.source[:backward.source.index('"""', 3)].split())
    assert "grad_K_kernel has no Gluon twin: 'mx' reads a tile that is no product's operand" in doc
    _, matmul = module("examples/matmul.dt", "f16")  # one product: not the twins' shape, not named
    assert "Gluon" not in matmul.source


@pytest.mark.parametrize("flag, wanted", [(None, True), ("1", True), ("0", False)])
def test_a_twin_runs_on_hopper_unless_turned_off(monkeypatch, flag, wanted):
    """DT_TRITON_GLUON=0 runs the Triton kernels; otherwise a twin runs (on an H200 the twins were
    0.96-1.68x their Triton kernels). Only on sm_90 (wgmma is Hopper's)."""
    pytest.importorskip("torch")
    from types import SimpleNamespace

    from dt.backends.triton.host_helpers import _gluon_wanted
    if flag is None:
        monkeypatch.delenv("DT_TRITON_GLUON", raising=False)
    else:
        monkeypatch.setenv("DT_TRITON_GLUON", flag)
    gpu = SimpleNamespace(type="cuda", index=0)
    assert _gluon_wanted(gpu, {0: (9, 0)}) is wanted
    assert _gluon_wanted(gpu, {0: (10, 0)}) is False
    assert _gluon_wanted(SimpleNamespace(type="cpu", index=None), {}) is False


def test_a_twin_triton_cannot_build_falls_back_to_the_triton_kernel():
    """A twin's tiles may need more shared memory or registers at a shape than the GPU has, which
    Triton tells only when it builds the kernel: the launcher then runs the Triton kernel, warns
    once, and later calls skip the twin (a failed build is not cached: it would be retried)."""
    pytest.importorskip("torch")
    from triton.runtime.errors import OutOfResources

    from dt.backends.triton.host_helpers import _gluon_launch

    class Twin:
        launches = 0

        def __getitem__(self, grid):
            def launch(*args, num_warps):
                Twin.launches += 1
                raise OutOfResources(262144, 232448, "shared memory")
            return launch

    refused = {}
    with pytest.warns(RuntimeWarning, match="attention_kernel_gluon could not be built .*OutOfResources.*"
                                            "its Triton kernel runs instead"):
        assert _gluon_launch(Twin(), "attention_kernel_gluon", (4,), (1, 2), {"num_warps": 4}, refused) is False
    assert _gluon_launch(Twin(), "attention_kernel_gluon", (4,), (1, 2), {"num_warps": 4}, refused) is False
    assert Twin.launches == 1 and ("attention_kernel_gluon", 1, 2) in refused

    class Built:
        def __getitem__(self, grid):
            return lambda *args, num_warps: None

    assert _gluon_launch(Built(), "other_kernel_gluon", (4,), (1, 2), {"num_warps": 4}, refused) is True

    class PassFails:  # an MLIR pass failing on the twin: Triton raises a RuntimeError
        def __getitem__(self, grid):
            def launch(*args, num_warps):
                raise RuntimeError("PassManager::run failed")
            return launch

    with pytest.warns(RuntimeWarning, match="RuntimeError: PassManager::run failed"):
        assert _gluon_launch(PassFails(), "third_kernel_gluon", (4,), (1, 2), {"num_warps": 4}, refused) is False
    _, m = module("examples/llm/causal_mha.dt")
    launch = m.source[m.source.index("attention_gluon = _gluon_launch(attention_kernel_gluon"):]
    assert launch.index("if not attention_gluon:\n        attention_kernel[") > 0


def test_a_twin_refused_at_one_shape_still_runs_at_others():
    """Whether Triton builds a twin depends on the shape it is specialised for (a head of 256
    needs more shared memory than one of 128): a refusal at one shape must not send every later
    call, at every shape, to the Triton kernel."""
    pytest.importorskip("torch")
    from triton.runtime.errors import OutOfResources

    from dt.backends.triton.host_helpers import _gluon_launch

    class Twin:  # builds where its tile (the last argument, a constexpr) fits
        launches = []

        def __getitem__(self, grid):
            def launch(*args, num_warps):
                Twin.launches.append(args[-1])
                if args[-1] > 128:
                    raise OutOfResources(262144, 232448, "shared memory")
            return launch

    refused = {}
    with pytest.warns(RuntimeWarning, match="could not be built"):
        assert _gluon_launch(Twin(), "attention_kernel_gluon", (4,), (256, 256), {"num_warps": 4}, refused) is False
    assert _gluon_launch(Twin(), "attention_kernel_gluon", (4,), (128, 128), {"num_warps": 4}, refused) is True
    assert _gluon_launch(Twin(), "attention_kernel_gluon", (4,), (256, 256), {"num_warps": 4}, refused) is False
    assert Twin.launches == [256, 128]  # the shape refused is not tried again


def test_the_launcher_runs_the_triton_kernel_unless_asked(monkeypatch):
    """On a CPU (and Triton's interpreter) there is no twin to run, whatever DT_TRITON_GLUON
    says: the Triton kernel's launch is the one recorded."""
    pytest.importorskip("torch")
    from dt.backends.triton.compiled import record_launches
    prog, m = module("examples/llm/causal_mha.dt")
    pipeline = prog.pipeline("bf16")
    args = random_inputs(prog, SIZES, "bf16")
    tensors = [dt.arrays.to_torch(args[n]) for n in m.inputs]
    for flag in ("0", "1", ""):
        monkeypatch.setenv("DT_TRITON_GLUON", flag)
        launches = record_launches(m, pipeline, tensors, [], SIZES)
        assert [fn.__name__ for fn, _, _ in launches] == ["attention_kernel"]



def test_without_gluon_calls_record_and_launch_the_triton_kernel(monkeypatch):
    """Under a Triton without Gluon (3.0 to 3.4) the module skips its twins (`if GLUON:`): the
    recording of a call's launches, which wraps every kernel the module has, must not ask for
    a twin the module never defined."""
    torch = pytest.importorskip("torch")
    import sys
    from dt.backends.pysource import load_module
    from dt.backends.triton import replay
    monkeypatch.setitem(sys.modules, "triton.experimental.gluon", None)  # its import fails
    monkeypatch.setattr(replay, "_current_device", lambda: 0)  # not the CPU's -1: no replay built
    prog, m = module("examples/llm/causal_mha.dt")
    namespace = load_module(m.source, "no gluon", {"__name__": "no_gluon"})
    assert namespace["GLUON"] is False and "attention_kernel_gluon" not in namespace
    launched = []

    class Kernel:  # the Triton kernel, launched on the CPU tensors without running
        def __getitem__(self, grid):
            return lambda *args, **options: launched.append(grid)

    namespace["attention_kernel"] = Kernel()
    replays = replay.Replays(namespace[m.function], namespace, m.kernels + m.gluon_kernels, prog.name)
    args = random_inputs(prog, SIZES, "bf16")
    tensors = [dt.arrays.to_torch(args[n]) for n in m.inputs]
    out = replays.record(replays.key(tensors, ()), tensors, [])
    assert isinstance(out, torch.Tensor) and len(launched) == 1

GLUON = importlib.util.find_spec("triton") is not None and \
    importlib.util.find_spec("triton.experimental.gluon") is not None


def compile_twins(paths) -> dict:
    """Each file's Gluon twins compiled for sm_90: (registers, spill bytes, wgmma and TMA in the
    PTX) by kernel. Called in a fresh interpreter without TRITON_INTERPRET (sm90_compiled)."""
    from dt.backends.triton.compiled import H100, compile_launch, ptxas_facts, record_launches
    results = {}
    for path in paths:
        prog, m = module(path)
        pipeline = prog.pipeline("bf16")
        sizes = dict(SIZES, h=8, K_axis1=2, V_axis1=2) if "gqa" in path else SIZES
        args = random_inputs(prog, sizes, "bf16")
        tensors = [dt.arrays.to_torch(args[n]) for n in m.inputs]
        launches = record_launches(m, pipeline, tensors, [4 for _ in m.scalars], sizes, gluon=True)
        for fn, values, options in launches:
            compiled = compile_launch(fn, values, options, H100)
            registers, spill_stores, spill_loads = ptxas_facts(compiled, H100)
            ptx = compiled.asm["ptx"]
            results[f"{path} {fn.__name__}"] = [registers, spill_stores + spill_loads,
                                                bool(re.search(r"wgmma\.mma_async", ptx)),
                                                "cp.async.bulk.tensor" in ptx]
    return results


@pytest.mark.skipif(not GLUON, reason="needs Triton with Gluon (3.5 or later)")
def test_gluon_twins_compile_for_sm90_without_spills():
    from test_triton_backend import sm90_compiled
    results = sm90_compiled(f"__import__('test_triton_gluon').compile_twins({ATTENTION!r})")
    assert sorted(results) == sorted(f"{p} attention_kernel_gluon" for p in ATTENTION)
    for kernel, (registers, spills, wgmma, tma) in results.items():
        assert spills == 0 and wgmma and tma, kernel
        assert registers <= 255, kernel
