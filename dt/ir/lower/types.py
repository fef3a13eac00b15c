"""Static types: whether each DT expression is an integer, a float or a boolean, and the dtype each
Func is stored in. Dimensions, `len`, integer constants, integer inputs and integer scalars are
integers; `+ - * // %` (and the other ops closed over integers, dt.ir.ops) of integers are
integers; an operand that is a float makes the result a float; comparisons are booleans. A Func
defined as a `cast` is stored in that dtype, one whose definition is an integer as `i64`, any
other in the dtype it is given (dt.ir.lower.dtypes.stored_dtype: its inputs').

Reductions compute in the compute dtype, integers included (their sum is a float); an
arg-reduction (rargmax, rargmin) is an integer, an index; a product of two i8 operands is an
integer (it accumulates in i32: Types.integer_dot); scans compute in the compute dtype too."""
from __future__ import annotations

from dt.dtypes import INTEGERS, is_integer
from dt.errors import DTTypeError
from dt.ir import algorithm as A
from dt.ir.ops import OPS, REDUCTIONS


class Types:
    def __init__(self, funcs: dict[str, A.FuncDef], input_dtypes: dict[str, str], scalar_dtypes: dict[str, str],
                 storage: dict[str, str], in_compute=(), compute: str | None = None, inlined=frozenset()):
        """`storage`: each Func's stored dtype (dt.ir.lower.dtypes.stored_dtype); `in_compute`: the
        Funcs stored in the `compute` dtype instead (dt.ir.lower); `inlined`: the Funcs computed
        where they are read (a product sees their definitions as its operands)."""
        self.input_dtypes = input_dtypes
        self.scalar_dtypes = scalar_dtypes  # an integer scalar's dtype ('i64'); absent: a float
        self.funcs, self.inlined = funcs, inlined
        self.func_dtypes: dict[str, str] = {}
        self._kinds: dict[int, str] = {}
        for name, f in funcs.items():  # producers first
            kind = self.kind(f.expr)
            self.func_dtypes[name] = f.expr.dtype if isinstance(f.expr, A.Cast) else \
                "i64" if kind == "int" else compute if name in in_compute else storage[name]

    def kind(self, e: A.Expr) -> str:
        """'int', 'float' or 'bool'."""
        return A.recurse(self._kind_step, e)

    def _kind_step(self, e: A.Expr):
        known = self._kinds.get(id(e))
        if known is not None:
            return known
        if isinstance(e, (A.DimRef, A.Len)):
            kind = "int"
        elif isinstance(e, A.Num):
            kind = "int" if e.integer else "float"
        elif isinstance(e, A.ScalarRef):
            kind = "int" if e.name in self.scalar_dtypes else "float"
        elif isinstance(e, A.Access):
            for s in e.subscripts:
                yield s
            dtype = self.input_dtypes.get(e.name) if e.kind == "input" else self.func_dtypes.get(e.name)
            kind = "bool" if dtype == "bool" else "int" if dtype in INTEGERS else "float"
        elif isinstance(e, A.Cast):
            yield e.x
            kind = "bool" if e.dtype == "bool" else "int" if is_integer(e.dtype) else "float"
        elif isinstance(e, A.Reduce):
            for a in e.args:
                yield a
            kind = "int" if REDUCTIONS[e.op].index or self.integer_dot(e) else "float"
        elif isinstance(e, A.Scan):
            yield e.x
            kind = "float"
        elif isinstance(e, A.Stored):
            kind = yield e.x
        else:
            kinds = []
            for c in A.children(e):
                kinds.append((yield c))
            op = OPS[e.op if isinstance(e, (A.Unary, A.Binary)) else "where"]
            if op.result == "bool":
                kind = "bool"
            else:
                operands = kinds[1:] if op.result == "branches" else kinds
                if op.integer and all(k in ("int", "bool") for k in operands) and "int" in operands:
                    kind = "int"
                elif op.result == "branches" and all(k == "bool" for k in operands):
                    kind = "bool"
                else:
                    kind = "float"
        self._kinds[id(e)] = kind
        return kind

    def stored_dtype(self, e: A.Expr) -> str | None:
        """The dtype e is read in when it is a tensor read (an input's, or a Func's as stored)."""
        if not isinstance(e, A.Access):
            return None
        return self.input_dtypes.get(e.name) if e.kind == "input" else self.func_dtypes.get(e.name)

    def integer_dot(self, e: A.Reduce) -> bool:
        """Whether e is a product of two i8 operands, multiplied as integers: each a read of a
        tensor stored as i8 or a cast to i8 (a Func stored as i8 is one: inlined, its cast)."""
        return e.op == "dot" and len(e.args) == 2 and all(map(self._int8, e.args))

    def _int8(self, e: A.Expr) -> bool:
        """Whether operand e is int8 data: through inlined Funcs (their definitions) and the wheres
        that zero what they read past their extents (an inlined q[m, k + 1])."""
        while isinstance(e, (A.Stored, A.Where)) or isinstance(e, A.Access) and e.kind == "func" and e.name in self.inlined:
            if isinstance(e, A.Where):
                if not (isinstance(e.b, A.Num) and e.b.value == 0):
                    return False
                e = e.a
            else:
                e = e.x if isinstance(e, A.Stored) else self.funcs[e.name].expr
        return e.dtype == "i8" if isinstance(e, A.Cast) else self.stored_dtype(e) == "i8"

    def check_indices(self, funcs: dict[str, A.FuncDef]):
        """Every subscript an integer now that the inputs' and scalars' dtypes are known."""
        for f in funcs.values():
            for e in A.walk(f.expr):
                if not isinstance(e, A.Access):
                    continue
                for s in e.subscripts:
                    # not under a cast: a cast to an integer makes any value an index (A[cast(B[t] * 4.0, i32)])
                    for node in A.walk(s, into=lambda n: not isinstance(n, A.Cast)):
                        if isinstance(node, A.Access) and node.kind == "input" and \
                                self.input_dtypes.get(node.name) not in INTEGERS:
                            raise DTTypeError(f"'{node.name}' indexes '{e.name}' ({e.text}) but holds "
                                              f"{self.input_dtypes.get(node.name)} values, not integers", node.loc,
                                              f"pass {node.name} as an integer tensor (int32 or int64)")
                        if isinstance(node, A.Access) and node.kind == "func" and \
                                self.func_dtypes.get(node.name) not in INTEGERS:
                            raise DTTypeError(f"Func '{node.name}' indexes '{e.name}' ({e.text}) but holds "
                                              f"{self.func_dtypes.get(node.name)} values, not integers", node.loc,
                                              f"define {node.name} as an integer (an index, or cast(..., i64))")
                        if isinstance(node, A.ScalarRef) and node.name not in self.scalar_dtypes:
                            raise DTTypeError(f"scalar '{node.name}' indexes '{e.name}' ({e.text}) but is a float",
                                              node.loc, f"pass {node.name} as a Python int")

