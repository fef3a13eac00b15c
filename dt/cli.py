"""The `dt` command line: run, check and compile DT programs."""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

from dt.errors import DTError

DTYPE_CHOICES = ("f32", "f16", "bf16", "f64")


def _sizes(pairs: list[str]) -> dict[str, int]:
    sizes = {}
    for pair in pairs or ():
        name, sep, value = pair.partition("=")
        if not sep or not value.strip().isdigit():
            raise SystemExit(f"dt: --size takes name=integer, got {pair!r}")
        sizes[name.strip()] = int(value)
    return sizes


def _scalars(pairs: list[str]) -> dict[str, float]:
    scalars = {}
    for pair in pairs or ():
        name, sep, value = pair.partition("=")
        try:
            scalars[name.strip()] = float(value)
        except ValueError:
            raise SystemExit(f"dt: --scalar takes name=number, got {pair!r}") from None
    return scalars


def _needed_dims(prog) -> list[str]:
    from dt.ir import algorithm as A
    dims: list[str] = []
    for f in prog.checked.funcs.values():
        for d in list(f.dims) + [e.dim for e in A.walk(f.expr) if isinstance(e, (A.Len, A.DimRef, A.Reduce))] + \
                [d for e in A.walk(f.expr) if isinstance(e, A.Access) for d in e.indices]:
            if d not in dims:
                dims.append(d)
    return dims


def cmd_run(args) -> int:
    import dt
    from dt.runtime import resolve_backend
    from dt.testing import compare, random_inputs

    prog = dt.load(args.file)
    sizes = _sizes(args.size)
    missing = [d for d in _needed_dims(prog) if d not in sizes]
    if missing:
        print(f"dt: give the extent of every dimension: missing {' '.join(f'--size {d}=N' for d in missing)}",
              file=sys.stderr)
        return 2
    inputs = random_inputs(prog, sizes, args.dtype, args.seed)
    inputs.update({k: v for k, v in _scalars(args.scalar).items()})
    backend = resolve_backend(args.backend)
    device = None
    if backend == "triton":
        inputs, device = _to_device(inputs)
    extra = {d: n for d, n in sizes.items() if not any(d in a.indices for a in prog._accesses)}
    start = time.perf_counter()
    out = prog(backend=backend, sizes=extra or None, **inputs)
    _sync(device)
    first = (time.perf_counter() - start) * 1e3
    times = []
    for _ in range(args.repeat):
        start = time.perf_counter()
        prog(backend=backend, sizes=extra or None, **inputs)
        _sync(device)
        times.append((time.perf_counter() - start) * 1e3)
    ref = prog.reference(sizes=extra or None, **inputs)
    outs = out if isinstance(out, dict) else {prog.outputs[0]: out}
    refs = ref if isinstance(ref, dict) else {prog.outputs[0]: ref}
    shape = " ".join(f"{d}={n}" for d, n in sizes.items())
    print(f"{Path(args.file).name}: backend {backend}, dtype {args.dtype}, {shape}")
    timing = f"first call {first:.2f} ms (compile + run)"
    if times:
        timing += f", then {statistics.median(times):.3f} ms (median of {len(times)})"
    print(timing)
    ok = True
    for name in prog.outputs:
        c = compare(outs[name], refs[name], args.dtype)
        ok &= c.ok
        print(f"{name}: {c} -> {'ok' if c.ok else 'MISMATCH'}")
    return 0 if ok else 1


def _to_device(inputs):
    try:
        import torch
    except ImportError:
        return inputs, None
    device = "cuda" if torch.cuda.is_available() else "cpu"
    from dt.runtime import _to_torch
    return {k: _to_torch(v).to(device) if hasattr(v, "shape") else v for k, v in inputs.items()}, device


def _sync(device):
    if device == "cuda":
        import torch
        torch.cuda.synchronize()


def cmd_check(args) -> int:
    import dt
    prog = dt.load(args.file)
    pipeline = prog.pipeline("f32")
    kernels = ", ".join(k.name for k in pipeline.kernels)
    print(f"{Path(args.file).name}: ok — {len(pipeline.kernels)} kernel(s) ({kernels}); "
          f"inputs {', '.join(prog.inputs) or '-'}; scalars {', '.join(prog.scalars) or '-'}; "
          f"outputs {', '.join(prog.outputs)}")
    return 0


def cmd_compile(args) -> int:
    import dt
    from dt.runtime import resolve_backend
    prog = dt.load(args.file)
    text = prog.source(resolve_backend(args.backend), args.dtype)
    if args.output:
        Path(args.output).write_text(text)
        print(f"wrote {args.output}")
    else:
        sys.stdout.write(text)
    return 0


def cmd_conformance(args) -> int:
    from conformance.runner import run_command
    return run_command(backend=args.backend, ops=args.ops, dtypes=args.dtypes, full=args.full, report=args.report,
                       vendor=args.vendor, list_only=args.list)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dt", description="Run, check and compile DT kernels.")
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run a DT file on seeded random inputs and compare with the reference")
    run.add_argument("file")
    run.add_argument("--size", action="append", metavar="DIM=N", help="extent of a dimension (repeat)")
    run.add_argument("--dtype", choices=DTYPE_CHOICES, default="f32")
    run.add_argument("--backend", help="interp, numba, triton, ... (default: $DT_BACKEND, else the default)")
    run.add_argument("--scalar", action="append", metavar="NAME=VALUE", help="value of a scalar input")
    run.add_argument("--seed", type=int, default=0)
    run.add_argument("--repeat", type=int, default=3, help="timed runs after the first call")
    run.set_defaults(fn=cmd_run)

    chk = sub.add_parser("check", help="parse and validate a DT file without running it")
    chk.add_argument("file")
    chk.set_defaults(fn=cmd_check)

    comp = sub.add_parser("compile", help="write the code a backend generates for a DT file")
    comp.add_argument("file")
    comp.add_argument("--backend", help="interp, numba, triton, ...")
    comp.add_argument("--dtype", choices=DTYPE_CHOICES, default="f32")
    comp.add_argument("-o", "--output", help="file to write (default: standard output)")
    comp.set_defaults(fn=cmd_compile)

    conf = sub.add_parser("conformance", help="certify a backend: run the conformance suite on it")
    conf.add_argument("--backend", help="the backend to certify (default: $DT_BACKEND, else interp)")
    conf.add_argument("--ops", action="append", metavar="PATTERN",
                      help="only cases whose name or op matches this glob, e.g. 'rmax*' (repeat)")
    conf.add_argument("--dtypes", nargs="+", choices=DTYPE_CHOICES, help="only these dtypes (default: all)")
    conf.add_argument("--full", action="store_true", help="full sizes, meant for GPUs (default: small sizes)")
    conf.add_argument("--report", metavar="FILE", help="also write FILE.json or FILE.md")
    conf.add_argument("--vendor", metavar="FILE", help="the backend's skip/xfail file (TOML, a reason per entry)")
    conf.add_argument("--list", action="store_true", help="list the planned runs without running them")
    conf.set_defaults(fn=cmd_conformance)
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.fn(args)
    except DTError as e:
        print(e.render(), file=sys.stderr)
        return 2
    except FileNotFoundError as e:
        print(f"dt: {e.strerror}: {e.filename}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
