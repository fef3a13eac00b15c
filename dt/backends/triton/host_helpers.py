"""Host functions a generated module's launcher calls: `_check` always, `_multiprocessors` for
persistent kernels, `_tma_ready` for kernels with TMA, `_gluon_wanted`, `_gluon_descriptor`,
`_gluon_stages` and `_gluon_launch` for kernels with a Gluon twin.

The code generator copies each function's source text into the module it writes
(dt/backends/triton/helpers.py reads this file; generating code imports neither it nor torch).
"""
import os
import warnings

import torch

try:  # as the generated module has them where it has Gluon twins
    from triton.compiler.errors import CompilationError
    from triton.runtime.errors import OutOfResources, PTXASError
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor as GluonTensorDescriptor
except ImportError:
    pass


def _check(name, tensor, rank, dtype, device):
    if tensor.dim() != rank or tensor.dtype != dtype or tensor.device != device:
        raise ValueError(f"{name} must be a {rank}-D {dtype} tensor on {device}, "
                         f"not a {tensor.dim()}-D {tensor.dtype} tensor on {tensor.device}")


def _multiprocessors(device):
    # A persistent kernel launches one program per multiprocessor (per thread under Triton's interpreter).
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return torch.get_num_threads()


def _tma_ready(device, *boxes):
    # TMA (Hopper and later) moves boxes of at most 256 a side and 16 bytes or more along the
    # last, of tensors whose rows start 16-byte aligned and whose last dimension is contiguous,
    # zero-filling where a box leaves the tensor: the tensor must end where the kernel's
    # extents do. Elsewhere the kernel loads and stores through pointers.
    if device.type == "cuda" and torch.cuda.get_device_capability(device) < (9, 0):
        return False
    return all(tuple(t.shape) == extents and t.data_ptr() % 16 == 0 and t.stride(-1) == 1
               and all(stride * t.element_size() % 16 == 0 for stride in t.stride()[:-1])
               and max(box) <= 256 and box[-1] * t.element_size() >= 16
               for t, box, extents in boxes)


def _gluon_wanted(device, capabilities={}):
    # A kernel's Gluon twin (wgmma: Hopper only) runs on an sm_90 GPU unless DT_TRITON_GLUON=0.
    # Each device's capability is read once (`capabilities`): a launch is a few microseconds.
    if device.type != "cuda" or os.environ.get("DT_TRITON_GLUON", "") == "0":
        return False
    if device.index not in capabilities:
        capabilities[device.index] = torch.cuda.get_device_capability(device)
    return capabilities[device.index][0] == 9


def _gluon_stages(requested, rings, others, most):
    # A Gluon twin's ring slots: the schedule's stages where they fit in `most` bytes of shared
    # memory beside the boxes loaded once or stored (`others`); 0 where 2 do not (the Triton
    # kernel runs); (box, bytes) pairs.
    def size(boxes):
        total = 0
        for box, element_bytes in boxes:
            for extent in box:
                element_bytes *= extent
            total += element_bytes
        return total
    fit = (most - size(others)) // max(1, size(rings))
    return min(requested, fit) if fit >= 2 else 0


def _gluon_launch(twin, name, grid, args, options, refused={}):
    # Launch a Gluon twin; False where Triton could not build it (its tiles at this shape need
    # more shared memory or registers than the GPU has, this Triton's Gluon lacks something, a
    # pass or ptxas fails on it): warned once, and the caller and every later call of this shape
    # run the kernel's Triton kernel instead. A shape is the integer arguments (sizes, strides,
    # tiles: constexprs), what Triton builds the twin for: another shape may fit.
    shape = (name, *(a for a in args if type(a) is int))
    if shape in refused:
        return False
    try:
        twin[grid](*args, **options)  # its warps, and a warp-specialised twin's registers
        return True
    except (CompilationError, OutOfResources, PTXASError, RuntimeError) as error:
        refused[shape] = error
        warnings.warn(f"dt: the Gluon twin {name} could not be built ({type(error).__name__}: "
                      f"{str(error).splitlines()[0] if str(error) else ''}); its Triton kernel runs "
                      f"instead (DT_TRITON_GLUON=0 runs the Triton kernels without trying)", RuntimeWarning)
        return False


def _gluon_descriptor(tensor, box, dtype, layouts={}):
    # A Gluon tensor descriptor of `tensor`'s boxes, their shared-memory layout made once a box.
    key = (tuple(box), dtype)
    if key not in layouts:
        layouts[key] = gl.NVMMASharedLayout.get_default_for(box, dtype)
    return GluonTensorDescriptor(tensor, list(tensor.shape), list(tensor.stride()), box, layouts[key])
