"""The cost of each performance warning (docs/performance-warnings.md), measured: for each, a
schedule that raises it and the schedule its hint gives (benchmarks/gpu/warnings/*.dt), timed
side by side on the GPU with the harness's cold timer, in rounds; each pair's outputs agree.
Where the fix is a shape (padded rows) the shapes differ and the table compares time per
element. Prints a markdown table (and writes it with the raw records under --out).

    python benchmarks/gpu/warning_costs.py --out DIR [--rounds 3] [--only CODE ...]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import dt

HERE = Path(__file__).resolve().parent / "warnings"
ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Pair:
    code: str
    slow: str  # a .dt file of HERE (or a path from the repository's root)
    fixed: str
    sizes: dict
    dtype: str
    fixed_sizes: dict | None = None  # when the fix is a shape
    env: dict = field(default_factory=dict)  # environment of the slow schedule's compile
    fixed_env: dict = field(default_factory=dict)
    scalars: dict = field(default_factory=dict)


TMA_MATMUL = "benchmarks/gpu/schedules/batched_matmul_tma.dt"
PAIRS = [
    Pair("not-on-matrix-units", "batched_product.dt", "batched_product_fixed.dt",
         dict(b=8, x=512, y=512, k=512), "bf16"),
    Pair("not-on-matrix-units", "small_product.dt", "small_product_fixed.dt", dict(x=4096, y=4096, k=4096), "bf16"),
    Pair("not-on-matrix-units", "examples/matmul.dt", "examples/matmul.dt", dict(x=4096, y=4096, k=4096), "f32",
         env={"DT_TRITON_F32_DOT": "ieee"}, fixed_env={"DT_TRITON_F32_DOT": "tf32"}),
    Pair("padded-tile", "padded_product.dt", "padded_product_fixed.dt", dict(x=4096, y=4096, k=4096), "bf16"),
    Pair("registers", "wide_row.dt", "wide_row_fixed.dt", dict(r=4096, c=65536), "bf16"),
    Pair("recomputed", "recomputed.dt", "recomputed_fixed.dt", dict(r=4096, c=16384), "bf16"),
    Pair("uncoalesced", "uncoalesced.dt", "uncoalesced_fixed.dt", dict(x=8192, y=8192), "bf16"),
    Pair("one-lane-tiles", "one_lane.dt", "one_lane_fixed.dt", dict(x=256, y=256), "f32"),
    Pair("too-few-programs", "few_programs.dt", "few_programs_fixed.dt", dict(x=4096, y=4096), "bf16"),
    Pair("nothing-to-pipeline", "no_pipeline.dt", "no_pipeline_fixed.dt", dict(x=8192, y=8192), "bf16"),
    Pair("nothing-to-stream", "no_stream.dt", "no_stream_fixed.dt", dict(x=4096, y=16384), "bf16"),
    Pair("unaligned-rows", "unaligned.dt", "unaligned.dt", dict(r=16384, c=1001), "bf16",
         fixed_sizes=dict(r=16384, c=1008)),
    Pair("tma-fallback", "tma_rows.dt", "tma_rows.dt", dict(x=8192, y=4100), "f16", fixed_sizes=dict(x=8192, y=4104),
         scalars=dict(alpha=0.5)),
    Pair("tma-fallback", TMA_MATMUL, TMA_MATMUL, dict(b=8, x=2048, y=2048, k=2052), "bf16",
         fixed_sizes=dict(b=8, x=2048, y=2048, k=2056)),
]


def path(name: str) -> Path:
    return ROOT / name if "/" in name else HERE / name


def call(prog, sizes: dict, dtype: str, scalars: dict, device):
    """A function running prog on fixed random inputs of these extents."""
    import torch
    g = torch.Generator(device=device).manual_seed(0)
    torch_dtype = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[dtype]
    inputs = {}
    for name in prog.inputs:
        dims = prog.checked.input_axes[name]
        inputs[name] = torch.randn([sizes[d] for d in dims], generator=g, device=device).to(torch_dtype)
    return lambda: prog(**inputs, **scalars)


def with_env(env: dict, fn):
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        return fn()
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def elements(sizes: dict) -> int:
    n = 1
    for v in sizes.values():
        n *= v
    return n


def measure_pair(pair: Pair, timer, rounds: int, device) -> dict:
    slow_prog, fixed_prog = dt.load(path(pair.slow)), dt.load(path(pair.fixed))
    fixed_sizes = pair.fixed_sizes or pair.sizes
    warned, facts = {}, {}
    for side, prog, sizes, env in (("slow", slow_prog, pair.sizes, pair.env),
                                   ("fixed", fixed_prog, fixed_sizes, pair.fixed_env)):
        compiled, found = with_env(env, lambda: prog.kernel_facts(sizes, pair.dtype))
        facts[side] = [asdict(f) for f in compiled]
        warned[side] = [w.code for w in with_env(env, lambda: prog.lint(sizes, pair.dtype)) + found]
    slow = call(slow_prog, pair.sizes, pair.dtype, pair.scalars, device)
    fixed = call(fixed_prog, fixed_sizes, pair.dtype, pair.scalars, device)
    out_slow = with_env(pair.env, slow)  # compiles under the pair's environment
    out_fixed = with_env(pair.fixed_env, fixed)
    if pair.fixed_sizes is None:
        a, b = out_slow.float(), out_fixed.float()
        agree = float((a - b).norm() / b.norm().clamp_min(1e-30))
    else:
        agree = None
    times = {"slow": [], "fixed": []}
    for _ in range(rounds):
        times["slow"].append(timer(slow))
        times["fixed"].append(timer(fixed))
    ms = {k: statistics.median(v) for k, v in times.items()}
    per_element = pair.fixed_sizes is not None
    ratio = (ms["slow"] / elements(pair.sizes)) / (ms["fixed"] / elements(fixed_sizes)) if per_element \
        else ms["slow"] / ms["fixed"]
    return {"code": pair.code, "slow": pair.slow, "fixed": pair.fixed, "sizes": pair.sizes, "fixed_sizes": fixed_sizes,
            "dtype": pair.dtype, "env": pair.env, "fixed_env": pair.fixed_env, "ms": ms, "rounds": times,
            "slowdown": ratio, "per_element": per_element, "relative_difference": agree, "warned": warned,
            "facts": facts}


def recompiles(device) -> dict:
    """Eight calls of one program at eight row lengths (each compiles its kernels again) against
    eight calls at one padded length, wall time, from a fresh program each."""
    import torch
    lengths = [1000 + 8 * i for i in range(8)]
    result = {}
    for label, shapes in (("eight shapes", lengths), ("one padded shape", [1064] * 8)):
        prog = dt.load(HERE / "unaligned.dt")
        calls = [call(prog, dict(r=4096, c=c), "bf16", {}, device) for c in shapes]
        torch.cuda.synchronize()
        begin = time.perf_counter()
        for fn in calls:
            fn()
        torch.cuda.synchronize()
        result[label] = (time.perf_counter() - begin) * 1e3
    return {"code": "recompiles", "ms": result, "slowdown": result["eight shapes"] / result["one padded shape"]}


def table(records: list[dict], device: str) -> str:
    lines = [f"Measured on {device}: median of each round's cold-timer median, rounds alternating the two.", "",
             "| warning | raised by | fixed by | shape, dtype | raised (ms) | fixed (ms) | slowdown |",
             "|---|---|---|---|---:|---:|---:|"]
    for r in records:
        if r["code"] == "recompiles":
            lines.append(f"| recompiles | 8 calls, 8 row lengths | 8 calls, 1 padded length | 4096 rows, bf16 | "
                         f"{r['ms']['eight shapes']:.0f} | {r['ms']['one padded shape']:.0f} | "
                         f"{r['slowdown']:.0f}x |")
            continue
        shape = ", ".join(f"{d}={n}" for d, n in r["sizes"].items())
        fixed = r["fixed"] + (" at " + ", ".join(f"{d}={n}" for d, n in r["fixed_sizes"].items())
                              if r["per_element"] else "") + (f" ({r['fixed_env']})" if r["fixed_env"] else "")
        slow = r["slow"] + (f" ({r['env']})" if r["env"] else "")
        per = " an element" if r["per_element"] else ""
        lines.append(f"| {r['code']} | {slow} | {fixed} | {shape}, {r['dtype']} | {r['ms']['slow']:.3f} | "
                     f"{r['ms']['fixed']:.3f} | {r['slowdown']:.2f}x{per} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", nargs="+", help="only these warning codes")
    args = parser.parse_args(argv)
    import torch  # the GPU's: only measuring needs it (the tests read PAIRS)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from measure import Timer, device_description
    device = torch.device("cuda")
    info = device_description(device)
    timer = Timer("cold")
    records = []
    for pair in PAIRS:
        if args.only and pair.code not in args.only:
            continue
        try:
            records.append(measure_pair(pair, timer, args.rounds, device))
        except Exception as e:  # one pair's failure is reported, the others still run
            records.append({"code": pair.code, "slow": pair.slow, "error": f"{type(e).__name__}: {e}"[:500]})
            print(f"{pair.code} {pair.slow}: {records[-1]['error']}", file=sys.stderr)
            continue
        print(f"{pair.code} {pair.slow}: {records[-1]['ms']} {records[-1]['slowdown']:.2f}x "
              f"(warned {records[-1]['warned']}, differ {records[-1]['relative_difference']})", flush=True)
    if not args.only or "recompiles" in args.only:
        records.append(recompiles(device))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "warnings.json").write_text(json.dumps({"device": info, "records": records}, indent=1))
    text = table([r for r in records if "error" not in r], info["device"])
    (args.out / "warnings.md").write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
