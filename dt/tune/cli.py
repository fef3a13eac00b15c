"""`dt tune` and `dt cache` (docs/tuning.md): the subcommands of dt's command line that search
a program's schedules and manage what the searches found."""
from __future__ import annotations

import contextlib
import signal
import sys
from pathlib import Path


def add_parsers(sub, parse_sizes, parse_scalars, count):
    """The two subcommands, on dt's parser (`parse_sizes`, `parse_scalars`, `count`: its argument types)."""
    tun = sub.add_parser("tune", help="search the space of a DT file's schedules at a shape and write the fastest "
                                      "(docs/tuning.md)")
    tun.add_argument("file")
    tun.add_argument("--size", action="append", metavar="DIM=N", help="extent of a dimension (repeat)")
    tun.add_argument("--dtype", action="append", metavar="DTYPE|INPUT=DTYPE",
                     help="dtype of the inputs (default f32), or of one input (Wq=i8); repeat")
    tun.add_argument("--scalar", action="append", metavar="NAME=VALUE",
                     help="value of a scalar input to measure with (repeat; default: an index scalar 1, others random)")
    tun.add_argument("--backend", default="triton", help="where to time the schedules (default: triton)")
    tun.add_argument("--budget", type=float, default=300, help="seconds of search (default: 300)")
    tun.add_argument("--show", type=count, default=10, help="the fastest this many schedules printed")
    tun.add_argument("--no-cache", dest="cache", action="store_false",
                     help="search even where the tuning cache has this algorithm and shape bucket")
    tun.add_argument("-o", "--output", help="the fastest schedule's file (default: FILE_tuned.dt beside FILE)")
    tun.add_argument("--report", metavar="DIR",
                     help="write every timed schedule's time, plotted against the baselines (schedules.png), and a "
                          "markdown report (report.md) into DIR; searches even where the cache has an entry")
    tun.add_argument("--workers", type=int,
                     help="processes compiling ahead (default: all cores but two, at most 16, on a GPU; none on a CPU)")
    tun.add_argument("--ray", nargs="?", const=True, metavar="ADDRESS",
                     help="measure on a Ray cluster: one measuring process per GPU "
                          "(no ADDRESS: start a local one; needs pip install 'dt[ray]')")
    tun.set_defaults(fn=cmd_tune, parse_sizes=parse_sizes, parse_scalars=parse_scalars)

    cac = sub.add_parser("cache", help="list dt tune's cache, or export it to one file a team commits and import one")
    cac.add_argument("action", choices=("list", "export", "import"))
    cac.add_argument("file", nargs="?", help="the JSON file to export to or import from")
    cac.set_defaults(fn=cmd_cache)


def cmd_tune(args) -> int:
    """Search, then print the fastest schedules and write the fastest; on an interrupt (Ctrl-C, or
    SIGTERM: an outer `timeout`) write the fastest timed so far, marked as such, and exit with
    128 + the signal's number."""
    import dt
    from dt.tune.dtypes import label, parse, with_default
    from dt.tune.search import Interrupted
    prog = dt.load(args.file)
    sizes = args.parse_sizes(args.size or [])
    prog._extents({}, sizes, "--size")  # names and values, checked in the words of the flag
    dtype = with_default(prog, *parse(args.dtype or []))
    caught = []  # SIGTERM, once it stopped the search
    try:
        with _terminate_interrupts(caught), _progress(Path(args.file).name) as progress:
            result = prog.tune(sizes, dtype, args.backend, args.budget, progress=progress, cache=args.cache,
                               lookup=not args.report, workers=args.workers, ray=args.ray,
                               scalars=args.parse_scalars(args.scalar))
    except Interrupted as e:
        result = e.result
    except KeyboardInterrupt:  # before the search measured anything
        result = None
    stop = caught[0] if caught else signal.SIGINT
    if result is None or (result.stopped and not result.timed):
        print(f"dt tune: stopped by {stop.name} before any schedule ran correctly: nothing written", file=sys.stderr)
        return 128 + stop
    print(result.table(args.show))
    if args.report:
        from dt.tune import report
        for path in report.write(result, args.report):
            print(f"wrote {path}")
    out = Path(args.output) if args.output else Path(args.file).with_name(Path(args.file).stem + "_tuned.dt")
    shape = ", ".join([f"{d}={n}" for d, n in sizes.items()] + (args.scalar or []))
    best = result.best  # a DTError where nothing ran correctly
    cut = f" before {stop.name} cut the search short (no final rounds)" if result.stopped else ""
    out.write_text(f"# Tuned by `dt tune` for {shape} ({label(dtype)}) on {result.device}: "
                   f"{result.timed[0].ms:.4f} ms, the fastest of {len(result.timed)} timed{cut}.\n" + best.text)
    print(f"wrote {out}")
    if result.stopped:
        print(f"dt tune: stopped by {stop.name} after {len(result.timed)} schedules were timed: {out} holds the "
              f"fastest so far", file=sys.stderr)
        return 128 + stop
    return 0


@contextlib.contextmanager
def _terminate_interrupts(caught: list):
    """SIGTERM (an outer `timeout`, a job scheduler) raises KeyboardInterrupt while this runs, so
    that it stops the search as Ctrl-C does; `caught` gets the signal."""
    def interrupt(signum, frame):
        caught.append(signal.Signals(signum))
        raise KeyboardInterrupt
    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def _progress(name: str):
    """The search's `progress`, on standard error: a progress bar on a terminal, else a line a
    candidate, flushed (kept by a log, and by a search that an outer `timeout` cuts short)."""
    if not sys.stderr.isatty():
        yield lambda step: print(step.line(), file=sys.stderr, flush=True)
        return
    from rich.console import Console
    from rich.markup import escape
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    with Progress(TextColumn("tuning {task.fields[name]}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  TextColumn("{task.description}"), console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task("", total=None, name=escape(name))
        yield lambda step: bar.update(task, completed=step.done, total=step.total,
                                      description=escape(step.best_so_far()))


def cmd_cache(args) -> int:
    from dt.tune import cache
    from dt.tune.dtypes import label
    if args.action != "list" and not args.file:
        print(f"dt cache {args.action} needs the FILE to {'write' if args.action == 'export' else 'read'}",
              file=sys.stderr)
        return 2
    if args.action == "export":
        print(f"wrote {cache.export(args.file)} entries of {cache.directory()} to {args.file}")
    elif args.action == "import":
        print(f"added {cache.merge(args.file)} entries of {args.file} to {cache.directory()}")
    else:
        from rich.console import Console
        from rich.table import Table
        table = Table(title=f"dt tune's cache: {cache.directory()}")
        for column in ("schedule", "extents", "dtype", "backend", "device", "ms"):
            table.add_column(column, justify="right" if column == "ms" else "left")
        for e in cache.entries():
            table.add_row(str(e.get("name")), ", ".join(f"{d}={n}" for d, n in e.get("extents", {}).items()),
                          label(e.get("dtype", "")), str(e.get("backend")), str(e.get("device")),
                          f"{e.get('ms', 0):.4f}")
        Console(width=max(Console().width, 130)).print(table)
    return 0
