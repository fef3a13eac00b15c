"""A default schedule for a gradient program (dt.grad), derived from the forward program's:
candidate statements, most wanted first, of which dt.autodiff keeps each that the checker and
the lowering accept.

- Element-wise Funcs that are not outputs are inlined (recomputed where read: cheap, and no
  round trip through memory).
- A gradient output whose kernel hosts its rows' statistics takes a row a program, walked in
  tiles of 4096 (it walks each row twice: a row of up to 4096 is one tile, read again from
  cache). Another with the dimensions of a forward kernel's root takes that root's blocks,
  tiles, program order (`map`), warps and stages (the forward's choices, reused where the shapes
  match).
- Products (`rdot`) take tiles for the matrix units; a reduction along rows in memory one row a
  program, walked in wide tiles (64 rows a program where the rows are short: a dimension the
  forward's products keep whole, a head), also where it sums over other dimensions outside that
  walk (group norm's and conv1d's dW: a channel's row in each batch), a convolution's taps (a
  reduction the forward tiles whole in at most 16 lanes) in the tile; one across rows (a
  weight's gradient) blocks of columns walking the rows; an element-wise root a block of 1024
  along its last dimension, programs in row order.
- A product over short dimensions that only other products read over one of its dimensions
  (attention's scores, [b, h, s, s]) is inlined, recomputed in each reader's loop; its readers
  take flash tiles, and two of them over the same dimensions but their last share a kernel and
  a walk (grad_K with grad_V), as FlashAttention's backward does.
- Gradient outputs over the same dimensions share one kernel (the first's; the others are
  fused into it and stored from it: a residual's two gradients, a layernorm's dW and dBias), an
  element-wise one at its innermost loop (the same tile, from the same loads: SwiGLU's two
  gradients), a reduction at its outermost; only a kernel hosting reductions takes whole rows.
  An element-wise gradient output over the dimensions of a forward Func that the forward fused
  into another's kernel joins the kernel of the gradient output over that other's dimensions at
  the same loop, with the forward Func's tiles (RoPE's grad_K in grad_Q's, as k_out in q_out's).
  Reductions over the same dimension there walk it once, split in chunks of rows across
  programs (`split`, `compute_with`: a layernorm's dW and dBias). One over a convolution's taps
  hosts the output summing the same rows without them (conv1d's dW[c, j] hosts dB[c]).
- A reduction across rows whose dimensions are those of a kernel hosting the rows' statistics,
  but the rows (dW beside dx), sums in that kernel's walk over the rows: dx's kernel takes chunks
  of rows a program and stores each chunk's partial sums of dW (and dBias), which a second kernel
  adds up (`split`, `compute_with` over a dimension dx walks).
- A reduction read at its own indices from one kernel only is fused into it at its outermost
  loop (the row statistics of a softmax or layernorm backward, as in the forward), and stored
  there for kernels reading it at computed indices (group norm's d_rstd in d_mean's kernel,
  read by grad_X at `c // len(cg)`); one read from several stays a kernel of its own.
  Reductions over one dimension fused into one kernel share its walk where the checker allows
  (compute_with: the online softmax's max, its sum and the gradient's sum shifted by the max).
"""
from __future__ import annotations

import dataclasses
import re

from dt.ir import algorithm as A
from dt.ir.grad.flash import flash_products, flash_siblings

SHAPING = ("block", "tensorize", "map", "num_warps", "num_stages")
FLASH_ROWS, FLASH_STEP, FLASH_WARPS, FLASH_STAGES = 128, 64, 8, 3
# a row sum over a dimension the forward keeps whole in a tile (attention's d_dvsr over a head of
# 64-128): this many rows a program (one a program took 0.06 ms more at s=2048, d=128 on an H200)
SHORT_ROWS = 64
PRODUCT_TILE, PRODUCT_DEPTH, PRODUCT_WARPS, PRODUCT_STAGES = 128, 32, 8, 3
ROW_BLOCK, WALK, WALK_SCAN = 1024, 32, 1024  # an element-wise root: 1024 elements a program, as Triton's take
ROW_WALK = 1024  # a reduction along a row in memory: one row a program, walked in tiles of this
TAPS = 16  # a reduction the forward tiles whole in at most this many lanes: a convolution's taps
# a kernel hosting its rows' statistics walks each row twice (the statistics, then the gradient): one
# row a program in tiles this long, so that a row of up to 4096 is one tile, read again from cache
# (softmax's backward at 4096x4096 on an H100: 0.96-0.98x of torch.compile, 0.60x in the forward's
# 4-row, 512-wide tiles)
HOSTED_WALK, HOSTED_WARPS = 4096, 8
COLUMN_BLOCK, COLUMN_WALK = 32, 128  # across rows: blocks of 32 columns, rows walked 128 at a time
# outputs sharing a walk across rows split it in chunks of this many rows (layernorm's dW and dBias
# on an H100: 1.2-1.5x faster than the unsplit kernel walking every row with a walk each)
SIBLING_CHUNK = 2048
# a weight's gradient summed in the walk of the rows' gradient (dx's kernel): chunks of this many rows
# a program, the walk pipelined this deep (RMSNorm's and LayerNorm's backward on an H100: 1.02-1.49x
# the best of Liger and torch.compile at 4096 and 16384 rows; chunks of 64-128 gain up to 7% more
# at 16384 rows)
WALK_CHUNK, WALK_STAGES = 32, 3


def candidates(forward: A.Program, forward_roots, body: list[A.FuncDef], outputs: list[str]) -> list[str]:
    """Candidate schedule statements, most wanted first; each string is kept or dropped whole
    (a Func's shaping statements go together)."""
    defs = {f.name: f for f in body}
    temporaries = frozenset(defs)
    updated = {f.update.target for f in body if f.update}
    inlined = [f.name for f in body if f.name not in outputs and f.name not in updated and not f.update and
               not _reduces(f.expr)]
    short = _short_dims(forward)
    recomputed, flash = flash_products(defs, outputs, set(inlined), updated, short)
    inlined += recomputed
    fused = _kernels(body, outputs, set(inlined), set(_taps(forward)))
    lines = [f"{name}.inline();" for name in inlined]
    hosts = {root for name, root in fused.items() if _reduces(defs[name].expr)}
    siblings = flash_siblings(defs, flash)
    mirrored = _mirrored(forward, defs, outputs, fused)
    for f in body:
        if f.name in flash and f.name not in siblings:
            lines.append("\n".join(_flash_shaping(f, flash[f.name])))
        elif f.name in mirrored:
            host, dim, tiles = mirrored[f.name]
            lines.append("\n".join(tiles + [f"{f.name}.fuse_at({host}, {dim});"]))
        elif f.name not in inlined and f.name not in fused and f.name not in siblings:
            lines.append("\n".join(_shaping(forward, forward_roots, f, f.name in hosts, f.name in fused.values(),
                                             short, temporaries)))
    for name, root in siblings.items():
        red = defs[name].expr.dim
        lines.append(f"{name}.fuse_at({root}, {defs[root].dims[-1]});\n{root}.compute_with({name}, {red});")
    for name, root in reversed(fused.items()):  # consumers first: a producer joins a kernel its readers are in
        # a reduction at the outermost loop that takes it (its rows whole), an element-wise sibling output
        # at the innermost (the same tile, computed from the same loads)
        dims = defs[root].dims if _reduces(defs[name].expr) else tuple(reversed(defs[root].dims))
        lines += [f"{name}.fuse_at({root}, {d});" for d in dims]
    lines += _walk_sums(defs, fused, set(inlined), hosts)
    lines += _shared_walks(defs, fused)
    # where the checker refused to fuse it, a kernel of its own (refused whole where fused)
    for name in [*fused, *mirrored]:
        lines.append("\n".join(_shaping(forward, forward_roots, defs[name], temporaries=temporaries)))
    for name in siblings:
        lines.append("\n".join(_flash_shaping(defs[name], flash[name])))
    return [line for line in lines if line]


def _flash_shaping(f: A.FuncDef, inner: list[str]) -> list[str]:
    """A product recomputing a product in its loop (attention's gradients): FLASH_ROWS rows a
    program, the last dimension whole (a head), the reduction walked FLASH_STEP at a time and the
    products inside it whole (causal_mha_grad_flash_d128.dt's tiles; on an H200, causal attention's
    backward ran at 0.74-0.77x of cuDNN's at heads of 128, 0.70-0.76x at 64, where tiles of its own
    reach 0.80-0.91x: causal_mha_grad_flash.dt)."""
    *batch, rows, last = f.dims
    red = f.expr.dim if isinstance(f.expr, A.Reduce) else None
    whole = [d for d in dict.fromkeys([last, *inner]) if d != red and d != rows]
    tiles = [(rows, FLASH_ROWS)] + [(d, 0) for d in whole[:1]] + ([(red, FLASH_STEP)] if red else []) + \
        [(d, 0) for d in whole[1:]]
    return [_call(f.name, "block", [(d, 1) for d in batch] + [(rows, FLASH_ROWS)]), _call(f.name, "tensorize", tiles),
            f"{f.name}.num_warps({FLASH_WARPS});", f"{f.name}.num_stages({FLASH_STAGES});"]


def _shared_walks(defs: dict[str, A.FuncDef], fused: dict[str, str]) -> list[str]:
    """Reductions over one dimension fused into one kernel share a walk of it where the checker
    allows (compute_with: a max and the sum of exponentials shifted by it, the online softmax; two
    sums reading what an earlier walk computed): each later one with the first earlier one the
    checker accepts, the kernel reading the row once less each time."""
    earlier: dict[tuple[str, str], list[str]] = {}
    lines = []
    split: set[str] = set()
    for name, root in fused.items():
        dim = _walk_dim(defs[name])
        if dim is None:
            continue
        if _walk_dim(defs[root]) == dim and defs[name].dims == defs[root].dims:
            # an output over the root's dimensions, reducing over the root's: its walk is the root's,
            # which a split shares (a weight's gradient and its bias's: one read of the rows for both,
            # in chunks of rows across programs)
            lines.append(("" if root in split else f"{root}.split({dim}:{SIBLING_CHUNK});\n") +
                         f"{name}.split({dim}:{SIBLING_CHUNK});\n{name}.compute_with({root}, {dim});")
            split.add(root)
            continue
        walked = earlier.setdefault((root, dim), [])
        lines += [f"{name}.compute_with({sibling}, {dim});" for sibling in walked]
        walked.append(name)
    return lines


def _walk_sums(defs: dict[str, A.FuncDef], fused: dict[str, str], inlined: set[str], hosts: set[str]) -> list[str]:
    """A kernel summing across rows (a weight's gradient) sums in the walk of a kernel hosting
    the rows' statistics over the same dimensions and the rows (dx's): that kernel takes chunks
    of WALK_CHUNK rows a program, a row at a time, and the sum (with the outputs sharing its kernel
    and walk: the bias's gradient) is split in the same chunks, each program storing its chunk's
    partial sums once; the rows are read once for all of them."""
    lines = []
    for name, f in defs.items():
        dim = _walk_dim(f)
        if name in fused or name in inlined or dim is None or dim in f.dims:
            continue
        host = next((h for h in hosts if h not in fused and dim in defs[h].dims and len(defs[h].dims) >= 2
                     and set(defs[h].dims) - {dim} == set(f.dims) and defs[h].dims[-1] != dim), None)
        if host is None:
            continue
        chunk = f"{dim}:{WALK_CHUNK}"
        line = [f"{host}.block({chunk});", f"{host}.tensorize({dim}:1, {defs[host].dims[-1]}:0);",
                f"{host}.num_stages({WALK_STAGES});", f"{name}.split({chunk});", f"{name}.compute_with({host}, {dim});"]
        for sibling, root in fused.items():
            if root == name and _walk_dim(defs[sibling]) == dim and defs[sibling].dims == f.dims:
                line += [f"{sibling}.split({chunk});", f"{sibling}.compute_with({name}, {dim});"]
        lines.append("\n".join(line))
    return lines


def _walk_dim(f: A.FuncDef) -> str | None:
    """The one dimension f's reductions walk, inside a larger expression too (softmax's
    -(rdot(g, exp(A - _max), y) / ...)); None for none or several."""
    dims = {n.dim for n in A.walk(f.expr) if isinstance(n, A.Reduce) and n.op in ("sum", "max", "min", "dot")}
    return dims.pop() if len(dims) == 1 else None


def _stage(f: A.FuncDef) -> str:
    """What a Func's schedule statements start with: its name, or an update's `g.update(i)`."""
    if f.update is None:
        return f.name
    index = f.name.removeprefix(A.update_name(f.update.target, 0))
    return f"{f.update.target}.update({index})" if index else f"{f.update.target}.update()"


def _reduces(e: A.Expr) -> bool:
    """Whether e reduces or scans (which a Func cannot be inlined with)."""
    return any(isinstance(n, (A.Reduce, A.Scan)) for n in A.walk(e))


def _kernels(body: list[A.FuncDef], outputs: list[str], inlined: set[str], taps=frozenset()) -> dict[str, str]:
    """Each reduction that every reader with bare dimensions as subscripts reaches from one kernel
    -> that kernel's root: consumers first, a Func belongs to the kernels of the Funcs that read it
    (an inlined one to its readers'). A read at computed indices (`d_mean[b, c // len(cg)]`,
    directly or through inlined Funcs) takes the stored values, which a kernel computing them
    elsewhere stores: group norm's d_rstd joins d_mean's kernel, which grad_X reads it from."""
    readers: dict[str, set[tuple[str, bool]]] = {f.name: set() for f in body}  # (reader, bare subscripts)
    for f in body:
        for e in A.walk(f.expr):
            if isinstance(e, A.Access) and e.kind == "func" and e.name in readers:
                readers[e.name].add((f.name, all(isinstance(s, A.DimRef) for s in e.subscripts)))
    kernels: dict[str, set[str]] = {}  # the kernels reading a Func at its own indices
    fused: dict[str, str] = {}
    first = {}  # dims -> the first output over them: outputs alike share its kernel (stored from it)
    defs = {f.name: f for f in body}
    for o in outputs:
        first.setdefault(defs[o].dims, o)
    for f in reversed(body):
        if f.name in outputs:
            root = first[f.dims]
            wider = [o for o in outputs if defs[o].dims[:len(f.dims)] == f.dims != defs[o].dims
                     and set(defs[o].dims[len(f.dims):]) <= taps and _reduced_set(defs[o]) == _reduced_set(f) != set()]
            if root == f.name and wider:  # conv1d's dB[c] in dW[c, j]'s kernel (its taps j in one tile): one walk
                root = first[defs[wider[0]].dims]
            kernels[f.name] = {root}
            if root != f.name:
                fused[f.name] = root
            continue
        mine = set().union(*(kernels.get(r, {r}) for r, own in readers[f.name] if own))
        if f.update is not None:  # read by no Func, written into another: a kernel of its own
            kernels[f.name] = {f.name}
        elif f.name in inlined:
            kernels[f.name] = mine
        elif len(mine) == 1:
            fused[f.name] = next(iter(mine))
            kernels[f.name] = mine
        else:
            kernels[f.name] = {f.name}
    return {name: fused[name] for name in (f.name for f in body) if name in fused}


def _reduced_set(f: A.FuncDef) -> set[str]:
    return {n.dim for n in A.walk(f.expr) if isinstance(n, A.Reduce)}


def _mirrored(forward: A.Program, defs: dict[str, A.FuncDef], outputs: list[str],
              fused: dict[str, str]) -> dict[str, tuple[str, str, list[str]]]:
    """Element-wise gradient outputs to fuse into another's kernel as the forward fused a Func
    over their dimensions into one over the other's (RoPE's k_out at q_out's token: grad_K at
    grad_Q's) -> (that output, the dimension, the forward Func's tiles). Outputs are matched to
    the forward's Funcs by their dimensions (the first over each), not as a Func's own gradient:
    a schedule only, which the checker may refuse (then the output gets a kernel of its own)."""
    result = {}
    by_dims = {}
    for o in outputs:
        by_dims.setdefault(defs[o].dims, o)
    funcs = forward.names_of("Func")
    for c in forward.schedule:
        if c.primitive != "fuse_at" or c.func not in funcs:
            continue
        guest = by_dims.get(forward.func(c.func).dims)
        host, dim = by_dims.get(forward.func(str(c.args[0])).dims), str(c.args[1])
        if guest and host and guest != host and guest not in fused and guest not in result and \
                not _reduces(defs[guest].expr) and dim in defs[guest].dims and dim in defs[host].dims:
            tiles = _forward_shaping(forward, c.func, defs[guest], ("tensorize",), frozenset(defs))
            result[guest] = (host, dim, tiles or [])
    return result


def _forward_shaping(forward: A.Program, name: str, f: A.FuncDef, primitives=SHAPING,
                     temporaries: frozenset = frozenset()) -> list[str] | None:
    """The forward Func `name`'s shaping statements of `primitives` for f (over its dimensions),
    where they tile f: its sizes of the dimensions f walks (the forward's tile of k is no tile of
    num's); None where they leave no tile."""
    walked = set(f.dims) | _reduced_set(f)
    calls = [c for c in forward.schedule if c.func == name and c.primitive in primitives]
    calls = [c if c.primitive not in ("block", "tensorize") else
             dataclasses.replace(c, args=tuple(a for a in c.args if a[0] in walked)) for c in calls]
    calls = [c for c in calls if c.args or c.primitive not in ("block", "tensorize")]
    calls = [c for c in calls if c.primitive != "map" or all(str(a) in f.dims for a in c.args)]
    # f's reductions along rows in memory that the forward does not tile (group norm's d_mean walks
    # s where the forward's mean walks p) take the tile of a row's walk
    tiled = {str(a[0]) for c in calls if c.primitive == "tensorize" for a in c.args}
    rows = [(r, ROW_WALK) for r in dict.fromkeys(n.dim for n in A.walk(f.expr) if isinstance(n, A.Reduce))
            if r not in tiled and r in _innermost(f, temporaries)]
    calls = [dataclasses.replace(c, args=c.args + tuple(rows)) if c.primitive == "tensorize" else c for c in calls]
    # only where f keeps tiles: a row kernel's (loss.tensorize(v:4096)) leave cross-entropy's update at
    # the target, over r alone, none: one element a program
    return [_statement(_stage(f), c) for c in calls] if any(c.primitive == "tensorize" for c in calls) else None


def _shaping(forward: A.Program, forward_roots, f: A.FuncDef, hosts: bool = False, fused_into: bool = False,
             short: frozenset = frozenset(), temporaries: frozenset = frozenset()) -> list[str]:
    """f's blocks, tiles, warps and stages; `hosts`: reductions are fused into f's kernel, so each
    program takes whole rows (blocked along the last dimension, each block would compute them again);
    `fused_into`: some Func is fused into f's kernel (its programs keep one row each: a block of rows
    would have each program compute that Func again); `short`: dimensions short enough for a tile
    (`_short_dims`); `temporaries`: the gradient program's Funcs (`_innermost`)."""
    stage = _stage(f)
    reduced = list(dict.fromkeys(n.dim for n in A.walk(f.expr) if isinstance(n, A.Reduce)))
    if hosts and not reduced and len(f.dims) >= 2:
        *outer, last = f.dims
        return [_call(stage, "block", [(d, 1) for d in outer]), _call(stage, "tensorize", [(last, HOSTED_WALK)]),
                f"{stage}.num_warps({HOSTED_WARPS});"]
    same = next((r for r in forward_roots if forward.func(r).dims == f.dims), None)
    reused = _forward_shaping(forward, same, f, temporaries=temporaries) if same is not None else None
    if reused:
        return reused
    if isinstance(f.expr, A.Reduce) and f.expr.op == "dot" and len(f.dims) >= 2:
        *batch, rows, cols = f.dims
        blocks = [(d, 1) for d in batch] + [(rows, PRODUCT_TILE), (cols, PRODUCT_TILE)]
        tiles = [(rows, PRODUCT_TILE), (cols, PRODUCT_TILE), (f.expr.dim, PRODUCT_DEPTH)]
        return [_call(stage, "block", blocks), _call(stage, "tensorize", tiles),
                f"{stage}.num_warps({PRODUCT_WARPS});", f"{stage}.num_stages({PRODUCT_STAGES});"]
    if not f.dims:
        return []
    scanned = [n.dim for n in A.walk(f.expr) if isinstance(n, A.Scan)]
    if scanned:  # each program walks the whole scanned dimension (it cannot be blocked)
        return [_call(stage, "block", [(d, 1) for d in f.dims if d != scanned[0]]),
                _call(stage, "tensorize", [(scanned[0], WALK_SCAN)])]
    innermost = _last_dims(f)
    if reduced and reduced[0] in innermost and len(reduced) == 1 and reduced[0] in short and not fused_into:
        # short rows (a head, which the forward's products keep in one tile): SHORT_ROWS of them a program
        *outer, rows = f.dims
        return [_call(stage, "block", [(d, 1) for d in outer] + [(rows, SHORT_ROWS)]),
                _call(stage, "tensorize", [(rows, SHORT_ROWS), (reduced[0], 0)])]
    if reduced and reduced[0] in innermost:  # along rows in memory: a program a row, walking it
        return [_call(stage, "block", [(d, 1) for d in f.dims]),
                _call(stage, "tensorize", [(reduced[0], ROW_WALK)] + [(r, WALK) for r in reduced[1:]])]
    along = [r for r in reduced if r in _innermost(f, temporaries)]
    if along:  # a walk along rows inside sums over others (group norm's dW: a channel's row in each batch),
        # a convolution's taps in one tile (conv1d's dW[c, j]: a program a channel, its four taps at once)
        taps = _taps(forward)
        return [_call(stage, "block", [(d, 1) for d in f.dims if d not in taps]),
                _call(stage, "tensorize", [(d, taps[d]) for d in f.dims if d in taps] + [(along[0], ROW_WALK)]
                      + [(r, 1) for r in reduced if r != along[0]])]
    *outer, last = f.dims  # across rows (a weight's gradient summed over tokens), or element-wise
    block = COLUMN_BLOCK if reduced else ROW_BLOCK
    # element-wise: programs in row order, neighbours reading neighbouring memory (the default order
    # varies the first dimension fastest: SwiGLU's rows ran 3-5% slower in it)
    order = [f"{stage}.map({', '.join(f.dims)});"] if outer and not reduced and f.update is None else []
    # of several nested sums, the one nearest the rows in memory walked COLUMN_WALK rows at a time,
    # the others a row at a time (their tiles multiply: RoPE's cos-table gradient summed over b, kh
    # and h had 32 x 128^3 lanes; a batch of 1-8 fills little of a wide tile); a product's depth
    # keeps its tile
    products = {n.dim for n in A.walk(f.expr) if isinstance(n, A.Reduce) and n.op == "dot"}
    depth = {r: max((i for e in A.walk(f.expr) if isinstance(e, A.Access) for i, sub in enumerate(e.subscripts)
                     if isinstance(sub, A.DimRef) and sub.dim == r), default=-1) for r in reduced}
    wide = max((r for r in reduced if r not in products), key=lambda r: depth[r], default=None)
    return [_call(stage, "block", [(d, 1) for d in outer] + [(last, block)]),
            _call(stage, "tensorize", [(last, block)] + [(r, COLUMN_WALK if r == wide or r in products else 1)
                                                          for r in reduced])] + order


def _taps(forward: A.Program) -> dict[str, int]:
    """The dimensions the forward sums over (not in a product: a matrix product's depth is no
    convolution's taps) in one small tile (at most TAPS lanes: `pre_sum.tensorize(..., j:4)`) -> that tile."""
    reduced = {n.dim for f in forward.funcs for n in A.walk(f.expr) if isinstance(n, A.Reduce) and n.op != "dot"}
    return {str(d): n for c in forward.schedule if c.primitive == "tensorize" for d, n in c.args
            if str(d) in reduced and isinstance(n, int) and 1 < n <= TAPS}


def _last_dims(f: A.FuncDef) -> set[str]:
    """The dimensions f reads along rows in memory: its inputs' bare last subscripts, else its
    temporaries'. Which sum a row kernel walks; `_innermost` (shifted subscripts too, every read
    of a tensor in memory) decides whether sums over other dimensions may wrap that walk."""
    reads = [e for e in A.walk(f.expr) if isinstance(e, A.Access) and e.subscripts]
    reads = [e for e in reads if e.kind == "input"] or reads
    return {e.subscripts[-1].dim for e in reads if isinstance(e.subscripts[-1], A.DimRef)}


def _innermost(f: A.FuncDef, temporaries: frozenset) -> set[str]:
    """The dimensions f reads rows of tensors in memory along (inputs and incoming gradients, not
    `temporaries`, the gradient program's Funcs, which may be inlined; else those): the dimensions
    in the last subscript of each read of two or more, a shifted one included (conv1d's
    `X[b, c, t + j - (len(j) - 1)]` reads along t and j)."""
    reads = [e for e in A.walk(f.expr) if isinstance(e, A.Access) and len(e.subscripts) > 1]
    reads = [e for e in reads if e.name not in temporaries] or reads
    return {t.dim for e in reads for sign, t in A.signed_terms(e.subscripts[-1]) if sign == 1 and isinstance(t, A.DimRef)}


def _short_dims(forward: A.Program) -> frozenset[str]:
    """The dimensions the forward keeps whole in the tiles of its products and reduces with
    products only: a head (`tensorize(k:0)` in a kernel computing an rdot). A sequence or a row
    that a max or a sum reduces is none, whole in a tile or not."""
    inlined = {c.func for c in forward.schedule if c.primitive == "inline"}
    fused = {c.func: str(c.args[0]) for c in forward.schedule if c.primitive == "fuse_at"}

    def products(name: str, seen: set[str]) -> bool:
        """Whether name's kernel computes an rdot: in name, or in a Func inlined or fused into it."""
        seen.add(name)
        for e in A.walk(forward.func(name).expr):
            if isinstance(e, A.Reduce) and e.op == "dot":
                return True
            if isinstance(e, A.Access) and e.kind == "func" and e.name not in seen and \
                    (e.name in inlined or fused.get(e.name) == name) and products(e.name, seen):
                return True
        return False
    names = {f.name for f in forward.funcs}
    otherwise = {e.dim for f in forward.funcs for e in A.walk(f.expr) if isinstance(e, A.Reduce) and e.op != "dot"}
    return frozenset(str(d) for c in forward.schedule if c.primitive == "tensorize" and c.func in names
                     and products(c.func, set()) for d, n in c.args if n == 0 and str(d) not in otherwise)


def _call(func: str, primitive: str, sizes) -> str:
    return f"{func}.{primitive}({', '.join(f'{d}:{n}' for d, n in sizes)});"


def _statement(func: str, call: A.ScheduleCall) -> str:
    if call.primitive in ("block", "tensorize"):
        return _call(func, call.primitive, call.args)
    return f"{func}.{call.primitive}({', '.join(str(a) for a in call.args)});"


_SIZES = re.compile(r"^(.+)\.(block|tensorize|num_warps|num_stages)\((.*)\);$")


def merged(schedule: str) -> str:
    """The schedule text with each Func's block, tensorize, num_warps and num_stages written once,
    where its first one was: a later candidate's sizes override an earlier one's, dimension by
    dimension (a row kernel taking chunks of rows for a walk sum re-blocks its rows)."""
    first: dict[tuple[str, str], int] = {}
    sizes: dict[int, dict[str, str]] = {}
    out: list[str] = []
    for line in schedule.splitlines():
        match = _SIZES.match(line)
        if match is None:
            out.append(line)
            continue
        func, primitive, args = match.groups()
        pairs = dict(a.split(":") for a in args.split(", ")) if primitive in ("block", "tensorize") else {"": args}
        at = first.setdefault((func, primitive), len(out))
        if at == len(out):
            out.append(line)
            sizes[at] = {}
        sizes[at].update(pairs)
        args = ", ".join(f"{d}:{n}" if d else n for d, n in sizes[at].items())
        out[at] = f"{func}.{primitive}({args});"
    return "".join(f"{line}\n" for line in out)
