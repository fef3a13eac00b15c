"""DT text → the frontend objects of dt.frontend.api → an algorithm-IR Program."""
from __future__ import annotations

import difflib
import math
from functools import lru_cache
from pathlib import Path

import lark

from dt.dtypes import ALL
from dt.errors import DTNameError, DTSyntaxError, Loc
from dt.frontend import api
from dt.ir import algorithm as A
from dt.ir.ops import FUNCTIONS, REDUCTIONS, SCANS

_TERMINALS = {"SEMICOLON": "';'", "LSQB": "'['", "RSQB": "']'", "LPAR": "'('", "RPAR": "')'", "COMMA": "','",
              "EQUAL": "'='", "ASSIGN": "'=' or '+='", "DOT": "'.'", "COLON": "':'", "SLASH": "'/'", "NAME": "a name", "INT": "an integer",
              "FLOAT": "a number", "DECL_KIND": "a declaration", "COMPARE": "a comparison", "ADD": "'+' or '-'",
              "STAR": "'*'", "POW": "'**'", "MINUS": "'-'", "PLUS": "'+'", "$END": "the end of the file"}
_SCAN_OPS = {r.function: r.name for r in SCANS.values()}  # cumsum -> sum
_FUNCTIONS = set(FUNCTIONS) | {r.function for r in REDUCTIONS.values()} | set(_SCAN_OPS) | {"reshape", "len", "cast"}


@lru_cache(maxsize=1)
def _parser() -> lark.Lark:
    grammar = (Path(__file__).parent / "grammar.lark").read_text()
    return lark.Lark(grammar, parser="lalr", propagate_positions=True, maybe_placeholders=True)


_PRODUCTS = {"mul": "*", "div": "/", "floordiv": "//", "mod": "%"}


class _Source:
    def __init__(self, text: str, file: str):
        # Lines end at '\n' only, as lark counts them (line endings are normalised first): a form
        # feed, U+2028 or U+0085 in a comment must not shift the line of every later excerpt.
        self.lines = text.split("\n")
        if self.lines[-1] == "":
            self.lines.pop()
        self.file = file

    def loc(self, line: int, col: int, length: int = 1) -> Loc:
        text = self.lines[line - 1] if 0 < line <= len(self.lines) else ""
        return Loc(self.file, line, col, max(length, 1), text)

    def of(self, node) -> Loc:
        if isinstance(node, lark.Token):
            return self.loc(node.line, node.column, len(node))
        meta = node.meta
        length = meta.end_column - meta.column if meta.line == meta.end_line else 1
        return self.loc(meta.line, meta.column, length)


def normalise_source(text: str) -> str:
    """DT source as the parser reads it: without a UTF-8 byte-order mark, and with Windows (CR LF)
    and old Mac (CR) line endings made LF, so that lines are numbered as an editor numbers them."""
    return text.removeprefix("\ufeff").replace("\r\n", "\n").replace("\r", "\n")


def parse(text: str, file: str = "<dt>", name: str | None = None, parsed: str | None = None) -> A.Program:
    """`parsed`: a start of `text` that ends after a statement and a newline and was parsed before
    (dt tune's thousands of schedules of one algorithm): its parse tree is reused."""
    text = normalise_source(text)
    src = _Source(text, file)
    try:
        tree = _tree_after(parsed, text) if parsed and text.startswith(parsed) else None
        tree = tree or _parser().parse(text)
    except lark.UnexpectedInput as e:
        raise _syntax_error(e, src, text) from None
    return _Builder(src, text).build(tree, name or Path(file).stem)


@lru_cache(maxsize=4)
def _prefix_tree(prefix: str) -> lark.Tree | None:
    try:
        return _parser().parse(prefix)
    except lark.UnexpectedInput:
        return None


def _tree_after(prefix: str, text: str) -> lark.Tree | None:
    """text's parse tree from prefix's (cached) and the rest's, the rest's positions moved past
    the prefix; None where either part alone does not parse (the whole text then says why)."""
    start = _prefix_tree(prefix) if prefix.endswith("\n") else None
    if start is None:
        return None
    try:
        rest = _parser().parse(text[len(prefix):])
    except lark.UnexpectedInput:
        return None
    lines, chars = prefix.count("\n"), len(prefix)
    for node in rest.iter_subtrees():
        if not node.meta.empty:
            node.meta.line += lines
            node.meta.end_line += lines
            node.meta.start_pos += chars
            node.meta.end_pos += chars
        node.children = [_moved(c, lines, chars) if isinstance(c, lark.Token) else c for c in node.children]
    return lark.Tree(start.data, start.children + rest.children, start.meta)


def _moved(token: lark.Token, lines: int, chars: int) -> lark.Token:
    return token if token.line is None else lark.Token(
        token.type, token.value, token.start_pos + chars, token.line + lines, token.column,
        token.end_line + lines, token.end_column, token.end_pos + chars)


def _syntax_error(e: lark.UnexpectedInput, src: _Source, text: str) -> DTSyntaxError:
    line, col = getattr(e, "line", 0) or 1, getattr(e, "column", 0) or 1
    if isinstance(e, lark.UnexpectedCharacters):
        char = text[e.pos_in_stream] if e.pos_in_stream < len(text) else ""
        return DTSyntaxError(f"unexpected character {char!r}", src.loc(line, col), "remove or replace it")
    token = getattr(e, "token", None)
    expected = sorted(_TERMINALS.get(t, t) for t in (getattr(e, "expected", None) or ()))
    if "';'" in expected:  # after a call: `g.update().block(...)` may go on, but a missing ';' is the likely slip
        expected = [t for t in expected if t != "'.'"]
    if token is None or token.type == "$END":
        # Just after the last code in the file, where the missing text goes (blank lines and
        # comments after it would leave the caret under nothing).
        code = [(n, len(t.split("#")[0].rstrip())) for n, t in enumerate(src.lines, 1) if t.split("#")[0].strip()]
        last, end = code[-1] if code else (1, 0)
        loc = src.loc(last, end + 1)
        return DTSyntaxError("unexpected end of file", loc,
                             f"expected {' or '.join(expected)}" if expected else "the last statement is unfinished")
    shown = str(token)
    hint = f"expected {' or '.join(expected[:6])}" if expected else None
    if "';'" in expected:
        hint = "a statement ends with ';' — is one missing before this?"
    return DTSyntaxError(f"unexpected {shown!r}", src.loc(token.line, token.column, len(shown)), hint)


class _Builder:
    def __init__(self, src: _Source, text: str):
        self.src = src
        self.text = text
        self.objects: list[api._Named] = []
        self.table: dict[str, api._Named] = {}
        self.orphan_funcs: list[A.FuncDef] = []
        self.orphan_schedule: list[A.ScheduleCall] = []

    def build(self, tree, name: str) -> A.Program:
        statements = list(tree.children)
        kinds = {"Func": api.Func, "In": api.In, "SIn": api.SIn, "Var": api.Var, "RVar": api.RVar}
        for st in statements:
            if st.data == "declaration":
                kind = str(st.children[0])
                for n in st.children[1:]:
                    obj = kinds[kind](self._name(n), loc=self.src.of(n))
                    self.objects.append(obj)
                    self.table.setdefault(obj.name, obj)
        for st in statements:
            if st.data == "definition":
                self._definition(st)
            elif st.data == "schedule_call":
                self._schedule(st)
        program = api.build(self.objects, name=name, source=self.text, file=self.src.file)
        funcs = program.funcs + tuple(self.orphan_funcs)
        schedule = tuple(sorted(program.schedule + tuple(self.orphan_schedule), key=lambda c: (c.loc.line, c.loc.col)))
        return A.Program(name, program.declarations, funcs, schedule, self.text, self.src.file)

    @staticmethod
    def _name(node) -> str:
        return str(node.children[0])

    def _definition(self, st):
        name_node, *index_nodes, assign, expr_node = st.children
        index_nodes = [n for n in index_nodes if n is not None]
        name = self._name(name_node)
        loc = self.src.of(name_node)
        expr = self._expr(expr_node)
        target = self.table.get(name)
        if str(assign) == "+=" or any(n.data != "name_ref" for n in index_nodes):
            if not isinstance(target, api.Func):
                raise DTNameError(f"'{name}' is updated ({name}[...] {assign} ...) but it is not a Func"
                                  if name in self.table else f"unknown name '{name}'", loc,
                                  f"declare `Func {name};` and define it over its dimensions first: "
                                  f"{name}[x, y] = 0.0;")
            subscripts = tuple(self._expr(n) for n in index_nodes)
            target.update_define(subscripts, expr, accumulate=str(assign) == "+=", loc=loc)
            return
        dims = tuple(self._name(n.children[0]) for n in index_nodes)
        if isinstance(target, api.Func):
            target.define(tuple(self._dim_obj(n.children[0]) for n in index_nodes), expr, loc=loc)
        else:
            self.orphan_funcs.append(A.FuncDef(name, dims, expr, loc))

    def _dim_obj(self, node):
        obj = self.table.get(self._name(node))
        if isinstance(obj, api.Var):
            return obj
        return api.Var(self._name(node), loc=self.src.of(node))  # undeclared: check() reports it by name

    def _schedule(self, st):
        func_node, *rest = [c for c in st.children if c is not None]
        calls = [i for i, c in enumerate(rest) if c.data == "name"]
        func = self._name(func_node)
        if len(calls) == 2:  # g.update(i).primitive(...): update i's schedule
            first, args = rest[0], rest[1:calls[1]]
            if self._name(first) != "update" or len(args) > 1 or (args and args[0].data != "int_arg"):
                raise DTSyntaxError(f"'{func}.{self._name(first)}(...)' is not a schedule stage", self.src.of(first),
                                    f"schedule an update with {func}.update().block(...) (update i: {func}.update(i))")
            func = A.update_name(func, int(args[0].children[0]) if args else 0)
            rest = rest[calls[1]:]
        prim_node, *arg_nodes = rest
        args, arg_locs = [], []
        for a in arg_nodes:
            arg_locs.append(self.src.of(a))
            if a.data == "dim_size":
                args.append((self._name(a.children[0]), int(a.children[1])))
            elif a.data == "dim_split":
                args.append((self._name(a.children[0]), self._name(a.children[1]), int(a.children[2])))
            elif a.data == "name_arg":
                args.append(self._name(a.children[0]))
            else:
                args.append(int(a.children[0]))
        call = A.ScheduleCall(func, self._name(prim_node), tuple(args), self.src.of(st), tuple(arg_locs))
        target = self.table.get(self._name(func_node))
        if isinstance(target, api.Func):
            target.schedule.append(call)
        else:
            self.orphan_schedule.append(call)

    def _expr(self, node) -> A.Expr:
        return A.recurse(self._expr_step, node)  # expressions nest deeper than Python recursion goes

    def _expr_step(self, node):
        """The expression of lark node `node`; yields each subexpression to convert (A.recurse)."""
        if isinstance(node, lark.Token):
            raise AssertionError(f"unexpected token {node!r}")
        loc = self.src.of(node)
        kind = node.data
        if kind == "number":
            token = node.children[0]
            return A.Num(float(token), loc, integer=token.type == "INT")
        if kind in ("sum", "comparison"):
            a, op, b = node.children
            a = yield a
            return A.Binary(str(op), a, (yield b), self.src.of(op))
        if kind in _PRODUCTS:
            a, b = node.children
            a = yield a
            return A.Binary(_PRODUCTS[kind], a, (yield b), loc)
        if kind == "power":
            a, op, b = node.children
            a = yield a
            return A.Binary("pow", a, (yield b), self.src.of(op))
        if kind == "neg":
            return A.Unary("neg", (yield node.children[0]), loc)
        if kind == "unary":  # unary plus
            return (yield node.children[0])
        if kind == "name_ref":
            return self._name_ref(node.children[0])
        if kind == "access":
            name_node, *index_nodes = node.children
            name = self._name(name_node)
            obj = self.table.get(name)
            access_kind = "func" if isinstance(obj, api.Func) else "input"
            if isinstance(obj, (api.Var, api.SIn)):
                raise DTNameError(f"'{name}' is declared as {obj.kind} and cannot be indexed", loc,
                                  "only input tensors (In) and Funcs are indexed")
            subscripts = []
            for n in index_nodes:
                if n is not None:
                    subscripts.append((yield n))
            return A.Access(name, access_kind, tuple(subscripts), loc)
        if kind == "call":
            return (yield from self._call(node, loc))
        raise AssertionError(f"unknown node {kind}")

    def _name_ref(self, node) -> A.Expr:
        name, loc = self._name(node), self.src.of(node)
        obj = self.table.get(name)
        if isinstance(obj, api.Var):
            return A.DimRef(name, loc)
        if isinstance(obj, (api.In, api.Func)):
            raise DTNameError(f"'{name}' is a tensor and needs indices here", loc,
                              f"write {name}[...] with its dimensions")
        if obj is None and name in _FUNCTIONS:
            raise DTSyntaxError(f"'{name}' is a function and needs arguments", loc, f"write {name}(...)")
        if obj is None and name == "inf":  # infinity, unless declared as something else: -inf masks a score
            return A.Num(math.inf, loc)
        return A.ScalarRef(name, loc)  # SIn, or unknown: check() reports it

    def _call(self, node, loc):
        name_node, *arg_nodes = node.children
        arg_nodes = [a for a in arg_nodes if a is not None]
        fn = self._name(name_node)
        fn_loc = self.src.of(name_node)

        def arity(n):
            if len(arg_nodes) != n:
                raise DTSyntaxError(f"{fn} takes {n} argument(s), got {len(arg_nodes)}", loc)

        def dim_arg(a):
            if not (not isinstance(a, lark.Token) and a.data == "name_ref"):
                what = "a dtype name, e.g. cast(x, i64)" if fn == "cast" else "a dimension name"
                raise DTSyntaxError(f"the last argument of {fn} must be {what}", self.src.of(a))
            return self._name(a.children[0]), self.src.of(a)

        op = FUNCTIONS.get(fn)
        if op is not None:
            arity(op.arity)
            args = []
            for a in arg_nodes:
                args.append((yield a))
            return A.elementwise(fn, tuple(args), fn_loc)
        if fn in ("rsum", "rmax", "rmin", "rargmax", "rargmin"):
            arity(2)
            dim, dim_loc = dim_arg(arg_nodes[1])
            return A.Reduce(fn[1:], ((yield arg_nodes[0]),), dim, fn_loc, dim_loc)
        if fn == "rargtopk":
            arity(3)
            dim, dim_loc = dim_arg(arg_nodes[1])
            slot, _ = dim_arg(arg_nodes[2])
            return A.Reduce("argtopk", ((yield arg_nodes[0]),), dim, fn_loc, dim_loc, slot=slot)
        if fn in _SCAN_OPS:
            arity(2)
            dim, dim_loc = dim_arg(arg_nodes[1])
            return A.Scan(_SCAN_OPS[fn], (yield arg_nodes[0]), dim, fn_loc, dim_loc)
        if fn == "rdot":
            arity(3)
            dim, dim_loc = dim_arg(arg_nodes[2])
            a = yield arg_nodes[0]
            return A.Reduce("dot", (a, (yield arg_nodes[1])), dim, fn_loc, dim_loc)
        if fn == "cast":
            arity(2)
            target, target_loc = dim_arg(arg_nodes[1])
            if target not in ALL:
                raise DTSyntaxError(f"'{target}' is not a dtype", target_loc, f"cast to one of {', '.join(ALL)}")
            return A.Cast((yield arg_nodes[0]), target, fn_loc)
        if fn == "len":
            arity(1)
            dim, dim_loc = dim_arg(arg_nodes[0])
            return A.Len(dim, dim_loc)
        if fn == "reshape":
            if len(arg_nodes) < 2:
                raise DTSyntaxError("reshape takes an expression and its layout, e.g. reshape(s[x], x, 1)", loc)
            inner = yield arg_nodes[0]
            layout = []
            for a in arg_nodes[1:]:
                if not isinstance(a, lark.Token) and a.data == "number" and str(a.children[0]) == "1":
                    continue
                layout.append(dim_arg(a)[0])
            api.check_reshape(inner, tuple(layout), loc)
            return inner
        close = difflib.get_close_matches(fn, sorted(_FUNCTIONS), n=1)
        raise DTNameError(f"unknown function '{fn}'", fn_loc,
                          f"did you mean {close[0]}?" if close else f"the functions are: {', '.join(sorted(_FUNCTIONS))}")
