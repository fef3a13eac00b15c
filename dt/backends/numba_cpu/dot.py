"""Source text of the Dot micro-kernel a generated module carries: `_dot`, behind every float Dot
(`_dot_int` behind a product of two i8 operands).

`_dot` computes c[:ni, :nj] += a-tile @ b-tile as BLAS libraries do (BLIS's "micro-kernel"
design): it reads the a tile where it lies if its rows are close together (a block's rows within
4 KB: a scratch tile, a head of attention's Q), else copies it into rows padded so that rows read
in step never share cache sets (`_dot_pack_a`); it copies each panel of `cols` columns of the b
tile into a contiguous strip (read in place instead where at most two blocks of rows use it;
transposed, a vector of lanes x lanes at a time in registers, where b holds the tile's transpose,
as attention's K[l, k]), then runs `_dot_block` on every block of `rows` x `cols` of c: that
block stays in vector registers for the whole reduction (one load and one store of c per call,
not one per few reduction steps), each step loading one row of the strip and broadcasting one
value of a per row into fused multiply-adds, and prefetching b's row 32 steps ahead (the hardware
prefetchers do not follow a strip read in place down long rows). c's tile may lie anywhere in c
(an output tensor's tile), and `accumulate` false writes the product over it unread (no zero
fill first). Blocks at the tile's edges run on a zero-padded copy of theirs.

The copies go into a `packing` array that the kernel makes once per product (`_dot_packing`),
not one per call: allocating the three of them took 0.3 us of a 64 x 64 x 64 product's 4. A
product whose a tile is the same in every step of a loop (attention's Q in the loop over keys,
2mm's A in the loop over l) has it packed once before the loop (`_dot_pack_a`) and calls `_dot`
in it with `a_packed`. One function does every float product: numba optimises a function again
in each function that calls it, and splitting `_dot` into layers took its first compilation from
1.4 to 3.1 s.

`_dot_block` is written in LLVM IR (numba.extending.intrinsic, llvmlite), its shape chosen when
numba compiles it, from the CPU features numba compiles for (NUMBA_CPU_FEATURES, else the
host's): 8 rows of two 16-lane vectors (f32) with AVX-512's 32 registers, 6 rows of two 8-lane
vectors with AVX2 and FMA's 16, 4 rows of two 4-lane vectors otherwise; f64 halves the lanes.
The same module source thus runs the right shape on each CPU, and numba's cache keys its machine
code by the CPU.
"""
from __future__ import annotations

# _dot_block's register block by CPU feature: rows x _DOT_VECTORS vectors of accumulators plus
# _DOT_VECTORS vectors of b and one broadcast fit the vector registers.
DOT_REGISTERS = '''\
_DOT_VECTORS = 2  # vectors of c in each row of a block
_DOT_PREFETCH_ROWS = 32  # how far ahead _dot_block prefetches b's rows


def _dot_strip_types(strip, b, b_start, ldb, nk):
    """Whether _dot_strip's and _dot_strip_transposed's arguments are what they copy: C-ordered
    float arrays of one dtype, and integer offsets."""
    return (all(isinstance(x, numba.types.Array) and x.layout == "C" and x.dtype == strip.dtype for x in (strip, b))
            and isinstance(strip.dtype, numba.types.Float)
            and all(isinstance(i, numba.types.Integer) for i in (b_start, ldb, nk)))


def _dot_strip_pointers(context, builder, signature, args):
    """A strip intrinsic's vector lanes, its vector type, the strip's data and b's at b_start."""
    strip, b, b_start = args[:3]
    lanes = _dot_registers(signature.args[0].dtype)[1]
    vector = ir.VectorType(context.get_value_type(signature.args[0].dtype), lanes)
    strip_data = context.make_array(signature.args[0])(context, builder, strip).data
    b_data = builder.gep(context.make_array(signature.args[1])(context, builder, b).data, [b_start])
    return lanes, vector, strip_data, b_data


def _dot_registers(dtype):
    """(rows, lanes) of the block of c _dot_block keeps in vector registers, rows of _DOT_VECTORS
    vectors of `lanes` elements of dtype (a numba float type), for the CPU numba compiles for:
    AVX-512 has 32 vector registers of 64 bytes, AVX2 16 of 32, SSE 16 of 16."""
    features = _cpu_features()
    if "+avx512f" in features:
        rows, vector_bytes = 8, 64
    elif "+avx2" in features and "+fma" in features:
        rows, vector_bytes = 6, 32
    else:
        rows, vector_bytes = 4, 16
    return rows, vector_bytes * 8 // dtype.bitwidth
'''

DOT_BLOCK_SHAPE = '''\
@intrinsic
def _dot_block_shape(typingctx, c):
    """(rows, cols) of the block of c (a float array) that _dot_block computes: constants."""
    if not (isinstance(c, numba.types.Array) and isinstance(c.dtype, numba.types.Float)):
        return None
    shape = numba.types.UniTuple(numba.types.uint64, 2)

    def codegen(context, builder, signature, args):
        rows, lanes = _dot_registers(c.dtype)
        constants = [context.get_constant(numba.types.uint64, n) for n in (rows, _DOT_VECTORS * lanes)]
        return context.make_tuple(builder, shape, constants)

    return shape(c), codegen
'''

DOT_BLOCK = '''\
@intrinsic
def _dot_block(typingctx, c, c_start, ldc, a, a_start, lda, b, b_start, ldb, nk, accumulate):
    """c[r, j] += sum over k < nk of a[r, k] * b[k, j] for the block of _dot_block_shape(c) (=,
    c's values loaded but discarded, where `accumulate` is false): c's element (r, j) at c_start + r * ldc + j of
    c's data, a's (r, k) at a_start + r * lda + k of a's, b's (k, j) at b_start + k * ldb + j of
    b's. c's block lives in vector registers across the loop."""
    arrays, indices = (c, a, b), (c_start, ldc, a_start, lda, b_start, ldb, nk)
    if not (all(isinstance(x, numba.types.Array) and x.layout == "C" and x.dtype == c.dtype for x in arrays)
            and isinstance(c.dtype, numba.types.Float) and all(isinstance(i, numba.types.Integer) for i in indices)
            and isinstance(accumulate, numba.types.Boolean)):
        return None

    def codegen(context, builder, signature, args):
        c, c_start, ldc, a, a_start, lda, b, b_start, ldb, nk, accumulate = args
        rows, lanes = _dot_registers(signature.args[0].dtype)
        vector = ir.VectorType(context.get_value_type(signature.args[0].dtype), lanes)
        index = ir.IntType(64)
        # fmuladd: a fused multiply-add where the CPU has one (FMA3, AVX-512), a multiply and an add
        # where it has not (llvm.fma would call libm's fmaf for every lane there)
        fma_name = f"llvm.fmuladd.v{lanes}f{signature.args[0].dtype.bitwidth}"
        fma = builder.module.globals.get(fma_name) or ir.Function(
            builder.module, ir.FunctionType(vector, [vector] * 3), fma_name)
        byte = ir.IntType(8)
        # named by llvmlite (p0i8, which LLVM 15 and later read as p0): numba 0.60's LLVM 14 needs p0i8
        prefetch = builder.module.declare_intrinsic(
            "llvm.prefetch", [byte.as_pointer()],
            ir.FunctionType(ir.VoidType(), [byte.as_pointer()] + [ir.IntType(32)] * 3))

        def data(array, array_type):
            return context.make_array(array_type)(context, builder, array).data

        def at(pointer, offset):
            return builder.bitcast(builder.gep(pointer, [offset]), vector.as_pointer())

        def n(value):
            return ir.Constant(index, value)

        def i32(value):
            return ir.Constant(ir.IntType(32), value)

        c_rows = [builder.gep(data(c, signature.args[0]), [builder.add(c_start, builder.mul(ldc, n(r)))])
                  for r in range(rows)]
        a_data = builder.gep(data(a, signature.args[3]), [a_start])
        b_data = builder.gep(data(b, signature.args[6]), [b_start])
        zero = ir.Constant(vector, None)
        start = [builder.select(accumulate, builder.load(at(row, n(v * lanes)), align=1), zero)
                 for row in c_rows for v in range(_DOT_VECTORS)]
        entry = builder.block
        loop = builder.append_basic_block("dot_block.loop")
        done = builder.append_basic_block("dot_block.done")
        builder.cbranch(builder.icmp_unsigned("!=", nk, n(0)), loop, done)
        builder.position_at_end(loop)
        k = builder.phi(index)
        k.add_incoming(n(0), entry)
        accumulators = []
        for value in start:
            accumulators.append(builder.phi(vector))
            accumulators[-1].add_incoming(value, entry)
        b_row = builder.mul(k, ldb)
        # b's row _DOT_PREFETCH_ROWS steps ahead into L2: b read in place (a few rows of a) is a
        # column of short pieces of long rows, which the hardware prefetchers do not follow. In the
        # last steps the address lies past b's end: a prefetch never faults (LLVM: it does not
        # change the program's behaviour), and the address is computed without `inbounds`
        ahead = builder.add(b_row, builder.mul(ldb, n(_DOT_PREFETCH_ROWS)))
        for v in range(_DOT_VECTORS):
            line = builder.bitcast(builder.gep(b_data, [builder.add(ahead, n(v * lanes))]), byte.as_pointer())
            builder.call(prefetch, [line, i32(0), i32(2), i32(1)])  # a read, to L2, of data
        b_vectors = [builder.load(at(b_data, builder.add(b_row, n(v * lanes))), align=1)
                     for v in range(_DOT_VECTORS)]
        splat = ir.Constant(ir.VectorType(ir.IntType(32), lanes), [0] * lanes)
        updated = []
        for r in range(rows):
            a_value = builder.load(builder.gep(a_data, [builder.add(k, builder.mul(lda, n(r)))]))
            a_lane = builder.insert_element(ir.Constant(vector, ir.Undefined), a_value, ir.Constant(ir.IntType(32), 0))
            a_vector = builder.shuffle_vector(a_lane, ir.Constant(vector, ir.Undefined), splat)
            for v in range(_DOT_VECTORS):
                updated.append(builder.call(fma, [a_vector, b_vectors[v], accumulators[_DOT_VECTORS * r + v]]))
        k_next = builder.add(k, n(1))
        k.add_incoming(k_next, loop)
        for phi, value in zip(accumulators, updated):
            phi.add_incoming(value, loop)
        builder.cbranch(builder.icmp_unsigned("<", k_next, nk), loop, done)
        builder.position_at_end(done)
        results = []
        for before, after in zip(start, updated):  # phi nodes first in their block
            results.append(builder.phi(vector))
            results[-1].add_incoming(before, entry)
            results[-1].add_incoming(after, loop)
        for i, result in enumerate(results):
            builder.store(result, at(c_rows[i // _DOT_VECTORS], n(i % _DOT_VECTORS * lanes)), align=1)
        return context.get_dummy_value()

    return numba.types.void(c, c_start, ldc, a, a_start, lda, b, b_start, ldb, nk, accumulate), codegen
'''

DOT_STRIP = '''\
@intrinsic
def _dot_strip(typingctx, strip, b, b_start, ldb, nk):
    """strip[k * cols + j] = b's element b_start + k * ldb + j for k < nk and j < cols (the
    columns of _dot_block_shape(strip)): two vector loads and stores a row, whatever LLVM's
    vectoriser would make of a short loop whose source and destination may alias."""
    if not _dot_strip_types(strip, b, b_start, ldb, nk):
        return None

    def codegen(context, builder, signature, args):
        lanes, vector, strip_data, b_data = _dot_strip_pointers(context, builder, signature, args)
        ldb, nk = args[3:]
        index = ir.IntType(64)
        with cgutils.for_range(builder, nk) as loop:
            row = builder.gep(b_data, [builder.mul(loop.index, ldb)])
            to = builder.gep(strip_data, [builder.mul(loop.index, ir.Constant(index, _DOT_VECTORS * lanes))])
            for v in range(_DOT_VECTORS):
                offset = ir.Constant(index, v * lanes)
                value = builder.load(builder.bitcast(builder.gep(row, [offset]), vector.as_pointer()), align=1)
                builder.store(value, builder.bitcast(builder.gep(to, [offset]), vector.as_pointer()), align=1)
        return context.get_dummy_value()

    return numba.types.void(strip, b, b_start, ldb, nk), codegen
'''

# The transposition of lanes x lanes elements in vector registers: log2(lanes) steps, each pairing
# vector i with vector i + h and interleaving their runs of h elements (the transpose of 2 x 2
# blocks of h x h, then of the blocks inside them). One shuffle instruction a vector a step.
DOT_STRIP_TRANSPOSED = '''\
@intrinsic
def _dot_strip_transposed(typingctx, strip, b, b_start, ldb, nk):
    """strip[k * cols + j] = b's element b_start + j * ldb + k for j < cols (the columns of
    _dot_block_shape(strip)) and k < nk rounded down to whole vectors: b holds the strip's
    transpose (K[l, k] for a product over k), read a vector of k at a time from each of a
    vector's worth of rows and transposed in registers."""
    if not _dot_strip_types(strip, b, b_start, ldb, nk):
        return None

    def codegen(context, builder, signature, args):
        lanes, vector, strip_data, b_data = _dot_strip_pointers(context, builder, signature, args)
        ldb, nk = args[3:]
        index = ir.IntType(64)
        cols = _DOT_VECTORS * lanes

        def at(pointer, offset):
            return builder.bitcast(builder.gep(pointer, [offset]), vector.as_pointer())

        def n(value):
            return ir.Constant(index, value)

        def mask(picks):
            return ir.Constant(ir.VectorType(ir.IntType(32), lanes), picks)

        with cgutils.for_range(builder, builder.udiv(nk, n(lanes))) as loop:
            k = builder.mul(loop.index, n(lanes))
            for v in range(_DOT_VECTORS):
                rows = [builder.load(at(b_data, builder.add(builder.mul(n(v * lanes + j), ldb), k)), align=1)
                        for j in range(lanes)]
                h = lanes // 2
                while h:  # x's first h of every 2h elements then y's (low), their second h (high)
                    low = [m for run in range(0, lanes, 2 * h) for m in (*range(run, run + h),
                                                                          *range(lanes + run, lanes + run + h))]
                    for i in (i for i in range(lanes) if not i & h):
                        x, y = rows[i], rows[i + h]
                        rows[i], rows[i + h] = (builder.shuffle_vector(x, y, mask(low)),
                                                builder.shuffle_vector(x, y, mask([m + h for m in low])))
                    h //= 2
                for kk, column in enumerate(rows):  # now k + kk's row of the strip's vector v
                    builder.store(column, at(strip_data, builder.add(builder.mul(builder.add(k, n(kk)), n(cols)),
                                                                       n(v * lanes))), align=1)
        return context.get_dummy_value()

    return numba.types.void(strip, b, b_start, ldb, nk), codegen
'''

# _dot_a_layout, _dot_packing and _dot_pack_a are inlined into their callers by numba itself
# (inline="always"): compiled as functions of their own, the three took 0.6 s of a first call of
# matmul.dt (2.6 s against 2.0); they only copy and count, which a kernel's fastmath flags leave
# as they are.
DOT_A_LAYOUT = '''\
@njit(inline="always", **_HELPER)
def _dot_a_layout(c, ni, nk):
    """(rows, row length) of an a tile of ni rows and nk columns packed for a product into c: ni
    padded to whole blocks of _dot_block's rows, nk rounded up to an odd multiple of 16 elements,
    which keeps rows read in step out of each other's cache sets (a power-of-two row length would
    not)."""
    rows = _dot_block_shape(c)[0]
    return (ni + rows - u64(1)) // rows * rows, (nk + u64(15)) // u64(16) * u64(16) | u64(16)
'''

DOT_PACKING = '''\
@njit(inline="always", **_HELPER)
def _dot_packing(c, ni, nk):
    """Room for the copies _dot makes for a product into c of at most ni rows over at most nk
    reduction steps: a's packed rows (_dot_pack_a), then a strip of b's columns and an edge block
    of c (_dot). A kernel makes one per product, once, not one a call."""
    rows, cols = _dot_block_shape(c)
    padded_rows, lda = _dot_a_layout(c, ni, nk)
    return np.empty(padded_rows * lda + (nk + rows) * cols, c.dtype)
'''

DOT_PACK_A = '''\
@njit(inline="always", **_HELPER)
def _dot_pack_a(packing, a, ar, ac, ni, nk):
    """a[ar:ar + ni, ac:ac + nk] into the head of `packing` (from _dot_packing) as _dot reads it:
    rows _dot_a_layout apart, zeros below the last. A product whose a tile is the same in
    every step of a loop (attention's Q in the loop over keys) packs it once, before the loop."""
    padded_rows, lda = _dot_a_layout(packing, ni, nk)
    for i in range(ni):
        for k in range(nk):
            packing[i * lda + k] = a[ar + i, ac + k]
    for i in range(ni, padded_rows):
        for k in range(nk):
            packing[i * lda + k] = 0
'''

DOT = '''\
@njit(**_HELPER)
def _dot(c, cr, cc, a, ar, ac, b, br, bc, ni, nj, nk, accumulate, packing, b_transposed=False, a_packed=False):
    """c[cr:cr + ni, cc:cc + nj] += a[ar:ar + ni, ac:ac + nk] @ b[br:br + nk, bc:bc + nj] (=, c's
    values unread, where `accumulate` is false; c, a and b of one float dtype), by blocks of c kept
    in vector registers (_dot_block), with its copies in `packing` (from _dot_packing).
    `b_transposed`: b holds the tile's transpose (b[bc + j, br + k]: attention's K as [l, k]).
    `a_packed`: the a tile is already in `packing` (_dot_pack_a before a loop it does not change
    in). Else a is read where it lies when its tile is whole blocks of rows that lie close
    together (no two rows a block reads in step share a cache set: a scratch tile, a head of
    attention's Q), or packed first. Each panel of b's columns is copied into a contiguous strip
    (transposed where b holds the tile's transpose), or read in place where few blocks of rows
    use it."""
    rows, cols = _dot_block_shape(c)
    lanes = cols // u64(_DOT_VECTORS)
    ldc = u64(c.shape[1])
    if a_packed or ni % rows != 0 or rows * u64(a.shape[1]) * u64(a.itemsize) > u64(4096):
        if not a_packed:
            _dot_pack_a(packing, a, ar, ac, ni, nk)
        padded_rows, lda = _dot_a_layout(c, ni, nk)
        a_rows, a_start, work = packing, u64(0), packing[padded_rows * lda:]
    else:
        lda = u64(a.shape[1])
        a_rows, a_start, work = a.reshape(-1), ar * lda + ac, packing
    b_strip = work[:nk * cols]
    edge = work[nk * cols:(nk + rows) * cols].reshape((rows, cols))
    ldb = u64(b.shape[1])
    for j0 in range(u64(0), nj, cols):
        j_valid = min(cols, nj - j0)
        b_start = br * ldb + bc + j0
        # a full strip is read where it lies when few row blocks would use a copy of it
        in_place = j_valid == cols and ni <= u64(2) * rows and not b_transposed
        if b_transposed:
            # a full strip's whole vectors of k transposed in registers, the rest element by element
            transposed = nk // lanes * lanes if j_valid == cols else u64(0)
            _dot_strip_transposed(b_strip, b, (bc + j0) * ldb + br, ldb, transposed)
            for k in range(transposed, nk):
                for j in range(j_valid):
                    b_strip[k * cols + j] = b[bc + j0 + j, br + k]
                for j in range(j_valid, cols):
                    b_strip[k * cols + j] = 0
        elif j_valid == cols and not in_place:
            _dot_strip(b_strip, b, b_start, ldb, nk)
        elif not in_place:
            for k in range(nk):
                for j in range(j_valid):
                    b_strip[k * cols + j] = b[br + k, bc + j0 + j]
                for j in range(j_valid, cols):
                    b_strip[k * cols + j] = 0
        for i0 in range(u64(0), ni, rows):
            i_valid = min(rows, ni - i0)
            whole = i_valid == rows and j_valid == cols
            if not whole:  # an edge block: on a zero-padded copy of its valid part
                for i in range(rows):
                    for j in range(cols):
                        inside = i < i_valid and j < j_valid
                        edge[i, j] = c[cr + i0 + i, cc + j0 + j] if inside and accumulate else 0
            block, block_start, ld_block = (c, (cr + i0) * ldc + cc + j0, ldc) if whole else (edge, u64(0), cols)
            a_block = a_start + i0 * lda
            if in_place:
                _dot_block(block, block_start, ld_block, a_rows, a_block, lda, b, b_start, ldb, nk, accumulate)
            else:
                _dot_block(block, block_start, ld_block, a_rows, a_block, lda, b_strip, u64(0), cols, nk, accumulate)
            if not whole:
                for i in range(i_valid):
                    for j in range(j_valid):
                        c[cr + i0 + i, cc + j0 + j] = edge[i, j]
'''

DOT_INT = '''\
@njit(**_HELPER)
def _dot_int(c, cr, cc, a, ar, ac, b, br, bc, ni, nj, nk, accumulate):
    """_dot's integer product (two i8 operands): c's i32 tile += a-tile @ b-tile, each row of c
    accumulated in i32 across its columns (loops LLVM vectorises along j)."""
    row = np.empty(nj, np.int32)
    for i in range(ni):
        for j in range(nj):
            row[j] = c[cr + i, cc + j] if accumulate else 0
        for k in range(nk):
            x = np.int32(a[ar + i, ac + k])
            for j in range(nj):
                row[j] += x * np.int32(b[br + k, bc + j])
        for j in range(nj):
            c[cr + i, cc + j] = row[j]
'''

DOT_HELPERS = {"_dot_registers": DOT_REGISTERS, "_dot_block_shape": DOT_BLOCK_SHAPE, "_dot_block": DOT_BLOCK,
               "_dot_strip": DOT_STRIP, "_dot_strip_transposed": DOT_STRIP_TRANSPOSED, "_dot_a_layout": DOT_A_LAYOUT,
               "_dot_packing": DOT_PACKING, "_dot_pack_a": DOT_PACK_A, "_dot": DOT,
               "_dot_int": DOT_INT}
DOT_REQUIRES = {"_dot_registers": ("_cpu_features",), "_dot_block_shape": ("_dot_registers",),
                "_dot_block": ("_dot_registers",), "_dot_strip": ("_dot_registers",),
                "_dot_strip_transposed": ("_dot_registers",), "_dot_a_layout": ("_dot_block_shape",),
                "_dot_packing": ("_dot_a_layout",), "_dot_pack_a": ("_dot_a_layout",),
                "_dot": ("_dot_pack_a", "_dot_block", "_dot_strip", "_dot_strip_transposed")}
