"""dt: the DT ("Decoupled Triton") kernel language and compiler.

    prog = dt.load("examples/softmax.dt")
    out = prog(A=a)                      # default backend; prog(A=a, backend="interp")
    ref = prog.reference(A=a)            # the algorithm evaluated directly (the oracle)
    print(prog.source("interp"))         # generated code
"""
from dt.errors import (DTBackendError, DTDimensionError, DTError, DTExtentError, DTInputError, DTNameError,
                       DTScheduleError, DTSyntaxError, DTTypeError, PerformanceWarning, ScheduleNote)
from dt.frontend.api import (FUNCTIONS, RVar, SIn, Var, In, Func, cast, cummax, cummin, cumprod, cumsum, dim_len,
                             rargmax, rargmin, rargtopk, rdot, reshape, rmax, rmin, rsum)
from dt.runtime import Program, load, loads, program
from dt.autodiff import grad
from dt import debug  # breakpoints, tracing and sanitizers on the interpreter

__version__ = "0.1.0"

# The element-wise functions of the op table (dt.ir.ops): dt.exp, dt.abs, dt.where, dt.eq, ...
globals().update(FUNCTIONS)

__all__ = ["Program", "load", "loads", "program", "grad", "Func", "In", "SIn", "Var", "RVar", "rsum", "rmax", "rmin",
           "rargmax", "rargmin", "rargtopk", "rdot", "cumsum", "cumprod", "cummax", "cummin", *FUNCTIONS, "reshape",
           "cast", "dim_len", "DTError", "DTSyntaxError", "DTNameError",
           "DTDimensionError", "DTTypeError", "DTScheduleError", "DTExtentError", "DTInputError", "DTBackendError",
           "PerformanceWarning", "ScheduleNote"]
