"""dt: the DT ("Decoupled Triton") kernel language and compiler.

    prog = dt.load("examples/softmax.dt")
    out = prog(A=a)                      # default backend; prog(A=a, backend="interp")
    ref = prog.reference(A=a)            # the algorithm evaluated directly (the oracle)
    print(prog.source("interp"))         # generated code
"""
from dt.errors import (DTBackendError, DTDimensionError, DTError, DTExtentError, DTInputError, DTNameError,
                       DTScheduleError, DTSyntaxError)
from dt.frontend.api import (RVar, SIn, Var, In, Func, ceil, cos, dim_len, eq, erf, exp, exp2, floor, log,
                             log2, maximum, minimum, ne, pow, program, rdot, reshape, rmax, rmin, rsqrt, rsum,
                             sigmoid, sin, sqrt, tanh, where)
from dt.frontend.api import abs_ as abs  # noqa: A004 - the DT function's name
from dt.runtime import Program, load, loads
from dt import debug  # breakpoints, tracing and sanitizers on the interpreter

__version__ = "0.1.0"

__all__ = ["Program", "load", "loads", "program", "Func", "In", "SIn", "Var", "RVar", "rsum", "rmax", "rmin",
           "rdot", "exp", "exp2", "log", "log2", "sqrt", "rsqrt", "sigmoid", "tanh", "erf", "sin", "cos",
           "floor", "ceil", "maximum", "minimum", "pow", "where", "eq", "ne", "reshape", "dim_len",
           "DTError", "DTSyntaxError", "DTNameError", "DTDimensionError", "DTScheduleError", "DTExtentError",
           "DTInputError", "DTBackendError"]
