"""Which cache hints close dt's last memory-bound gaps?

A measurement, not a DT feature. When it was written, four memory-bound rows were slower than
their best baseline in every round (timed with do_bench, before the cold timer: docs/performance.md,
"Lines kept in L2 through the flush"):
softmax_safe bf16 at 4096x4096 and 4096x8192 against Liger, add bf16 4096x1000 and add f32
4096x8192 against torch.compile max-autotune; layernorm f32 128x65536 sat at 84% of the
same-size copy. Liger's single-block softmax has the
structure of dt's whole-row schedule, but stores with `cache_modifier=".cs"` (streaming) and
computes in the input dtype. This times, per row, alternating:

- dt's tuned kernel, as generated (`dt compile`), and the same module with each hint added:
  every store streaming (`.cs`) or `evict_first`, every load without a hint `evict_first`;
- the best baseline, and for softmax Liger's kernel launched directly;
- copies of the same size: `Tensor.copy_` and a Triton copy with and without `.cs` stores.

It also writes the code torch.compile generates for each row (DIR/inductor/), to read its
hints. Patched variants must match dt's output bit for bit (other schedules: within the
dtype's tolerance); a hint the module already carries everywhere is not a variant.

    python benchmarks/gpu/memory_hints.py --out DIR [--rounds 5]

writes DIR/memory_hints.json and .md (committed in benchmarks/results/).
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parent))
import measure  # noqa: E402
import render  # noqa: E402
import space  # noqa: E402
from cases import DTYPES, cases, schedule_for  # noqa: E402

import dt  # noqa: E402
from dt.backends.pysource import load_module  # noqa: E402
from dt.runtime import resolve_backend  # noqa: E402

ROWS = (("softmax_safe", (4096, 4096), "bf16"), ("softmax_safe", (4096, 8192), "bf16"),
        ("softmax_safe", (4096, 4096), "f32"), ("add", (4096, 1000), "bf16"), ("add", (4096, 8192), "f32"),
        ("add", (4096, 4096), "bf16"), ("layernorm", (128, 65536), "f32"), ("rmsnorm", (4096, 8192), "bf16"))

# name: (call to patch, keyword added where the call has no such keyword, text the call must
# contain): loads get a hint only where they read a row the program id selects (`x`), not a
# weight vector every program reads
HINTS = {"store .cs": ("tl.store(", 'cache_modifier=".cs"', ""),
         "store evict_first": ("tl.store(", 'eviction_policy="evict_first"', ""),
         "loads evict_first": ("tl.load(", 'eviction_policy="evict_first"', "_x_stride")}
VARIANTS = (("store .cs",), ("store evict_first",), ("loads evict_first",), ("store .cs", "loads evict_first"))


def variant_name(path: Path) -> str | None:
    """The search's variant name of a tuned schedule, from its header (None for other files)."""
    found = re.search(r"variant (\w+)", path.read_text())
    return found.group(1) if found else None


def tuned_variant(path: Path) -> str:
    """The file and, if it is a tuned schedule, its variant name."""
    name = variant_name(path)
    return f"{path.name}, {name}" if name else path.name


def liger_single_block(A, out=None):
    """Liger's single-block softmax kernel launched directly, with Liger's block and warps."""
    from liger_kernel.ops.softmax import _softmax_single_block_forward_kernel
    from liger_kernel.ops.utils import calculate_settings
    block, warps = calculate_settings(A.shape[1])
    out = torch.empty_like(A) if out is None else out
    _softmax_single_block_forward_kernel[(A.shape[0],)](out, out.stride(0), A, A.stride(0), A.shape[1],
                                                         BLOCK_SIZE=block, num_warps=warps)
    return out


def add_keyword(source: str, call: str, keyword: str, marker: str) -> str:
    """`source` with `keyword` passed to every `call(...)` that contains `marker` and does not
    set the keyword already."""
    name = keyword.split("=")[0]
    out, at = [], 0
    for match in re.finditer(re.escape(call), source):
        depth, end = 0, match.end() - 1
        for end in range(match.end() - 1, len(source)):
            depth += {"(": 1, ")": -1}.get(source[end], 0)
            if depth == 0:
                break
        text = source[match.start():end]
        if f"{name}=" not in text and marker in text:
            out += [source[at:end], f", {keyword}"]
            at = end
    return "".join(out) + source[at:]


@triton.jit
def copy_kernel(src_ptr, dst_ptr, N: tl.constexpr, BLOCK: tl.constexpr, STORE: tl.constexpr):
    offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < N
    tl.store(dst_ptr + offsets, tl.load(src_ptr + offsets, mask=mask), mask=mask, cache_modifier=STORE)


def main(argv=None) -> int:
    parser = measure.study_parser(__doc__, rounds=5)
    args = parser.parse_args(argv)
    device = torch.device("cuda")
    timer = measure.Timer("do_bench")
    backend = resolve_backend("triton")
    out_dir = Path(args.out)
    (out_dir / "inductor").mkdir(parents=True, exist_ok=True)
    records = []
    for kernel, shape, dtype in ROWS:
        case = next(c for c in cases([kernel], dtypes=[dtype]) if c.shape == shape)
        t = measure.case_inputs(case, device, seed=1)
        scalars = case.kernel.scalars
        program = dt.load(schedule_for(case))
        calls = {"dt, through dt.Program": lambda: program(backend="triton", **t, **scalars)}
        expected = calls["dt, through dt.Program"]()
        schedules = {"dt": program}
        if kernel == "softmax_safe":  # the whole-row schedule, Liger's structure, at Liger's warps
            warps = {4096: 8, 8192: 16}[shape[1]]
            source = dict(space.variants(case))[f"rows1_w{warps}"]
            schedules[f"dt rows1_w{warps}"] = dt.loads(source, f"{kernel}_rows1_w{warps}")
        for label, prog in schedules.items():
            generated = prog.source(backend, dtype)
            stem = f"{prog.name}_{dtype}"
            for i, hints in enumerate(((),) + VARIANTS):
                source = generated
                for hint in hints:
                    source = add_keyword(source, *HINTS[hint])
                if hints and source == generated:
                    continue  # nothing to add: every such call has the hint already
                launcher = load_module(source, f"{stem}_{i}")[prog.pipeline(dtype).name]
                name = " + ".join((label,) + hints)
                calls[name] = lambda launcher=launcher: launcher(**t, **scalars)
                out = calls[name]()
                same = (torch.equal(out, expected) if label == "dt"  # another schedule rounds differently
                        else measure.relative_error(out, expected.double()) < measure.TOLERANCE[dtype])
                if not same:
                    raise AssertionError(f"{case.title}: {name} differs from dt")
        torch._dynamo.reset()
        compiled = torch.compile(case.kernel.torch_fn, mode="max-autotune-no-cudagraphs")
        from torch._inductor.utils import run_and_get_code
        _, code = run_and_get_code(compiled, **t, **scalars)
        (out_dir / "inductor" / f"{kernel}_{'x'.join(map(str, shape))}_{dtype}.py").write_text("\n\n".join(code))
        calls["torch.compile max-autotune"] = lambda: compiled(**t, **scalars)
        if case.kernel.liger is not None:
            import liger_kernel.transformers.functional as lf
            calls["Liger"] = case.kernel.liger(lf, t, scalars)
        if kernel == "softmax_safe":
            from liger_kernel.ops.utils import calculate_settings
            calls[f"Liger's kernel launched directly ({calculate_settings(shape[1])[1]} warps)"] = \
                lambda A=t["A"]: liger_single_block(A)
        src = torch.empty(case.bytes // 2 // DTYPES[dtype].itemsize, dtype=DTYPES[dtype], device=device)
        dst = torch.empty_like(src)
        calls["copy_ (same bytes)"] = lambda src=src, dst=dst: dst.copy_(src)
        for store in ("", ".cs"):
            calls[f"Triton copy, store '{store}'"] = (
                lambda src=src, dst=dst, store=store: copy_kernel[(triton.cdiv(src.numel(), 2048),)](
                    src, dst, src.numel(), 2048, store, num_warps=4))
        for name, call in calls.items():
            call()
        records += measure.timed_variants(timer, device, case, calls, args.rounds, kernel=kernel,
                                          schedule=tuned_variant(schedule_for(case)))
    measure.write_study(args.out, "memory_hints", device, records, markdown)
    return 0


def markdown(run: dict, records: list[dict]) -> str:
    lines = ["# Cache hints on dt's slowest memory-bound rows: a measurement", "",
             measure.provenance(run, "memory_hints.py")
             + ". dt's tuned kernel as generated and with hints added to its loads and stores (outputs "
             "bit-identical), the best baselines and same-size copies, timed in alternation; times are "
             "medians over the rounds of `triton.testing.do_bench` medians (L2 flushed before each run); "
             "the range is the fastest and slowest round; % of same-size copy compares with a `copy_` "
             "timed apart moving the row's bytes.", ""]
    for (kernel, shape, dtype), rows in measure.by_row(records, "kernel", "shape", "dtype").items():
        dt_ms = next(r["ms"] for r in rows if r["variant"] == "dt")
        lines += [f"## {kernel} {shape}, {dtype} (`{rows[0]['schedule']}`)", ""]
        lines += render.markdown_table(
            ["variant", "ms", "range", "% of same-size copy", "speed-up over dt"],
            ([r["variant"], f"{r['ms']:.5f}", f"{min(r['rounds_ms']):.5f}-{max(r['rounds_ms']):.5f}",
              f"{r['pct_copy_same']:.0f}%", f"{dt_ms / r['ms']:.3f}x"] for r in sorted(rows, key=lambda r: r["ms"])))
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
