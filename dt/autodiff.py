"""`dt.grad`: the gradient of a DT program, derived from its algorithm (dt.ir.grad), as a DT
program of its own — readable (`dt_source()`), reschedulable, and run by every backend.

    backward = dt.grad(prog, wrt=("A", "W"))
    grads = backward(A=a, W=w, grad_out=g)          # {"grad_A": ..., "grad_W": ...}
    forward, backward = dt.grad(prog, save=("mean", "rstd"))  # forward also returns mean and rstd
"""
from __future__ import annotations

from dt.errors import DTError
from dt.ir import algorithm as A
from dt.ir.check.names import CALL_KEYWORDS
from dt.ir.grad import schedule as grad_schedule
from dt.ir.grad.reverse import gradient_source, without_gradient


def grad(prog, wrt=None, save=(), of=None):
    """The program computing the gradients of `prog`'s outputs `of` (default: all) with respect
    to the inputs `wrt` (default: every input that is not an index): its inputs are `prog`'s,
    `grad_f` for each output f of `of` (the gradient flowing in, f's shape), and with `save` the Funcs named there; its
    outputs `grad_X` for each X of wrt. Without `save`, it recomputes every Func it reads; with
    it, returns (the forward program with the saved Funcs as extra outputs, the backward program
    reading them)."""
    from dt.runtime import loads
    checked = prog.checked
    wrt = tuple(x for x in prog.inputs if x not in checked.index_inputs) if wrt is None else name_tuple(wrt, "wrt")
    save = name_tuple(save, "save") if save else ()
    of = None if of is None else name_tuple(of, "of")
    for o in of or ():
        if o not in prog.outputs:
            raise DTError(f"'{o}' is not an output of {prog.name}", None,
                          f"name some of its outputs: {', '.join(prog.outputs)}")
    for x in wrt:
        if x not in prog.inputs:
            raise DTError(f"'{x}' is not an input of {prog.name}", None,
                          f"name some of its inputs: {', '.join(prog.inputs)}")
        if x in checked.index_inputs:
            raise DTError(f"'{x}' indexes another tensor: it has no gradient", None, f"leave '{x}' out of wrt")
    for f in checked.algorithm.values():
        if f.update is not None and f.update.target in checked.written:
            raise DTError(f"'{f.update.target}' is written by an update, which dt.grad does not differentiate through: "
                          f"the gradient would leave the update out", f.loc,
                          "differentiate the program without the update (write what it adds as a reduction), or "
                          "write this gradient by hand")
    ignored = None  # the Funcs no gradient to wrt flows through, worked out if a max is saved
    for s in save:
        if s not in checked.written:
            raise DTError(f"'{s}' is not a Func {prog.name}'s outputs need", None,
                          f"save some of: {', '.join(checked.written)}")
        if s in CALL_KEYWORDS:  # the backward reads it as an input of that name
            raise DTError(f"'{s}' cannot be saved under its name: it becomes an input of the gradient program, and a "
                          f"program call takes {s}= {CALL_KEYWORDS[s]}", checked.written[s].loc,
                          f"rename the Func (e.g. {s}_) to save it")
        expr = checked.written[s].expr
        if isinstance(expr, A.Reduce) and expr.op in ("max", "min"):
            ignored = without_gradient(checked, wrt, checked.outputs if of is None else of) if ignored is None else ignored
        if isinstance(expr, A.Reduce) and expr.op in ("max", "min") and s not in ignored:  # ties matter
            raise DTError(f"'{s}' is an r{expr.op} the outputs change with, which dt.grad does not save: its gradient "
                          f"goes to the elements equal to it, which a saved copy need not equal", checked.written[s].loc,
                          f"leave '{s}' out of save (the backward recomputes it)")
    if save and not prog.ast.source:
        raise DTError(f"save= needs {prog.name}'s DT text (it adds the saved Funcs as outputs), and a program built "
                      "with the Python API has none", None, "write the program in DT, or recompute (no save=)")
    algorithm, statements, outputs = gradient_source(checked, wrt, save, prog.name, of)
    backward = loads(algorithm + _schedule(algorithm, statements, outputs, prog.name), name=f"{prog.name}_grad")
    if not save:
        return backward
    # a saved statistic (fewer dimensions than the widest input: a row's max, sum, mean) is kept in
    # the compute dtype, as autograd keeps its statistics (float32 for bf16 inputs): the exponentials
    # and normalisations reading it back would be off by its rounding
    rank = max((r for n, r in checked.input_ranks.items() if n not in checked.index_inputs), default=0)
    extra = "".join(f"{s}.{'save' if len(checked.written[s].dims) < rank else 'compile'}();\n"
                    for s in save if s not in checked.outputs)
    source = prog.ast.source if prog.ast.source.endswith("\n") else prog.ast.source + "\n"
    try:
        forward = loads(source + extra, name=prog.name)
        forward.pipeline("f32")
    except DTError as e:
        raise DTError(f"saving {', '.join(save)} breaks {prog.name}'s schedule: {e.message}", e.loc,
                      "save Funcs its schedule computes once per element (at root, or fused at a loop they do not "
                      "run along), or recompute them (no save=)") from None
    return forward, backward


def _schedule(algorithm: str, statements: list[str], outputs: list[str], name: str) -> str:
    """The default schedule: each candidate (one statement, or a Func's shaping statements
    together) kept if the program still checks and lowers with it (dt.ir.grad.schedule lists
    them, most wanted first), then the outputs."""
    from dt.runtime import loads
    compile_lines = "".join(f"{o}.compile();\n" for o in outputs)
    def holds(schedule: str) -> DTError | None:
        try:
            loads(algorithm + schedule + compile_lines, name=name).pipeline("f32")
        except DTError as e:
            return e
        return None
    kept = ""
    for statement in statements:
        if holds(kept + statement + "\n") is None:
            kept += statement + "\n"
    if holds(kept) is not None and statements:  # fixes only taken together: every candidate at once
        together = "".join(f"{s}\n" for s in statements)
        kept = together if holds(together) is None else kept
    error = holds(kept)
    if error is not None:
        raise DTError(f"dt.grad found no schedule under which {name}'s gradient program holds: {error.message}",
                      error.loc, "report it with the program; schedule the gradient's text by hand meanwhile "
                      "(its algorithm: dt.ir.grad.reverse.gradient_source)")
    return grad_schedule.merged(kept) + compile_lines


def name_tuple(names, what: str = "") -> tuple[str, ...]:
    """One name, or several, as a tuple (wrt="A" is wrt=("A",)); `what` (wrt, save, of): each
    named once, and at least one."""
    names = (names,) if isinstance(names, str) else tuple(names)
    if not what:
        return names
    if not names:
        raise DTError(f"{what} names nothing", None, f"name at least one, or leave {what} out")
    twice = next((n for n in names if names.count(n) > 1), None)
    if twice is not None:
        raise DTError(f"{what} names '{twice}' twice", None, f"name each once: {', '.join(dict.fromkeys(names))}")
    return names
