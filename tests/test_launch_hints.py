"""The launch hints `persistent` and `tma` (and the cache hint `stream`): where they may be written, what the Triton backend
makes of them (programs walking blocks; tiles moved through TMA descriptors where the tensors
allow it, through pointers elsewhere), and that every backend computes the same values with
them (the conformance cases persistent.* and tma.* run them on every backend)."""
from __future__ import annotations

import numpy as np
import pytest

import dt
from dt.errors import DTScheduleError

MATMUL = """Func mm;
In A, B;
Var x, y;
RVar k;
mm[x, y] = rdot(A[x, k], B[k, y], k);
mm.block(x:16, y:32);
mm.tensorize(x:16, y:32, k:16);
mm.map(x:x1/2, y, x1);
{hints}
mm.compile();
"""


def error_of(source: str) -> DTScheduleError:
    with pytest.raises(DTScheduleError) as info:
        dt.loads(source, file="bad.dt")
    return info.value


@pytest.mark.parametrize("call", ["mm.persistent(0);", "mm.persistent(x:2);", "mm.persistent(2, 3);"])
def test_persistent_takes_no_argument_or_a_program_count(call):
    err = error_of(MATMUL.format(hints=call))
    assert "persistent takes no argument" in err.message and err.loc.line == 9
    assert "mm.persistent()" in err.hint


@pytest.mark.parametrize("hint", ["tma", "stream"])
def test_tma_and_stream_take_no_arguments(hint):
    err = error_of(MATMUL.format(hints=f"mm.{hint}(2);"))
    assert err.message == f"{hint} takes no arguments" and err.hint == f"write mm.{hint}()"


@pytest.mark.parametrize("hint", ["persistent", "tma", "stream"])
def test_hints_belong_on_the_kernel_root(hint):
    source = f"""Func out, m;
In A;
Var x;
RVar y;
m[x] = rmax(A[x, y], y);
out[x, y] = exp(A[x, y] - m[x]);
out.block(x:4);
m.fuse_at(out, x);
m.{hint}();
out.compile_to_kernel();
"""
    err = error_of(source)
    assert err.loc.line == 9
    assert err.message == f"{hint} applies to the Func a kernel computes, but 'm' is fused into 'out'"
    assert err.hint == f"call it on the kernel's root Func: out.{hint}()"
    inlined = error_of(source.replace("m.fuse_at(out, x);", "m.inline();"))
    assert inlined.message.endswith("'m' is inlined into its consumers")


def test_cpu_backends_compute_the_same_with_hints():
    """The hints change how a kernel is launched, never what it computes."""
    plain = dt.loads(MATMUL.format(hints=""))
    hinted = dt.loads(MATMUL.format(hints="mm.persistent(3);\nmm.tma();\nmm.stream();"))
    rng = np.random.default_rng(0)
    A, B = rng.standard_normal((37, 20)).astype(np.float32), rng.standard_normal((20, 50)).astype(np.float32)
    for backend in ("interp", "numba"):
        assert np.array_equal(hinted(backend=backend, A=A, B=B), plain(backend=backend, A=A, B=B))


# ---------------------------------------------------------------- the Triton backend

# Tests that run Triton kernels are marked needs_triton: without torch and triton they skip
# (tests/conftest.py), and those that only generate the code still run.
try:
    import torch
except ImportError:
    torch = None
# A compiled pipeline takes tensors on the device it runs on: the GPU where there is one, else the
# CPU (Triton's interpreter).
DEVICE = "cuda" if torch is not None and torch.cuda.is_available() else "cpu"

from dt import backends  # noqa: E402
from dt.backends.triton import codegen  # noqa: E402


def triton_run(source: str, dtype: str = "f16"):
    return backends.get("triton").compile(dt.loads(source).pipeline(dtype))


def test_generated_code_walks_blocks_and_moves_boxes():
    source = codegen.render(dt.loads(MATMUL.format(hints="mm.persistent();\nmm.tma();")).pipeline("f16"),
                            width=None).source
    assert ("for pid in tl.range(tl.program_id(0).to(tl.int64), (x_SIZE + 15) // 16 * ((y_SIZE + 31) // 32), "
            "program_count, flatten=USE_TMA):") in source
    assert "x_BLOCK_COUNT = (x_SIZE + 15) // 16\n" in source  # before the walk: it does not depend on pid
    assert "A = A_desc.load([tl.cast(x_block_start, tl.int32), k_iter])" in source
    assert "B = B_desc.load([k_iter, tl.cast(y_block_start, tl.int32)])" in source
    assert "mm_desc.store([tl.cast(x_block_start, tl.int32), tl.cast(y_block_start, tl.int32)], mm.to(tl.float16))" in source
    assert ("mm_tma = _tma_ready(device, (A, [16, 16], (x_SIZE, k_SIZE)), (B, [16, 32], (k_SIZE, y_SIZE)), "
            "(mm, [16, 32], (x_SIZE, y_SIZE)))") in source
    assert "if mm_tma:\n        A_desc = TensorDescriptor(A, A.shape, A.stride(), [16, 16])\n" in source
    assert "mm_programs = min((x_SIZE + 15) // 16 * ((y_SIZE + 31) // 32), _multiprocessors(device))" in source
    plain = codegen.render(dt.loads(MATMUL.format(hints="")).pipeline("f16")).source
    assert "TensorDescriptor" not in plain and "tl.range" not in plain and "_multiprocessors" not in plain


class Launches:
    """Stands in for a generated kernel: records each launch's grid and TMA flag, then runs it."""

    def __init__(self, kernel):
        self.kernel, self.grids, self.tma = kernel, [], []

    def __getitem__(self, grid):
        def launch(*args, **options):
            self.grids.append(grid)
            self.tma.append(args[-1])
            return self.kernel[grid](*args, **options)
        return launch


@pytest.mark.needs_triton
@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_tma_where_rows_are_aligned_pointers_elsewhere(dtype):
    prog = dt.loads(MATMUL.format(hints="mm.persistent(3);\nmm.tma();"))
    run = backends.get("triton").compile(prog.pipeline(dtype))
    launches = run.namespace["mm_kernel"] = Launches(run.namespace["mm_kernel"])
    torch_dtype = {"f32": torch.float32, "bf16": torch.bfloat16}[dtype]
    for (x, k, y), tma in (((37, 40, 48), True), ((37, 40, 13), False)):
        A = torch.randn(x, k, dtype=torch_dtype, device=DEVICE)
        B = torch.randn(k, y, dtype=torch_dtype, device=DEVICE)
        out = run({"A": A, "B": B}, {}, {"x_SIZE": x, "y_SIZE": y, "k_SIZE": k})["mm"]
        ref = A.double() @ B.double()
        assert float((out.double() - ref).norm() / ref.norm()) < (1e-5 if dtype == "f32" else 1e-2)
        assert launches.tma[-1] is tma
        assert launches.grids[-1] == (3,)  # 3 of the 6 (or 3) blocks' programs: each walks two


@pytest.mark.needs_triton
def test_a_misaligned_view_goes_through_pointers():
    prog = dt.loads(MATMUL.format(hints="mm.tma();"))
    run = backends.get("triton").compile(prog.pipeline("f32"))
    launches = run.namespace["mm_kernel"] = Launches(run.namespace["mm_kernel"])
    A = torch.randn(20, 41, device=DEVICE)[:, 1:]  # rows of 40 floats that start 4 bytes past 16-byte boundaries
    B = torch.randn(40, 32, device=DEVICE)
    out = run({"A": A, "B": B}, {}, {"x_SIZE": 20, "y_SIZE": 32, "k_SIZE": 40})["mm"]
    assert torch.allclose(out, A @ B, atol=1e-4) and launches.tma == [False]


@pytest.mark.needs_triton
def test_fewer_blocks_than_programs_launch_one_program_per_block():
    prog = dt.loads(MATMUL.format(hints="mm.persistent(64);"))
    run = backends.get("triton").compile(prog.pipeline("f32"))
    launches = run.namespace["mm_kernel"] = Launches(run.namespace["mm_kernel"])
    A, B = torch.randn(20, 16, device=DEVICE), torch.randn(16, 40, device=DEVICE)
    assert torch.allclose(run({"A": A, "B": B}, {}, {"x_SIZE": 20, "y_SIZE": 40, "k_SIZE": 16})["mm"], A @ B, atol=1e-4)
    assert launches.grids == [(4,)]


def test_tma_without_a_box_to_move_is_an_error():
    """Tiles of 2 in blocks of 3 are not boxes (TMA would read the next block's rows), and a
    2-wide result row is under 16 bytes in every dtype."""
    source = """Func out;
In A;
Var x;
RVar y;
out[x] = rsum(A[x, y], y);
out.block(x:3);
out.tensorize(x:2, y:16);
out.tma();
out.compile();
"""
    with pytest.raises(DTScheduleError) as info:
        codegen.render(dt.loads(source, file="rows.dt").pipeline("f32"))
    err = info.value
    assert err.message == "out.tma() finds no tile to move through a tensor descriptor in kernel 'out_kernel'"
    assert "of at most 256 that is the block or divides it" in err.hint and "16 bytes" in err.hint
    assert "the whole of an unblocked extent" in err.hint
    assert "remove out.tma()" in err.hint and err.loc.line == 5


@pytest.mark.needs_triton
@pytest.mark.parametrize("dtype", ["f32", "f16"])
def test_rank0_tiles_keep_pointers_beside_boxes(dtype):
    """A scalar input (s[]) and a scalar output have no box; the other tiles still move by TMA."""
    prog = dt.loads("""Func f, t; In A, s; Var x; RVar r;
f[x] = A[x] * s[];
t[] = rsum(A[r], r);
f.block(x:8); f.tensorize(x:8); f.tma(); f.persistent(2);
t.tensorize(r:16); t.tma();
f.compile(); t.compile();
""")
    A, s = torch.randn(40), torch.tensor(1.5)
    torch_dtype = {"f32": torch.float32, "f16": torch.float16}[dtype]
    out = prog(backend="triton", A=A.to(torch_dtype), s=s.to(torch_dtype))
    ref = prog.reference(A=A.to(torch_dtype).numpy(), s=s.to(torch_dtype).numpy())
    for name in ("f", "t"):
        assert np.allclose(out[name].float().numpy(), ref[name], rtol=1e-2, atol=1e-2)


@pytest.mark.needs_triton
def test_programs_without_inputs_take_hints():
    prog = dt.loads("""Func f; Var x, y;
f[x, y] = x * 2.0 + len(y) - y;
f.block(x:16, y:16); f.tensorize(x:16, y:16); f.persistent(); f.tma(); f.compile();
""")
    sizes = {"x": 40, "y": 24}
    assert np.array_equal(np.asarray(prog(backend="triton", sizes=sizes)), prog.reference(sizes=sizes))


def test_narrow_rows_keep_pointers_in_that_dtype_only():
    """A 4-wide tile is a 16-byte box in f32, 8 bytes in f16: TMA there, pointers here."""
    source = MATMUL.format(hints="mm.tma();").replace("mm.block(x:16, y:32);\nmm.tensorize(x:16, y:32, k:16);",
                                                       "mm.block(x:16, y:4);\nmm.tensorize(x:16, y:4, k:4);")
    f32 = codegen.render(dt.loads(source).pipeline("f32"), width=None).source
    f16 = codegen.render(dt.loads(source).pipeline("f16"), width=None).source
    assert "mm_desc.store(" in f32 and "B_desc.load(" in f32 and "A_desc.load(" in f32
    assert "TensorDescriptor" not in f16


def test_a_box_too_large_for_shared_memory_keeps_pointers():
    """A split product's chunks, combined in a [64, 16, 64] f32 tile (256 KiB, more than an H100's
    shared memory), go through pointers; its operands' 4-8 KiB boxes through descriptors."""
    source = """Func mm; In A, B; Var x, y; RVar k;
mm[x, y] = rdot(A[x, k], B[k, y], k);
mm.block(x:64, y:64); mm.tensorize(x:64, y:64, k:32); mm.split(k:256); mm.tma(); mm.compile();
"""
    code = codegen.render(dt.loads(source).pipeline("f16"), width=None).source
    assert "A_desc.load(" in code and "B_desc.load(" in code and "mm_desc.store(" in code
    assert "mm_chunks_desc_2" not in code and "tl.load(mm_chunks_ptr" in code


def test_more_than_five_dimensions_have_no_box():
    source = """Func out; In A; Var a, b, c, d, x, y;
out[a, b, c, d, x, y] = A[a, b, c, d, x, y] * 2.0;
out.block(x:16, y:16); out.tensorize(x:16, y:16); out.tma(); out.compile();
"""
    with pytest.raises(DTScheduleError, match="finds no tile") as info:
        codegen.render(dt.loads(source).pipeline("f32"))
    assert "of 1 to 5 dimensions" in info.value.hint


@pytest.mark.needs_triton
def test_a_func_named_like_the_descriptor_class():
    prog = dt.loads("""Func TensorDescriptor; In A; Var x, y;
TensorDescriptor[x, y] = A[x, y] * 2.0;
TensorDescriptor.block(x:16, y:16); TensorDescriptor.tensorize(x:16, y:16);
TensorDescriptor.tma(); TensorDescriptor.compile();
""")
    A = torch.randn(40, 24)
    assert torch.equal(prog(backend="triton", A=A), A * 2.0)


@pytest.mark.needs_triton
def test_out_of_shared_memory_with_tma_suggests_removing_it():
    from triton.runtime.errors import OutOfResources

    class NeedsSharedMemory:
        def __getitem__(self, grid):
            def launch(*args, **kwargs):
                raise OutOfResources(262152, 232448, "shared memory")
            return launch

    prog = dt.loads(MATMUL.format(hints="mm.tma();"))
    run = backends.get("triton").compile(prog.pipeline("f32"))
    run.namespace["mm_kernel"] = NeedsSharedMemory()
    with pytest.raises(dt.errors.DTBackendError, match="needs more shared memory") as e:
        run({"A": torch.zeros(32, 16), "B": torch.zeros(16, 32)}, {}, {"x_SIZE": 32, "y_SIZE": 32, "k_SIZE": 16})
    assert "remove mm.tma(): TMA moves every box through shared memory" in e.value.hint


def test_persistent_takes_a_count_not_a_flag():
    x, y, k = dt.Var("x"), dt.Var("y"), dt.RVar("k")
    A, B, mm = dt.In("A"), dt.In("B"), dt.Func("mm")
    mm[x, y] = dt.rdot(A[x, k], B[k, y], k)
    mm.persistent(True).compile()
    with pytest.raises(DTScheduleError, match="persistent takes no argument"):
        dt.program(mm)


@pytest.mark.needs_triton
def test_whole_extent_tiles_are_boxes_the_launcher_checks():
    """tensorize(y:0) pads y to y_TILE at launch: the box is [2, y_TILE] if 256 or less, else pointers."""
    source = """Func out; In A; Var x; RVar y;
out[x] = rsum(exp(A[x, y]), y);
out.block(x:2); out.tensorize(x:2, y:0); out.tma(); out.compile();
"""
    prog = dt.loads(source)
    code = codegen.render(prog.pipeline("f32"), width=None).source
    assert "y_TILE = triton.next_power_of_2(y_SIZE)\n    out_tma = _tma_ready(device, (A, [2, y_TILE], (x_SIZE, y_SIZE)))" in code
    run = backends.get("triton").compile(prog.pipeline("f32"))
    launches = run.namespace["out_kernel"] = Launches(run.namespace["out_kernel"])
    for y, tma in ((200, True), (300, False)):  # tiles of 256 and 512 lanes
        A = torch.randn(7, y, device=DEVICE)
        out = run({"A": A}, {}, {"x_SIZE": 7, "y_SIZE": y})["out"]
        assert torch.allclose(out, A.exp().sum(axis=1), rtol=1e-5) and launches.tma[-1] is tma


@pytest.mark.needs_triton
def test_a_temporary_read_over_smaller_extents_keeps_pointers():
    """t is 40 x 40 but read as t[m, k] with k of 24: TMA would read t's real rows past k where
    the masks read zeros, and the dot would sum them. The launcher sees that t does not end
    where the extents do and takes the pointer branches."""
    source = """Func out, t; In A; Var i, j, m, n; RVar k;
t[i, j] = A[i, j] * 1.0;
out[m, n] = rdot(t[m, k], t[k, n], k);
t.block(i:16); t.tensorize(i:16, j:0);
out.block(m:16); out.tensorize(m:16, n:16, k:16); out.tma(); out.compile();
"""
    prog = dt.loads(source)
    A = np.random.default_rng(0).standard_normal((40, 40)).astype(np.float32)
    for sizes in ({"m": 16, "n": 16, "k": 24}, {"m": 40, "n": 40, "k": 40}):
        got = prog(backend="triton", A=A, sizes=sizes)
        assert np.allclose(got, prog(backend="interp", A=A, sizes=sizes), rtol=1e-4, atol=1e-4)
    code = codegen.render(prog.pipeline("f32"), width=None).source
    assert "(t, [16, 16], (m_SIZE, k_SIZE)), (t, [16, 16], (k_SIZE, n_SIZE))" in code


def test_stream_from_python_is_the_statement():
    r, v = dt.Var("r"), dt.RVar("v")
    L, token = dt.In("L"), dt.Func("token")
    token[r] = dt.rargmax(L[r, v], v)
    token.block(r=1).tensorize(v=4096).num_warps(32).stream().compile()
    built = dt.program(token).pipeline("f32").kernels[0]
    written = dt.load("examples/llm/argmax.dt").pipeline("f32").kernels[0]
    assert built.stream and built.body == written.body
