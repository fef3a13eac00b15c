"""Which Funcs an expression uses, and what follows from it: reachability, dependency paths, and
orders of Funcs (a depth-first walk without recursion, which names the first cycle it meets)."""
from __future__ import annotations

from dt.errors import DTDimensionError
from dt.ir import algorithm as A


def uses(e: A.Expr) -> list[A.Access]:
    return [n for n in A.walk(e) if isinstance(n, A.Access) and n.kind == "func"]


def _uses_outside(e: A.Expr, skip: set[int]) -> list[A.Access]:
    """uses(e), but not inside the subexpressions whose id is in `skip`."""
    found, stack = [], [e]
    while stack:
        node = stack.pop()
        if id(node) in skip:
            continue
        if isinstance(node, A.Access) and node.kind == "func":
            found.append(node)
        stack.extend(reversed(A.children(node)))
    return found


def updates_of(funcs) -> dict[str, list[str]]:
    """Each updated Func -> its updates (A.FuncDef.update), in the order written."""
    found: dict[str, list[str]] = {}
    for f in funcs.values():
        if f.update is not None:
            found.setdefault(f.update.target, []).append(f.name)
    return found


def depends(funcs, name: str, updates: dict[str, list[str]]) -> list[str]:
    """The Funcs `name` runs after: those it uses and their updates (a reader reads a Func updated);
    an update, also the Func it writes and its earlier updates."""
    f = funcs[name]
    found = []
    for u in uses(f.expr) + [u for s in (f.update.subscripts if f.update else ()) for u in uses(s)]:
        found += [u.name] + updates.get(u.name, [])
    if f.update is not None:
        earlier = updates.get(f.update.target, [])
        found += [f.update.target] + earlier[:earlier.index(name)]
    return found


def read_through(funcs, exprs) -> list:
    """exprs and the expressions of every Func they read, at any depth (reachable)."""
    read = reachable(funcs, {u.name for e in exprs for u in uses(e) if u.name in funcs})
    return [*exprs, *(funcs[f].expr for f in read)]


def reachable(funcs, names, stop=frozenset()) -> set[str]:
    """names, their updates and the Funcs they run after, transitively, not looking past the Funcs
    in `stop`."""
    updates = updates_of(funcs)
    seen: set[str] = set()
    stack = list(names) + [u for n in names for u in updates.get(n, [])]
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        if n not in stop:
            stack += depends(funcs, n, updates)
    return seen


def dependency_path(funcs, e: A.Expr, targets, skip=()) -> list[str] | None:
    """The shortest chain of Funcs through which e uses one of `targets` (the target last),
    leaving out the uses inside the subexpressions `skip`."""
    paths = {}
    queue = []
    for u in _uses_outside(e, {id(x) for x in skip}):
        if u.name not in paths:
            paths[u.name] = [u.name]
            queue.append(u.name)
    while queue:
        name = queue.pop(0)
        if name in targets:
            return paths[name]
        for u in uses(funcs[name].expr):
            if u.name not in paths:
                paths[u.name] = paths[name] + [u.name]
                queue.append(u.name)
    return None


def post_order(nodes, successors):
    """The nodes in depth-first post-order (each after all it reaches), without recursion:
    programs may chain thousands of Funcs. `successors(n)` yields (m, label) pairs. Returns
    (order, None), or (None, cycle) at the first cycle: [(node, label of its edge onward), ...]."""
    order, state = [], {}
    for root in nodes:
        if root in state:
            continue
        state[root] = "open"
        stack = [[root, iter(successors(root)), None]]  # node, successors left, label of the edge taken
        while stack:
            frame = stack[-1]
            step = next(frame[1], None)
            if step is None:
                stack.pop()
                state[frame[0]] = "done"
                order.append(frame[0])
                continue
            node, frame[2] = step
            if state.get(node) == "open":
                start = next(i for i, f in enumerate(stack) if f[0] == node)
                return None, [(f[0], f[2]) for f in stack[start:]]
            if node not in state:
                state[node] = "open"
                stack.append([node, iter(successors(node)), None])
    return order, None


def topological_order(defs: dict[str, A.FuncDef]) -> list[str]:
    updates = updates_of(defs)
    order, cycle = post_order(defs, lambda name: ((u, None) for u in depends(defs, name, updates)))
    if cycle is not None:
        names = [name for name, _ in cycle] + [cycle[0][0]]
        raise DTDimensionError(f"Funcs depend on each other in a cycle: {' -> '.join(names)}",
                               defs[cycle[0][0]].loc, "a Func cannot use itself, directly or through others")
    return order
