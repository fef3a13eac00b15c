"""The tile expressions of one kernel → Triton expressions: `OPS`, what each op of dt.ir.ops
becomes, and `ExpressionRenderer`, the part of the kernel renderer (kernel.py) that writes each
scheduled-IR expression node by the method named after it (dt.backends.render), reading the
names and plans the kernel renderer makes (offsets, masks, tensor arguments, layout).
Integer tiles and reads at computed indices follow integers.py's rules on Triton's typing."""
from __future__ import annotations

import math
from dataclasses import dataclass

from dt.backends.pysource import Writer, number
from dt.backends.render import Renderer, supported_ops
from dt.backends.triton.integers import needs_conversion, operand_dtype, positive, weak
from dt.dtypes import is_integer
from dt.ir import scheduled as S

TL_DTYPE = {"f32": "tl.float32", "f16": "tl.float16", "bf16": "tl.bfloat16", "bool": "tl.int1", "i8": "tl.int8",
            "u8": "tl.uint8", "i16": "tl.int16", "i32": "tl.int32", "i64": "tl.int64",
            "f8e4m3": "tl.float8e4nv", "f8e5m2": "tl.float8e5"}  # torch's float8_e4m3fn and float8_e5m2

INF, NAN = 'float("inf")', 'float("nan")'  # as Triton's sources spell them
LOG2E = S.Literal(math.log2(math.e), "f32")
# Python precedence levels of what the renderer writes (higher binds tighter).
COMPARISON, AND, SUM, PRODUCT, UNARY_PREC, ATOM = 2, 3, 4, 5, 6, 7


@dataclass(frozen=True)
class Infix:
    """A Python operator between the operands, of `precedence`."""
    symbol: str
    precedence: int


@dataclass(frozen=True)
class Prefix:
    symbol: str


@dataclass(frozen=True)
class Helper:
    """A call of one of the module's helper functions (device_helpers.py)."""
    name: str


@dataclass(frozen=True)
class Division:
    """Floor division or its remainder, as Python's: Triton's own operator where it agrees (Python
    numbers, unsigned integers, a dividend never negative by a positive divisor), else the
    helper for integers and the format string for floats."""
    symbol: str
    helper: str
    floats: str


# What each op of dt.ir.ops becomes: a format string over the operands ({0}, {1}, ...), an
# operator, or a helper call. NaN propagates through maximum/minimum as in NumPy (Triton's default
# leaves it unspecified).
OPS = {
    "neg": Prefix("-"), "exp": "tl.exp({0})", "exp2": "tl.exp2({0})", "log": "tl.log({0})", "log2": "tl.log2({0})",
    "sqrt": "tl.sqrt({0})", "rsqrt": "tl.rsqrt({0})", "sigmoid": "tl.sigmoid({0})", "tanh": Helper("_tanh"),
    "abs": "tl.abs({0})", "erf": "tl.erf({0})", "sin": "tl.sin({0})", "cos": "tl.cos({0})",
    "floor": "tl.floor({0})", "ceil": "tl.ceil({0})",
    "softplus": "(tl.maximum({0}, 0.0) + tl.log(1.0 + tl.exp(-tl.abs({0}))))",
    "+": Infix("+", SUM), "-": Infix("-", SUM), "*": Infix("*", PRODUCT), "/": Infix("/", PRODUCT),
    "//": Division("//", "_floor_divide", "tl.floor({0} / {1})"),
    "%": Division("%", "_remainder", "{0} - {1} * tl.floor({0} / {1})"),
    "maximum": "tl.maximum({0}, {1}, propagate_nan=tl.PropagateNan.ALL)",
    "minimum": "tl.minimum({0}, {1}, propagate_nan=tl.PropagateNan.ALL)", "pow": Helper("_pow"),
    **{op: Infix(op, COMPARISON) for op in ("<", "<=", ">", ">=", "==", "!=")},
    "where": "tl.where({0}, {1}, {2})",
    "not": Prefix("~"), "and": Infix("&", AND),
}
REDUCE = {"sum": "tl.sum", "max": Helper("_max_with_nan"), "min": Helper("_min_with_nan")}
# a scan: a tl function, or the helper an associative_scan combines with
SCAN = {"sum": "tl.cumsum", "prod": "tl.cumprod", "max": Helper("_max_with_nan"), "min": Helper("_min_with_nan")}
SUPPORTED_OPS = supported_ops(OPS, (*REDUCE, "dot"), SCAN)


def scores(kernel: S.Kernel, pipeline: S.Pipeline) -> frozenset[str]:
    """The tile variables of the kernel that hold products it computes (an attention's scores:
    assigned only a tl.dot's accumulator, or one scaled by a scalar or kept where a condition
    holds and -inf elsewhere), in a program with 16-bit float inputs: their float32 exp(scores - b) render as
    exp2 (ExpressionRenderer.shifted_exp). Scaling each side by log2(e) rounds relative to the
    scores' size, not to the difference's: about 1e-5 of the result for scores near 100, far
    below what 16-bit inputs resolve. Not for values read from memory: a mask constant
    (-1e30, finfo.min) minus itself is 0 only when both sides round alike, which the fused
    multiply-add does not (a paged decode's fully masked chunk gave inf, then NaN)."""
    if not any(t.dtype in ("f16", "bf16") for t in pipeline.inputs):
        return frozenset()
    names: set[str] = set()
    others: set[str] = set()  # assigned something else too: not scores
    for s in S.walk_statements(kernel.body):
        if isinstance(s, S.Assign):
            if isinstance(s.value, S.Dot) or _scores(s.value, names):
                names.add(s.name)
            elif not isinstance(s.value, S.Full):  # (an accumulator starts from zeros)
                others.add(s.name)
    return frozenset(names - others)


def _scores(e: S.TExpr, names) -> bool:
    """e is one of `names`, scaled by a scalar, or kept where a condition holds and -inf elsewhere."""
    if isinstance(e, S.Where):
        return S.is_minus_inf(e.b) and _scores(e.a, names)
    if isinstance(e, S.Binary) and e.op in ("*", "/") and not e.b.dims:
        e = e.a
    return isinstance(e, S.Ref) and e.name in names


def _times_log2e(e: S.TExpr) -> S.TExpr:
    """e * log2(e), the factor taken into a scalar scale, or applied before a broadcast; -inf
    where-d lanes stay -inf."""
    if isinstance(e, S.Where) and S.is_minus_inf(e.b):
        return S.Where(e.cond, _times_log2e(e.a), e.b)
    if isinstance(e, S.Binary) and e.op in ("*", "/") and not e.b.dims:
        return S.Binary("*", e.a, S.Binary(e.op, LOG2E, e.b))
    if isinstance(e, S.Expand) and e.x.dims:
        return S.Expand(S.Binary("*", e.x, LOG2E), e.target)
    return S.Binary("*", e, LOG2E)


class ExpressionRenderer(Renderer):
    """Renders the tile expressions of the kernel `KernelRenderer` (kernel.py) plans."""
    backend = "triton"
    OPS = OPS

    def prec(self, e: S.TExpr) -> int:
        if _unchanged(e):
            return self.prec(e.x)
        how = self.OPS.get(e.op) if isinstance(e, (S.Unary, S.Binary)) else None
        if isinstance(how, Division):
            how = Infix("%", PRODUCT) if self.rotated_back(e) is not None else self.division(e)
        if isinstance(how, Infix):
            return how.precedence
        if isinstance(how, Prefix):
            return UNARY_PREC
        if isinstance(e, S.Binary) and e.op == "%" and not is_integer(e.dtype):
            return SUM
        if isinstance(e, S.Literal) and e.value < 0:
            return UNARY_PREC
        if isinstance(e, S.Dot) and not self._tensor_core(e) and e.acc is not None:
            return SUM
        return ATOM

    def sub(self, e: S.TExpr, loc, minimum: int) -> str:
        """e rendered as an operand that binds at least as tightly as `minimum`."""
        return atom(self.texpr(e, loc), self.prec(e), minimum)

    def Literal(self, e: S.Literal, loc=None) -> str:
        if is_integer(e.dtype) and e.dtype != "bool":
            return str(int(e.value))
        return number(e.value, INF, NAN)

    def Param(self, e: S.Param, loc=None) -> str:
        name = self.scalars[e.name]
        if e.name in self.integer_scalars and e.dtype != "i64":  # an integer scalar used as a float
            return f"{name}.to({TL_DTYPE[e.dtype]})"
        return name

    def Extent(self, e: S.Extent, loc=None) -> str:
        size = self.names.ir(S.size_name(e.dim))
        return size if is_integer(e.dtype) else f"float({size})"

    def IndexOf(self, e: S.IndexOf, loc=None) -> str:
        # The offsets are int64 (they address tensors of 2**31 elements and more): as an int32
        # they are their low half, which costs no instruction.
        offsets = self.offsets[e.axis]
        return offsets if e.dtype == "i64" else f"{offsets}.to({TL_DTYPE[e.dtype]})"

    def Index(self, e: S.Index, loc=None) -> str:
        if e.dtype == "i64" and e.value in self.scalar_axis_index:  # a scalar axis's index (h_pid, h_index)
            return self.scalar_axis_index[e.value]
        if e.dtype == "i64" and self.layout.is_int64(e.value):  # from the program id: int64 already
            text = self.index(e.value)
            return text if text.isidentifier() else f"({text})"
        return f"tl.cast({self.index(e.value)}, {TL_DTYPE[e.dtype]})"

    def Ref(self, e: S.Ref, loc=None) -> str:
        return self.names.ir(e.name)

    def Load(self, e: S.Load, loc=None) -> str:
        if e not in self.tma.box_descriptor:
            return self.pointer_load(e)
        return f"({self.box_load(e)} if {self.use_tma} else {self.pointer_load(e)})"

    def Gather(self, e: S.Gather, loc=None) -> str:
        """tensor[subscripts]: pointer = base + sum(subscript * stride), masked where a subscript
        leaves [0, extent), so that no lane touches memory outside the tensor."""
        ptr, strides = self.tensor_args[e.tensor]
        terms, conditions = [ptr], []  # (text, whether a comparison), axis by axis
        for i, (sub, stride, extent) in enumerate(zip(e.subscripts, strides, e.extents)):
            axis = _axis_of(sub)
            if axis is not None:  # a dimension's own offsets (int64), as a Load's
                terms.append(f"{self.spread(self.offsets[axis], axis, e.order)} * {stride}")
                if extent == S.IVar(S.size_name(self.layout.axes[axis].axis.dim)):
                    # the axis's mask keeps it inside that extent, as for a Load (lanes past it are
                    # never stored nor reduced, so they may read 0)
                    if axis in self.masks:
                        conditions.append((self.spread(self.masks[axis], axis, e.order), False))
                else:
                    conditions.append((f"{self.spread(self.offsets[axis], axis, e.order)} < {self.index(extent)}",
                                       True))
                continue
            text = self.gather_indices.get((id(e), i)) or self.sub(sub, loc, ATOM)
            if weak(sub):  # a Python number: the product is too
                if _constant(sub) != 0:
                    terms.append(f"{text} * {stride}")
            else:
                # Strides are constexprs, int32 where they fit: an int32 subscript times one is
                # int32, and a row of a [128256, 16384] embedding table (2.1e9 elements) overflows
                # it. Widened first, it costs nothing: sign extension, product and address add
                # make one mad.wide.s32 on sm_90, as the 64-bit address needs anyway.
                terms.append(f"{text if sub.dtype == 'i64' else text + '.to(tl.int64)'} * {stride}")
            if not self.signs.nonnegative(sub):
                conditions.append((f"{text} >= 0", True))
            conditions.append((f"{text} < {self.index(extent)}", True))
        args = " + ".join(terms)
        if conditions:
            mask = conditions[0][0] if len(conditions) == 1 else " & ".join(
                f"({text})" if comparison else text for text, comparison in conditions)
            args += f", mask={mask}, other={self.zero(e.tensor)}"
        loaded = f"tl.load({args})"
        return loaded if self.pipeline.tensor(e.tensor).dtype == e.dtype else f"{loaded}.to({TL_DTYPE[e.dtype]})"

    def name_gather_subscripts(self, value: S.TExpr, w: Writer, loc):
        """Give each computed subscript of the gathers in `value` a name of its own, `{tensor}_{axis}_index`
        (assigned before the statement: it appears in the pointer and the mask), inner gathers first."""
        for node in reversed(list(S.walk_texpr(value))):
            if not isinstance(node, S.Gather):
                continue
            labels = self.axis_labels(node.tensor)
            for i, sub in enumerate(node.subscripts):
                if _axis_of(sub) is None and not weak(sub) and not isinstance(_unexpanded(sub), (S.Ref, S.Param)):
                    name = self.names.fresh(f"{node.tensor}_{labels[i]}_index")
                    w.line(f"{name} = {self.texpr(sub, loc)}")
                    self.gather_indices[(id(node), i)] = name

    def zero(self, tensor: str) -> str:
        """What a masked lane of `tensor` loads."""
        return "0" if is_integer(self.pipeline.tensor(tensor).dtype) else "0.0"

    def Unary(self, e: S.Unary, loc=None) -> str:
        if e.op == "exp" and e.dtype == "f32" and isinstance(e.x, S.Binary) and e.x.op == "-" \
                and _scores(e.x.a, self.scores):
            return self.shifted_exp(e.x, loc)
        how = self.op(e.op)
        if isinstance(how, Prefix):
            return f"{how.symbol}{self.sub(e.x, loc, UNARY_PREC)}"
        return self.apply(how, self.texpr(e.x, loc))

    def shifted_exp(self, difference: S.Binary, loc) -> str:
        """exp(a - b) as exp2(a * log2(e) - b * log2(e)): one fused multiply-add a lane before
        the exp2 unit, where tl.exp(a - b) subtracts, then scales by log2(e) itself (an online
        softmax's exp(scores - max): 7-16% of flash attention's time on an H100). A scalar scale
        of the scores takes log2(e) into it; a row's b is scaled before it is broadcast."""
        self.exp2_used = True
        exponent = S.Binary("-", _times_log2e(difference.a), _times_log2e(difference.b))
        return f"tl.exp2({self.texpr(exponent, loc)})"

    def Binary(self, e: S.Binary, loc=None) -> str:
        how = self.op(e.op)
        dividend = self.rotated_back(e)
        if dividend is not None:
            return f"{self.sub(dividend, loc, PRODUCT)} % {self.sub(e.b, loc, PRODUCT + 1)}"
        if isinstance(how, Division):
            how = self.division(e)
        if isinstance(how, Infix):
            p = how.precedence
            # Left-associative; comparisons do not chain, so both sides of one need parentheses.
            left, right = self.operands(e, (e.a, e.b), loc, (p + 1 if p == COMPARISON else p, p + 1))
            return f"{left} {how.symbol} {right}"
        if isinstance(how, str) and is_integer(e.dtype) and e.op in ("maximum", "minimum"):
            how = f"tl.{e.op}({{0}}, {{1}})"  # NaN propagation concerns floats only
        # a float floor division or remainder repeats or nests its operands
        minimum = ATOM if e.op in ("//", "%") and isinstance(how, str) else 0
        return self.apply(how, *self.operands(e, (e.a, e.b), loc, (minimum, minimum)))

    def rotated_back(self, e: S.TExpr) -> S.TExpr | None:
        """For (x - c) % m of integers, x and c never negative, m positive (a rotation back: dt.grad's
        `(d - len(d) // 2) % len(d)`): the dividend x + (m - c % m), which leaves the remainder as it
        is and is never negative, so that Triton's own `%` computes it. Triton then sees a
        contiguous index tile and loads it in vectors, where _remainder's select hides that
        (rotate-half RoPE's backward in bf16 ran at a quarter of Liger's speed on scalar loads).
        None for any other expression."""
        x = e.a if isinstance(e, S.Binary) else None
        if not (e.op == "%" and is_integer(e.dtype) and positive(e.b) and isinstance(x, S.Binary) and x.op == "-"
                and self.signs.nonnegative(x.a) and self.signs.nonnegative(x.b)):
            return None
        return S.Binary("+", x.a, S.Binary("-", e.b, S.Binary("%", x.b, e.b)))

    def division(self, e: S.Binary):
        """How floor division or remainder `e` renders (dt.ir.ops: Python's, on every dtype)."""
        how: Division = self.OPS[e.op]
        if not is_integer(e.dtype):
            return how.floats
        if weak(e) or operand_dtype(e) == "u8" or (self.signs.nonnegative(e.a) and positive(e.b)):
            return Infix(how.symbol, PRODUCT)
        return Helper(how.helper)

    def operands(self, e: S.Binary | S.Where, xs, loc, minimums) -> list[str]:
        """The operands' text, each converted to the dtype `e` computes in where Triton would
        compute in another (dt/backends/triton/integers.py)."""
        dtype = operand_dtype(e)
        texts = []
        for x, minimum in zip(xs, minimums):
            if dtype is not None and needs_conversion(x, dtype, [o for o in xs if o is not x]):
                texts.append(atom(f"{self.sub(x, loc, ATOM)}.to({TL_DTYPE[dtype]})", ATOM, minimum))
            else:
                texts.append(self.sub(x, loc, minimum))
        return texts

    def Where(self, e: S.Where, loc=None) -> str:
        a, b = self.operands(e, (e.a, e.b), loc, (0, 0))
        return self.apply(self.op("where"), self.texpr(e.cond, loc), a, b)

    def apply(self, how, *operands: str) -> str:
        """A call an OPS entry writes: a helper function of the module's, or a format string."""
        if isinstance(how, Helper):
            return f"{self.helper(how)}({', '.join(operands)})"
        return how.format(*operands)

    def helper(self, how: Helper) -> str:
        """The module's name for a helper function, which the module then defines."""
        self.helpers_used.add(how.name)
        return self.helpers[how.name]

    def Expand(self, e: S.Expand, loc=None) -> str:
        x_dims = e.x.dims
        if not x_dims:  # a scalar: a tile of ones along every target axis
            return f"tl.full({(1,) * len(e.target)}, {self.texpr(e.x, loc)}, {TL_DTYPE[e.x.dtype]})"
        own = [d for d in e.target if d in x_dims]
        perm = [x_dims.index(d) for d in own]
        inner = self.sub(e.x, loc, ATOM)
        if perm != list(range(len(perm))):
            inner = f"tl.trans({inner})" if len(perm) == 2 else f"tl.permute({inner}, {tuple(perm)})"
        if len(own) == len(e.target):
            return inner
        return f"{inner}[{', '.join(':' if d in x_dims else 'None' for d in e.target)}]"

    def BroadcastTo(self, e: S.BroadcastTo, loc=None) -> str:
        if isinstance(e.x, S.Expand) and not e.x.x.dims:  # a scalar filling a whole tile
            value = self.texpr(e.x.x, loc)
            return f"tl.full({self.shape_text(e.dims)}, {value}, {TL_DTYPE[e.x.x.dtype]})"
        return f"tl.broadcast_to({self.texpr(e.x, loc)}, {self.shape_text(e.dims)})"

    def Mask(self, e: S.Mask, loc=None) -> str:
        if e.axis in self.masks:
            return self.masks[e.axis]
        return f"tl.full({self.shape_text((e.axis,))}, 1, tl.int1)"

    def Full(self, e: S.Full, loc=None) -> str:
        if e.value == 0.0 and math.copysign(1.0, e.value) > 0:  # -0.0 keeps its sign (a scan's carry)
            return f"tl.zeros({self.shape_text(e.axes)}, {TL_DTYPE[e.dtype]})"
        return f"tl.full({self.shape_text(e.axes)}, {self.Literal(S.Literal(e.value, e.dtype))}, {TL_DTYPE[e.dtype]})"

    def Cast(self, e: S.Cast, loc=None) -> str:
        if _unchanged(e):
            return self.texpr(e.x, loc)
        if weak(e.x):  # a Python number (a constexpr) has no .to
            constant = _constant(e.x)
            if is_integer(e.dtype):
                return f"tl.cast({self.texpr(e.x, loc)}, {TL_DTYPE[e.dtype]})"
            # a float: -100.0 or float(x_SIZE), which takes the dtype of the tile it meets, as a
            # compute-dtype literal does
            return self.Literal(S.Literal(constant, e.dtype)) if constant is not None else \
                f"float({self.texpr(e.x, loc)})"
        if is_integer(e.x.dtype) and e.dtype in ("f16", "bf16"):  # through f32: exact to 2**24, and right
            return f"{self.sub(e.x, loc, ATOM)}.to(tl.float32).to({TL_DTYPE[e.dtype]})"  # under the interpreter
        return f"{self.sub(e.x, loc, ATOM)}.to({TL_DTYPE[e.dtype]})"

    def Reduce(self, e: S.Reduce, loc=None) -> str:
        return self.along(REDUCE[e.op], "tl.reduce", e, loc)

    def Scan(self, e: S.Scan, loc=None) -> str:
        return self.along(SCAN[e.op], "tl.associative_scan", e, loc)

    def along(self, how, combine: str, e: S.Reduce | S.Scan, loc) -> str:
        """A reduction or scan of e.x along e.axis: a tl function, or `combine` with a helper of the
        module as the combining function."""
        x, axis = self.texpr(e.x, loc), e.x.dims.index(e.axis)
        if isinstance(how, Helper):
            return f"{combine}({x}, {axis}, {self.helper(how)})"
        return f"{how}({x}, axis={axis})"

    def Dot(self, e: S.Dot, loc=None) -> str:
        i, k, j = e.a.dims[0], e.axis, e.b.dims[1]
        a, b = self.texpr(e.a, loc), self.texpr(e.b, loc)
        acc = self.texpr(e.acc, loc) if e.acc is not None else None
        if self._tensor_core(e):
            args = [a, b] + ([acc] if acc is not None else [])
            if e.a.dtype == "f32":
                args.append(f'input_precision="{self.f32_dot}"')
            if is_integer(e.acc_dtype):  # Triton 3.6 makes f32 unless told, whatever the accumulator
                args.append(f"out_dtype={TL_DTYPE[e.acc_dtype]}")
            return f"tl.dot({', '.join(args)})"
        # Tiles under MIN_DOT: multiply-and-sum over a 3-D (i, j, k) tile in float32. The reduction
        # runs along the last axis: Triton rewrites sum(a[:, :, None] * b[None, :, :], axis=1) into a
        # tl.dot of default (TF32) precision on GPUs, which would round f32 operands.
        self.limits.check_tile((i, k, j), frozenset(), loc, "the product of a small dot")
        wide = []  # float32, or i32 for two i8 operands
        for x, text in ((e.a, a), (e.b, b)):
            text = atom(text, self.prec(x))
            wide.append(text if x.dtype == e.acc_dtype else f"{text}.to({TL_DTYPE[e.acc_dtype]})")
        product = f"tl.sum({wide[0]}[:, None, :] * tl.trans({wide[1]})[None, :, :], axis=2)"
        return product if acc is None else f"{atom(acc, self.prec(e.acc), SUM)} + {product}"


def _constant(e: S.TExpr) -> float | None:
    """The value of a literal, or of a negated one."""
    if isinstance(e, S.Unary) and e.op == "neg" and isinstance(e.x, S.Literal):
        return -e.x.value
    return e.value if isinstance(e, S.Literal) else None


def _unchanged(e: S.TExpr) -> bool:
    """Whether e is a cast of a tile to the dtype it has."""
    return isinstance(e, S.Cast) and e.x.dtype == e.dtype and not weak(e.x)


def _unexpanded(e: S.TExpr) -> S.TExpr:
    while isinstance(e, S.Expand):
        e = e.x
    return e


def _axis_of(subscript: S.TExpr) -> str | None:
    """The axis whose offsets a gather subscript is (`c` of X[c, t - j]), if it is one's."""
    inner = _unexpanded(subscript)
    return inner.axis if isinstance(inner, S.IndexOf) and is_integer(inner.dtype) else None


def atom(text: str, prec: int, minimum: int = ATOM) -> str:
    """`text`, of precedence `prec`, parenthesised unless it binds at least as tightly as `minimum`."""
    return text if prec >= minimum else f"({text})"
