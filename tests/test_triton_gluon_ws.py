"""The warp-specialised Gluon twins (dt/backends/triton/gluon_ws.py) of kernels of several
warpgroups: each warpgroup on its own rows in a partition of its own, a producer warp filling the
rings as the consumers free their slots, the launcher's boxes, registers and stages."""
import re

import pytest

import dt
from dt.backends.triton import codegen

HOPPER = "benchmarks/gpu/schedules/causal_mha_hopper.dt"  # 128 rows, 8 warps: two consumers of 64


def source(path=HOPPER) -> str:
    return codegen.render(dt.load(path).pipeline("bf16")).source


def function(text: str, name: str) -> str:
    start = text.index(f"def {name}(")
    ends = [i for i in (text.find("\n    @gluon.jit", start), text.find("\n\ndef ", start)) if i > 0]
    return text[start:min(ends)]


def flat(text: str) -> str:
    return " ".join(text.split()).replace("( ", "(")


def test_each_warpgroup_runs_in_a_partition_of_its_own_beside_a_producer_warp():
    text = source()
    kernel = flat(function(text, "attention_kernel_gluon"))
    assert "gl.warp_specialize([" in kernel
    assert "(attention_kernel_gluon_consumer, (0, " in kernel and "(attention_kernel_gluon_consumer, (1, " in kernel
    assert "(attention_kernel_gluon_producer, (" in kernel
    assert kernel.endswith("], [4, 1], [240, 24])")  # a second consumer warpgroup, one producer warp
    # the shared memory is the kernel's: Q a box per consumer, the K/V slots freed by both
    assert "Q_smems = gl.allocate_shared_memory(Q_desc.dtype, [2] + Q_desc.block_type.shape" in kernel
    assert "mbarrier.init(K_free.index(slot), count=2)" in kernel and "mbarrier.init(K_ready.index(slot), count=1)" in kernel
    assert "warpgroup_mma" not in kernel


def test_a_consumer_takes_its_rows_and_frees_each_slot_once_its_product_is_done():
    consumer = flat(function(source(), "attention_kernel_gluon_consumer"))
    assert "def attention_kernel_gluon_consumer(warpgroup: gl.constexpr," in consumer
    assert "m_arange = warpgroup * 64 + gl.arange(0, 64, layout=rows)" in consumer
    assert "warps_per_cta=[4, 1]" in consumer and "Q_smem = Q_smems.index(warpgroup)" in consumer
    assert "gl.cast(m_block_start + warpgroup * 64, gl.int32)" in consumer  # its Q box, its output box
    assert "_tma_load(K_desc" not in consumer and "_tma_load(V_desc" not in consumer  # the producer's
    step = consumer[consumer.index("for t in range(1, l_iter_count):"):]
    wait_scores = step.index("k_accumulator, Q_tile = warpgroup_mma_wait(1,")
    free_k = step.index("mbarrier.arrive(K_free.index(slot), count=1)")
    softmax = step.index("gl.exp2(")
    wait_pv = step.index("l_num_accumulator, l_num_accumulator_operand = warpgroup_mma_wait(0,")
    free_v = step.index("mbarrier.arrive(V_free.index(previous_slot), count=1)")
    assert wait_scores < free_k < softmax < wait_pv < free_v


def test_the_producer_waits_for_a_free_slot_and_streams_both_causal_loops():
    producer = flat(function(source(), "attention_kernel_gluon_producer"))
    assert "warpgroup_mma" not in producer and "gl.exp" not in producer
    assert "for tile in range(l_iter_count_2 + l_iter_2_count_2):" in producer  # below the diagonal, then on it
    consumer = function(source(), "attention_kernel_gluon_consumer")
    bounds = [line for line in consumer.splitlines() if re.search(r"l_iter(_2)?_(start|stop|count) =", line)]
    assert len(bounds) == 6 and not any("warpgroup" in line for line in bounds)  # every consumer walks the same tiles
    # a new barrier has completed phase 1: the first pass through the ring does not wait
    free = "mbarrier.wait(K_free.index(slot), (((tiles_loaded + tile) // STAGES) & 1) ^ 1)"
    assert producer.index(free) < producer.index("_tma_load(K_desc")
    assert producer.index("mbarrier.wait(V_free.index(slot)") < producer.index("_tma_load(V_desc")


def test_the_launcher_makes_boxes_of_a_consumers_rows_and_fits_the_stages():
    text = source()
    launch = flat(text[text.index("def causal_mha_hopper("):])
    assert "Q_box = [1, 1, 64," in launch and "attention_box = [1, 1, 64," in launch
    assert "K_box = [1, 1, 128," in launch and "V_box = [1, 1, 128," in launch
    stages = re.search(r"attention_stages = _gluon_stages\(2, \[\(K_box, 2\), \(V_box, 2\)\], "
                       r"\[\(Q_box, 4\), \(attention_box, 4\)\], (\d+)\)", launch)
    assert stages and int(stages.group(1)) == 227 * 1024
    assert "V_desc, attention_desc, attention_stages), {'num_warps': 4, 'maxnreg': 168})" in launch
    assert "attention_gluon = attention_stages > 0 # 0: two stages do not fit at this shape if attention_gluon: attention_gluon = _gluon_launch(" in launch


def test_stages_are_the_schedules_where_they_fit_and_two_at_fewest():
    pytest.importorskip("torch")  # the launcher's helpers import it
    from dt.backends.triton.host_helpers import _gluon_stages
    most = 227 * 1024
    head = lambda d: [1, 1, 128, d]
    rings = lambda d: [(head(d), 2), (head(d), 2)]  # K and V: 128 keys of d bf16 each
    others = lambda d: [([1, 1, 64, d], 4), ([1, 1, 64, d], 4)]  # Q and the output, 2 consumers
    assert _gluon_stages(3, rings(128), others(128), most) == 2  # 64 KB + 3 x 64 KB does not fit
    assert _gluon_stages(3, rings(64), others(64), most) == 3
    assert _gluon_stages(4, rings(64), others(64), most) == 4
    assert _gluon_stages(2, rings(256), others(256), most) == 0  # 2 do not fit: the Triton kernel runs


def test_one_warpgroup_keeps_the_twin_of_one_partition():
    text = source("benchmarks/gpu/schedules/causal_mha_m64.dt")
    assert "gl.warp_specialize" not in text and "'maxnreg'" not in text
    assert "{'num_warps': 4})" in flat(text)


def test_more_than_two_warpgroups_have_no_twin():
    """Four consumers of 112 registers each spilled on an H200 (3x slower than two): the Triton
    kernel runs."""
    from dt.backends.triton.gluon import NotPipelined
    from dt.backends.triton.gluon_ws import WarpSpecializedRenderer
    text = open(HOPPER).read().replace("m:128);", "m:256);").replace("tensorize(m:128,", "tensorize(m:256,")
    pipeline = dt.loads(text.replace("num_warps(8)", "num_warps(16)")).pipeline("bf16")
    with pytest.raises(NotPipelined, match="4 consumer warpgroups would get 112 registers each"):
        WarpSpecializedRenderer(pipeline.kernels[0], pipeline, "ieee", set(codegen.GLOBALS_USED), {}, "k_gluon")
    assert "gl.warp_specialize" not in codegen.render(pipeline).source


def _refusal(kernel, pipeline) -> str | None:
    from dt.backends.triton.gluon import NotPipelined
    from dt.backends.triton.gluon_ws import WarpSpecializedRenderer
    try:
        WarpSpecializedRenderer(kernel, pipeline, "ieee", set(codegen.GLOBALS_USED), {}, "k_gluon")
    except NotPipelined as refusal:
        return str(refusal)
    return None


def test_a_load_placed_by_a_name_the_producer_does_not_compute_has_no_twin():
    """The producer warp recomputes the loops' bounds from the kernel's parameters and top-level
    lets; a bound set inside a loop (here the diagonal loop's start) is not among them."""
    import dataclasses

    from dt.ir import scheduled as S
    from dt.ir.index_expr import IVar
    pipeline = dt.load(HOPPER).pipeline("bf16")
    kernel = pipeline.kernels[0]
    first, second = (i for i, s in enumerate(kernel.body) if isinstance(s, S.For))
    body = list(kernel.body)
    body[first] = dataclasses.replace(body[first], body=(*body[first].body, S.Let("diagonal_start", body[second].start)))
    body[second] = dataclasses.replace(body[second], start=IVar("diagonal_start"))
    assert _refusal(kernel, pipeline) is None
    refusal = _refusal(dataclasses.replace(kernel, body=tuple(body)), pipeline)
    assert refusal is not None and "read diagonal_start, which the producer warp does not compute" in refusal


def test_a_reduction_along_the_rows_the_warpgroups_split_has_no_twin():
    """Each consumer holds 64 of the block's 128 rows: a sum over the rows would be each half's."""
    import dataclasses

    from dt.ir import scheduled as S
    pipeline = dt.load(HOPPER).pipeline("bf16")
    kernel = pipeline.kernels[0]
    store = next(i for i, s in enumerate(kernel.body) if isinstance(s, S.Store))
    column_sums = S.Assign("column_sums", S.Reduce("sum", S.Ref("attention", ("m", "n"), "f32"), "m"))
    body = (*kernel.body[:store], column_sums, *kernel.body[store:])
    assert _refusal(kernel, pipeline) is None
    assert "a reduction along the products' rows" in _refusal(dataclasses.replace(kernel, body=body), pipeline)


def test_loops_loading_through_different_rings_have_no_twin():
    """One count of the tiles loaded gives every ring's slot and phase: the causal kernel's two
    loops must load through the same rings (here the diagonal loop's K comes from V instead)."""
    import dataclasses

    from dt.ir import scheduled as S
    pipeline = dt.load(HOPPER).pipeline("bf16")
    kernel = pipeline.kernels[0]
    second = [i for i, s in enumerate(kernel.body) if isinstance(s, S.For)][1]
    loop = kernel.body[second]

    def from_v(s):
        if isinstance(s, S.Assign) and isinstance(s.value, S.Load) and s.value.tensor == "K":
            return dataclasses.replace(s, value=dataclasses.replace(s.value, tensor="V"))
        return s
    body = list(kernel.body)
    body[second] = dataclasses.replace(loop, body=tuple(from_v(s) for s in loop.body))
    assert body[second] != loop
    refusal = _refusal(dataclasses.replace(kernel, body=tuple(body)), pipeline)
    assert refusal is not None and "different rings" in refusal
