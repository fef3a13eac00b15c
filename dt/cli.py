"""The `dt` command line: run, check and compile DT programs."""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import warnings
from pathlib import Path

from dt import cli_inputs
from dt.cli_inputs import UsageError
from dt.dtypes import FLOAT8
from dt.dtypes import NAMES as DTYPE_CHOICES
from dt.tune import cli as tune_cli
from dt.errors import DTError, PerformanceWarning


def _describe_inputs(prog, origin: dict[str, str], given_scalars: dict, seed: int, values: dict) -> str:
    inputs = [f"{n} from {origin[n]}" if n in origin else f"{n} random (seed {seed})" for n in prog.inputs]
    scalars = [f"{n} {values[n]:g} " + (f"from {origin[n]}" if n in origin else "(--scalar)" if n in given_scalars
                                        else "(random)") for n in prog.scalars]
    return "inputs: " + (", ".join(inputs) or "-") + (f"; scalars: {', '.join(scalars)}" if scalars else "")


# ---------------------------------------------------------------- dt run


def cmd_run(args) -> int:
    import numpy as np

    import dt
    from dt.runtime import resolve_backend
    from dt.testing import compare, dtype_name, random_inputs
    from dt.tune.dtypes import checked_in, label, with_default
    from dt.tune.dtypes import parse as parse_dtypes

    prog = dt.load(args.file)
    given, origin = cli_inputs.file_inputs(prog, args.input, args.inputs)
    scalars = cli_inputs.scalars(args.scalar)
    twice = sorted(set(scalars) & set(given))
    if twice:
        raise UsageError(f"{', '.join(twice)} given both by --scalar and by {origin[twice[0]]}")
    given_sizes = cli_inputs.sizes(args.size)
    sizes = cli_inputs.extents_from_files(prog, given, given_sizes)
    missing = [d for d in prog.checked.needed_dims if d not in sizes]
    if missing:
        print(f"dt: give the extent of every dimension: missing {' '.join(f'--size {d}=N' for d in missing)}",
              file=sys.stderr)
        return 2
    # checked here, so that an error names the flag typed (random_inputs checks a dict of "extents")
    prog._extents({n: a for n, a in given.items() if n in prog.inputs}, given_sizes, "--size")
    files_dtype = next((d for d in map(dtype_name, (a for a in given.values() if isinstance(a, np.ndarray))) if d),
                       None)
    default, named = parse_dtypes(args.dtype or [])
    default = default if any("=" not in d for d in args.dtype or []) else files_dtype or "f32"
    dtype = with_default(prog, default, named) if named else default
    inputs = random_inputs(prog, sizes, dtype, args.seed)
    inputs.update(given)
    inputs.update(scalars)
    backend = resolve_backend(args.backend)
    device = None
    if backend == "triton":
        from dt.backends.triton import interpret_without_gpu
        if interpret_without_gpu():
            print("dt: no CUDA GPU: running the Triton kernels under Triton's interpreter (TRITON_INTERPRET=1), "
                  "on the CPU: slow, and its times are not a GPU's", file=sys.stderr)
        inputs, device = _to_device(inputs)
    extra = {d: n for d, n in sizes.items() if d not in prog.input_dims}
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
    print(f"{Path(args.file).name}: backend {backend}, dtype {label(dtype)}, {shape}")
    print(_describe_inputs(prog, origin, scalars, args.seed, inputs))
    timing = f"first call {first:.2f} ms (compile + run)"
    if times:
        timing += f", then {statistics.median(times):.3f} ms (median of {len(times)})"
    print(timing)
    ok = True
    for name in prog.outputs:
        out_dtype = dtype_name(outs[name]) or checked_in(dtype)  # the tolerance of what the output holds
        c = compare(outs[name], refs[name], out_dtype, args.rtol, args.atol)
        ok &= c.ok
        print(_verdict(name, c, outs[name], refs[name]))
        print("  " + _criterion(c, out_dtype, args.rtol, args.atol))
        if c.closest is not None:
            e = c.closest
            print(f"  closest to its limit: {e.index}: got {e.got:.6g}, want {e.want:.6g}, |out - ref| {e.error:.3g} "
                  f"is {100 * e.share:.0f}% of the {e.allowed:.3g} allowed there")
    return 0 if ok else 1


def _verdict(name: str, c, out, ref) -> str:
    head = f"{name}: max abs error {c.max_abs:.3g}, max rel error {c.max_rel:.3g}"
    if c.max_rel_want is not None and c.max_rel > 0:
        head += f" (where ref is {c.max_rel_want:.3g})"  # near 0, a large relative error may be within atol
    head += " -> "
    if c.ok:
        return head + "ok"
    if c.first_bad == ():
        return head + f"MISMATCH: shape {tuple(out.shape)}, want {tuple(ref.shape)}"
    return head + (f"MISMATCH: {c.bad} of {c.size} elements outside tolerance; first mismatch at {c.first_bad}: "
                   f"got {c.got:.6g}, want {c.want:.6g}")


def _criterion(c, dtype: str, rtol, atol) -> str:
    """The test each element passed or failed, with the tolerances and where they came from."""
    if rtol is None and atol is None:
        origin = f"rtol {c.rtol:g}, atol {c.atol:g} (the {dtype} defaults; --rtol, --atol)"
    elif rtol is not None and atol is not None:
        origin = f"rtol {c.rtol:g}, atol {c.atol:g} (given)"
    else:
        origin = ", ".join(f"{what} {value:g} " + ("(given)" if given is not None else f"(the {dtype} default)")
                           for what, value, given in (("rtol", c.rtol, rtol), ("atol", c.atol, atol)))
    return (f"judged by |out - ref| <= rtol*|ref| + atol*max|ref| at every element: {origin}, "
            f"max|ref| {c.scale:.3g}")


def _to_device(inputs):
    try:
        import torch
    except ImportError:
        return inputs, None
    device = "cuda" if torch.cuda.is_available() else "cpu"
    from dt.arrays import to_torch
    return {k: to_torch(v).to(device) if hasattr(v, "shape") else v for k, v in inputs.items()}, device


def _sync(device):
    if device == "cuda":
        import torch
        torch.cuda.synchronize()


# ---------------------------------------------------------------- check, compile, conformance


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
    from dt import backends
    from dt.runtime import resolve_backend
    name = "ir" if args.backend == "ir" else resolve_backend(args.backend)
    if args.interpret and name != "triton":
        raise UsageError(f"--interpret is for --backend triton (Triton's interpreter), not {name}")
    prog = dt.load(args.file)
    if args.interpret:
        text = backends.get("triton").source(prog.pipeline(args.dtype), interpret=True)
    elif name == "ir":
        text = prog.ir(args.dtype)
    else:
        text = prog.source(name, args.dtype)
    if args.output:
        _write(args.output, text)
        print(f"wrote {args.output}")
    else:
        sys.stdout.write(text)
    return 0


def cmd_lint(args) -> int:
    import dt
    from dt import backends
    prog = dt.load(args.file)
    sizes = cli_inputs.sizes(args.size or [])
    if sizes:  # names, values and what is missing, checked in the words of the flag
        prog._extents({}, sizes, "--size")
    backend = backends.get(args.backend)
    found = prog.lint(sizes, args.dtype, args.backend)
    facts = None
    if args.compiled and sizes and hasattr(backend, "compiled_facts"):
        if getattr(backend, "missing", None) is None:
            facts, compiled = prog.kernel_facts(sizes, args.dtype, args.backend)
            found += compiled
        else:
            print(f"dt: compiled facts need torch and triton: {backend.missing}", file=sys.stderr)
    for w in found:
        print(w.render(), end="\n\n")
    if facts:
        _facts_table(facts, args.file)
    shape = ", ".join(f"{d}={n}" for d, n in sizes.items()) or "no extents given"
    print(f"{args.file}: {len(found)} performance warning{'s' * (len(found) != 1)} on {args.backend} "
          f"({args.dtype}; {shape})")
    return 1 if args.strict and found else 0


def _facts_table(facts, title: str):
    from rich.console import Console
    from rich.table import Table
    table = Table(title=f"{title}: compiled kernels")
    for column in ("kernel", "Func", "warps", "registers", "spilled (stored/loaded)", "shared memory", "programs/SM",
                   "occupancy", "limited by"):
        table.add_column(column, justify="left" if column in ("kernel", "Func", "limited by") else "right")
    for f in facts:
        table.add_row(f.kernel, f.func, str(f.warps), str(f.registers), f"{f.spill_stores} / {f.spill_loads} B",
                      f"{f.shared / 1024:.1f} KiB", str(f.programs_per_sm), f"{f.occupancy:.0%}", f.limited_by)
    Console(width=max(Console().width, 130)).print(table)


def cmd_conformance(args) -> int:
    from dt.conformance.runner import run_command
    return run_command(backend=args.backend, ops=args.ops, dtypes=args.dtypes, full=args.full, report=args.report,
                       vendor=args.vendor, list_only=args.list)


def cmd_grad(args) -> int:
    import dt
    prog = dt.load(args.file)
    wrt = [n for item in args.wrt or () for n in item.split(",")] or None
    save = [n for item in args.save or () for n in item.split(",")]
    if save and not args.forward:
        raise UsageError("--save needs --forward FILE: where the forward program with the saved outputs goes")
    result = dt.grad(prog, wrt=wrt, save=save)
    forward, backward = result if save else (None, result)
    if forward is not None:
        _write(args.forward, forward.dt_source())
    if args.output:
        _write(args.output, backward.dt_source())
    else:
        print(backward.dt_source(), end="")
    return 0


def _write(path: str, text: str):
    try:
        Path(path).write_text(text)
    except OSError as e:  # also a failed write after the file opened (a full disk), which names no file
        raise UsageError(f"cannot write {path}: {e.strerror or e}") from None


def build_parser() -> argparse.ArgumentParser:
    from dt import __version__
    parser = argparse.ArgumentParser(prog="dt", description="Run, check and compile DT kernels.")
    parser.add_argument("--version", action="version", version=f"dt {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run a DT file on inputs (seeded random ones, or read from files) and compare "
                                     "with the reference")
    run.add_argument("file")
    run.add_argument("--size", action="append", metavar="DIM=N",
                     help="extent of a dimension (repeat); dimensions of inputs read from files need none")
    run.add_argument("--dtype", action="append", metavar="DTYPE|INPUT=DTYPE",
                     help="dtype of the random inputs (default: that of the inputs read from files, else f32), "
                          "or of one input (Wq=i8); repeat")
    run.add_argument("--backend", help="interp, numba, triton, ... (default: $DT_BACKEND, else the default); "
                                       "triton without a GPU runs under Triton's interpreter")
    run.add_argument("--input", action="append", metavar="NAME=FILE.npy",
                     help="an input read from a .npy file (repeat)")
    run.add_argument("--inputs", action="append", metavar="FILE.npz",
                     help="inputs (and scalars) read from a .npz file, each under its name (repeat)")
    run.add_argument("--scalar", action="append", metavar="NAME=VALUE", help="value of a scalar input")
    run.add_argument("--seed", type=cli_inputs.count, default=0, help="seed of the random inputs (an integer >= 0)")
    run.add_argument("--repeat", type=cli_inputs.count, default=3, help="timed runs after the first call")
    run.add_argument("--rtol", type=cli_inputs.tolerance, help="relative tolerance (default: the output dtype's)")
    run.add_argument("--atol", type=cli_inputs.tolerance,
                     help="absolute tolerance, as a fraction of max|reference| (default: the output dtype's)")
    run.set_defaults(fn=cmd_run)

    chk = sub.add_parser("check", help="parse and validate a DT file without running it")
    chk.add_argument("file")
    chk.set_defaults(fn=cmd_check)

    comp = sub.add_parser("compile", help="write the code a backend generates for a DT file")
    comp.add_argument("file")
    comp.add_argument("--backend", help="interp, numba, triton, ... (triton needs no GPU to generate its module), "
                                        "or ir: the scheduled IR every backend renders, as text")
    comp.add_argument("--dtype", choices=DTYPE_CHOICES + FLOAT8, default="f32")
    comp.add_argument("--interpret", action="store_true",
                      help="triton: the module for Triton's interpreter (no libdevice), to run on a CPU under "
                           "TRITON_INTERPRET=1 (default: the module for a GPU)")
    comp.add_argument("-o", "--output", help="file to write (default: standard output)")
    comp.set_defaults(fn=cmd_compile)

    lnt = sub.add_parser("lint", help="print the performance warnings of a DT file's schedule and what the compiler "
                                      "makes of its kernels (registers, spills, shared memory, occupancy)")
    lnt.add_argument("file")
    lnt.add_argument("--size", action="append", metavar="DIM=N",
                     help="extent of a dimension (repeat); without extents, only the warnings no extent decides")
    lnt.add_argument("--dtype", choices=DTYPE_CHOICES + FLOAT8, default="f32", help="dtype of the inputs")
    lnt.add_argument("--backend", default="triton", help="the backend whose kernels to lint (default: triton; it "
                                                          "needs no GPU: kernels compile for an H100)")
    lnt.add_argument("--no-compiled", dest="compiled", action="store_false",
                     help="skip compiling the kernels (static warnings only)")
    lnt.add_argument("--strict", action="store_true", help="exit with 1 when there is a warning (for CI)")
    lnt.set_defaults(fn=cmd_lint)

    grd = sub.add_parser("grad", help="write the gradient program of a DT file (its algorithm differentiated, "
                                      "as DT text with a default schedule)")
    grd.add_argument("file")
    grd.add_argument("--wrt", action="append", metavar="A[,B...]",
                     help="the inputs to differentiate with respect to (default: every input that is not an index)")
    grd.add_argument("--save", action="append", metavar="F[,G...]",
                     help="Funcs the forward program stores as extra outputs and the gradient program reads "
                          "instead of recomputing them (needs --forward)")
    grd.add_argument("--forward", metavar="FILE", help="with --save: where the forward program with them goes")
    grd.add_argument("-o", "--output", help="file to write (default: standard output)")
    grd.set_defaults(fn=cmd_grad)

    tune_cli.add_parsers(sub, cli_inputs.sizes, cli_inputs.scalars, cli_inputs.count)
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


def _format_warning(message, category, filename, lineno, line=None, _plain=warnings.formatwarning) -> str:
    """dt's own warnings as `dt: warning: ...` (where in dt they were raised says nothing to a user);
    a performance warning as its diagnostic."""
    if isinstance(message, PerformanceWarning):
        return message.render() + "\n"
    if category.__module__.split(".")[0] == "dt":
        return f"dt: warning: {message}\n"
    return _plain(message, category, filename, lineno, line)


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    plain, warnings.formatwarning = warnings.formatwarning, _format_warning
    try:
        code = args.fn(args)
        sys.stdout.flush()  # a closed pipe shows here, where it is handled, not at exit
        return code
    except DTError as e:
        print(e.render(), file=sys.stderr)
        return 2
    except UsageError as e:
        print(f"dt: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # The reader of our output went away (`dt conformance --list | head`): stop quietly. Point
        # stdout at /dev/null so that the interpreter's last flush at exit cannot fail again
        # (the recipe of Python's documentation of SIGPIPE).
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except OSError as e:  # a file a command reads or writes (`dt conformance --report`, `dt tune -o`)
        print(f"dt: {e.strerror or e}" + (f": {e.filename}" if e.filename else ""), file=sys.stderr)
        return 2
    finally:
        warnings.formatwarning = plain


if __name__ == "__main__":
    sys.exit(main())
