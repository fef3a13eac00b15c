"""The Triton backend's replay of repeat calls (dt/backends/triton/replay.py), on the CPU with
stand-in kernels: what is recorded, what a replay passes to each compiled kernel, and when a
call is recorded afresh. benchmarks/gpu/verify_triton.py checks replays on a GPU against the
generated launcher, bit for bit."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="replays run Triton kernels: needs torch (pip install -e '.[triton]')")
pytest.importorskip("triton", reason="replays run Triton kernels: needs triton (pip install -e '.[triton]')")

from triton import knobs  # noqa: E402
from triton.tools.tensor_descriptor import TensorDescriptor  # noqa: E402

from dt.backends.pysource import load_module  # noqa: E402
from dt.backends.triton import replay  # noqa: E402
from dt.backends.triton.replay import Replays  # noqa: E402


class FakeCompiled:
    """A compiled kernel: `run` is what a replay calls, with the launcher's arguments."""

    def __init__(self, body):
        self.body, self.function, self.packed_metadata = body, object(), object()
        self.replayed = 0

    def run(self, grid_x, grid_y, grid_z, stream, function, metadata, launch_metadata, enter, exit, *args):
        assert (function, metadata) == (self.function, self.packed_metadata)
        assert (launch_metadata, enter, exit) == (None, None, None)
        self.replayed += 1
        self.args = args  # the last replay's
        self.body(*args)


class FakeJit:
    """A @triton.jit kernel: launching it through [grid] runs the body (Triton's dispatch)."""

    def __init__(self, body):
        self.compiled = FakeCompiled(body)
        self.dispatched = 0

    def __getitem__(self, grid):
        def launch(*args, num_warps):
            self.dispatched += 1
            self.compiled.body(*args)
            return self.compiled
        return launch


def _scale(A, a0, a1, alpha, out, o0, o1, rows, A_desc=None, out_desc=None, use_tma=False):
    if use_tma:  # the replay must pass descriptors of this call's tensors
        assert A_desc.base is A and out_desc.base is out and A_desc.block_shape == [4, 8]
        A, out = A_desc.base, out_desc.base
    out.copy_(A * alpha)


def _shift(T, t0, t1, beta, out, o0, o1, rows):
    out.copy_(T + beta)


LAUNCHERS = """
def scale(A, alpha, outputs=None):
    outputs = outputs or {}
    out = outputs["out"] if "out" in outputs else torch.empty(A.shape, dtype=A.dtype, device=A.device)
    scale_kernel[(2,)](A, *A.stride(), float(alpha), out, *out.stride(), A.shape[0], num_warps=4)
    return out


def scale_shift(A, alpha, beta, outputs=None):
    outputs = outputs or {}
    tmp = outputs["tmp"] if "tmp" in outputs else torch.empty(A.shape, dtype=A.dtype, device=A.device)
    out = outputs["out"] if "out" in outputs else torch.empty(A.shape, dtype=A.dtype, device=A.device)
    scale_kernel[(2,)](A, *A.stride(), float(alpha), tmp, *tmp.stride(), A.shape[0], num_warps=4)
    shift_kernel[(3, 1)](tmp, *tmp.stride(), float(beta), out, *out.stride(), A.shape[0], num_warps=4)
    return {"tmp": tmp, "out": out}


def scale_through_descriptors(A, alpha, outputs=None):
    outputs = outputs or {}
    out = outputs["out"] if "out" in outputs else torch.empty(A.shape, dtype=A.dtype, device=A.device)
    A_desc = TensorDescriptor(A, A.shape, A.stride(), [4, 8])
    out_desc = TensorDescriptor(out, out.shape, out.stride(), [4, 8])
    scale_kernel[(2,)](A, *A.stride(), float(alpha), out, *out.stride(), A.shape[0], A_desc, out_desc, True,
                       num_warps=4)
    return out


def scale_by_int(A, times, outputs=None):
    out = torch.empty(A.shape, dtype=A.dtype, device=A.device)
    scale_kernel[(2,)](A, *A.stride(), int(times), out, *out.stride(), A.shape[0], num_warps=4)
    return out


def scale_given_rows(A, alpha, rows, outputs=None):
    rows = int(rows)  # an extent no input binds: passed to the launcher, part of the call's key
    out = torch.empty((rows, A.shape[1]), dtype=A.dtype, device=A.device)
    scale_kernel[(2,)](A, *A.stride(), float(alpha), out, *out.stride(), rows, num_warps=4)
    return out
"""


@pytest.fixture
def module(monkeypatch):
    monkeypatch.setattr(replay, "_stream", lambda index: 0)
    monkeypatch.setattr(replay, "_current_device", lambda: -1)  # CPU tensors' get_device()
    namespace = {"torch": torch, "TensorDescriptor": TensorDescriptor, "scale_kernel": FakeJit(_scale),
                 "shift_kernel": FakeJit(_shift)}
    return load_module(LAUNCHERS, "test launchers", namespace)


def _replays(module, name):
    return Replays(module[name], module, ["scale_kernel", "shift_kernel"], name)


def _call(replays, tensors, scalars, sizes=(("x_SIZE", 4),), extents=(), outputs=None, integers=()):
    """What the backend's `run` does: replay the call's key, or record it."""
    key = Replays.key(tensors, sizes, outputs, tuple(scalars[i] for i in integers))
    function = replays.functions.get(key)
    if function:
        return function(*tensors, *scalars, *(outputs or {}).values())
    return replays.record(key, tensors, scalars, extents, outputs)


def test_first_call_dispatches_later_calls_replay(module):
    replays = _replays(module, "scale")
    kernel = module["scale_kernel"]
    A = torch.arange(8.0).reshape(4, 2)
    assert torch.equal(_call(replays, [A], [2.0]), A * 2)
    assert (kernel.dispatched, kernel.compiled.replayed) == (1, 0)
    B = torch.full((4, 2), 3.0)
    out = _call(replays, [B], [0.5])  # other tensor, other scalar: the new values reach the kernel
    assert torch.equal(out, B * 0.5)
    assert out.data_ptr() != B.data_ptr()
    assert (kernel.dispatched, kernel.compiled.replayed) == (1, 1)


def test_temporaries_outputs_and_equal_scalars(module):
    replays = _replays(module, "scale_shift")
    A = torch.ones(4, 2)
    same = 1.5  # one float object for both scalars: each must still get its own value later
    first = _call(replays, [A], [same, same])
    assert torch.equal(first["out"], A * 1.5 + 1.5)
    later = _call(replays, [A], [2.0, -1.0])
    assert torch.equal(later["tmp"], A * 2.0) and torch.equal(later["out"], A * 2.0 - 1.0)
    assert later["tmp"].data_ptr() != first["tmp"].data_ptr()
    assert module["shift_kernel"].compiled.replayed == 1


def test_tma_descriptors_are_made_afresh_for_each_replay(module):
    replays = _replays(module, "scale_through_descriptors")
    A = torch.ones(4, 8)
    _call(replays, [A], [2.0])
    B = torch.full((4, 8), 3.0)
    assert torch.equal(_call(replays, [B], [0.5]), B * 0.5)
    assert module["scale_kernel"].compiled.replayed == 1


def test_extents_given_as_arguments_are_not_replay_parameters(module):
    replays = _replays(module, "scale_given_rows")
    A = torch.ones(4, 2)
    _call(replays, [A], [2.0], sizes=(("x_SIZE", 4),), extents=[4])
    out = _call(replays, [A], [3.0], sizes=(("x_SIZE", 4),), extents=[4])  # replayed from tensors and scalars
    assert torch.equal(out, A * 3.0)
    assert module["scale_kernel"].compiled.replayed == 1


def test_integer_scalars_values_are_part_of_the_key(module):
    replays = _replays(module, "scale_by_int")
    A = torch.ones(4, 2)
    # The launcher's int() makes a new object, not found by identity: the value is in the key (as
    # Triton specialises ints on their value), each recorded afresh, then replayed.
    for times, replayed in ((3, 0), (5, 0), (3, 1), (5, 2)):
        out = _call(replays, [A], [times], integers=[0])
        assert torch.equal(out, A * times) and module["scale_kernel"].compiled.replayed == replayed


def test_new_strides_alignment_or_sizes_record_again(module):
    replays = _replays(module, "scale")
    A = torch.arange(16.0).reshape(4, 4)
    _call(replays, [A[:, :2].contiguous()], [1.0])
    assert len(replays.functions) == 1
    _call(replays, [A[:, :2]], [1.0])  # strides (4, 1): another compiled kernel
    assert len(replays.functions) == 2
    misaligned = torch.arange(9.0)[1:].reshape(4, 2)  # 4 bytes past an aligned address
    assert Replays.key([misaligned], ()) != Replays.key([misaligned.clone()], ())
    _call(replays, [A[:, :2].contiguous()], [1.0], sizes=(("x_SIZE", 5),))
    assert len(replays.functions) == 3


def test_given_outputs_are_recorded_then_replayed_into(module):
    replays = _replays(module, "scale")
    kernel = module["scale_kernel"]
    A, first = torch.arange(8.0).reshape(4, 2), torch.empty(4, 2)
    assert _call(replays, [A], [2.0], outputs={"out": first}) is first
    assert torch.equal(first, A * 2) and (kernel.dispatched, kernel.compiled.replayed) == (1, 0)
    B, later = torch.full((4, 2), 3.0), torch.full((4, 2), float("nan"))
    assert _call(replays, [B], [0.5], outputs={"out": later}) is later  # replayed into the given tensor
    assert (kernel.dispatched, kernel.compiled.replayed) == (1, 1)
    assert kernel.compiled.args[0] is B and kernel.compiled.args[4] is later
    assert torch.equal(later, B * 0.5) and torch.equal(first, A * 2)
    allocated = _call(replays, [B], [0.5])  # no output given: another key, recorded afresh
    assert allocated is not later and kernel.dispatched == 2 and len(replays.functions) == 2


def test_given_output_strides_alignment_and_dtype_are_part_of_the_key(module):
    replays = _replays(module, "scale")
    kernel = module["scale_kernel"]
    A = torch.arange(8.0).reshape(4, 2)
    _call(replays, [A], [2.0], outputs={"out": torch.empty(4, 2)})
    transposed = torch.empty(2, 4).t()  # strides (1, 4): another compiled kernel
    assert _call(replays, [A], [2.0], outputs={"out": transposed}) is transposed
    assert torch.equal(transposed, A * 2) and kernel.dispatched == 2
    misaligned = torch.empty(9)[1:].view(4, 2)  # strides (2, 1) as the first, 4 bytes past an aligned address
    _call(replays, [A], [2.0], outputs={"out": misaligned})
    assert torch.equal(misaligned, A * 2) and kernel.dispatched == 3 and kernel.compiled.replayed == 0
    key = Replays.key([A], (), {"out": torch.empty(4, 2)})
    assert key != Replays.key([A], (), {"out": torch.empty(4, 2, dtype=torch.float64)})
    assert len({key, Replays.key([A], ()), Replays.key([A], (), {"tmp": torch.empty(4, 2)})}) == 3


def test_a_wrong_shaped_given_output_goes_through_the_launcher(module):
    replays = _replays(module, "scale")
    A = torch.arange(8.0).reshape(4, 2)
    _call(replays, [A], [2.0], outputs={"out": torch.empty(4, 2)})
    _call(replays, [A], [2.0], outputs={"out": torch.empty(4, 2)})
    assert module["scale_kernel"].compiled.replayed == 1
    short = torch.zeros(3, 2)  # the recorded strides (2, 1): a replay would write 4 rows into it
    with pytest.raises(RuntimeError):  # the launcher's error (here the stand-in kernel's)
        _call(replays, [A], [2.0], outputs={"out": short})
    assert module["scale_kernel"].compiled.replayed == 1 and torch.equal(short, torch.zeros(3, 2))


def test_some_outputs_given_the_others_allocated(module):
    replays = _replays(module, "scale_shift")
    A, B = torch.ones(4, 2), torch.full((4, 2), 2.0)
    out = torch.empty(4, 2)
    _call(replays, [A], [2.0, 1.0], outputs={"out": out})
    first_tmp = _call(replays, [A], [2.0, 1.0], outputs={"out": out})["tmp"]
    later = _call(replays, [B], [3.0, -1.0], outputs={"out": out})
    assert module["shift_kernel"].compiled.replayed == 2
    assert later["out"] is out and torch.equal(out, B * 3.0 - 1.0)
    assert torch.equal(later["tmp"], B * 3.0) and later["tmp"].data_ptr() != first_tmp.data_ptr()
    tmp = torch.empty(4, 2)  # the other one given: another key
    for alpha in (2.0, 5.0):
        given = _call(replays, [B], [alpha, 0.0], outputs={"tmp": tmp})
        assert given["tmp"] is tmp and torch.equal(tmp, B * alpha) and torch.equal(given["out"], B * alpha)
    assert module["shift_kernel"].compiled.replayed == 3 and len(replays.functions) == 2


def test_a_given_output_s_descriptor_is_rebuilt_on_it(module):
    replays = _replays(module, "scale_through_descriptors")
    A, B = torch.ones(4, 8), torch.full((4, 8), 3.0)
    _call(replays, [A], [2.0], outputs={"out": torch.empty(4, 8)})
    out = torch.empty(4, 8)
    assert _call(replays, [B], [0.5], outputs={"out": out}) is out  # _scale checks out_desc.base is out
    assert torch.equal(out, B * 0.5) and module["scale_kernel"].compiled.replayed == 1


def test_a_call_with_one_tensor_twice_is_not_recorded(module):
    replays = _replays(module, "scale")
    A = torch.ones(4, 2)
    _call(replays, [A], [2.0], outputs={"out": A})  # a replay could not tell the input from the output
    assert not replays.functions
    B, out = torch.ones(4, 2), torch.empty(4, 2)
    _call(replays, [B], [2.0], outputs={"out": out})
    assert len(replays.functions) == 1
    C = torch.full((4, 2), 3.0)
    assert _call(replays, [C], [2.0], outputs={"out": C}) is C and torch.equal(C, torch.full((4, 2), 6.0))


def test_a_launch_hook_means_no_replay():
    assert not Replays.hooked()

    def hook(metadata):
        pass

    knobs.runtime.launch_enter_hook.add(hook)
    try:
        assert Replays.hooked()
    finally:
        knobs.runtime.launch_enter_hook.remove(hook)


def test_unknown_argument_kinds_are_not_replayed(module):
    namespace = dict(module)
    source = """
def odd(A, outputs=None):
    out = torch.empty(A.shape, dtype=A.dtype, device=A.device)
    scale_kernel[(1,)](A, *A.stride(), 1.0, out, *out.stride(), "not a size", num_warps=4)
    return out
"""
    namespace = load_module(source, "odd launcher", namespace)
    replays = Replays(namespace["odd"], namespace, ["scale_kernel"], "odd")
    A = torch.ones(2, 2)
    key = Replays.key([A], ())
    assert torch.equal(replays.record(key, [A], []), A)
    assert replays.functions[key] is None  # the backend then always calls the launcher
