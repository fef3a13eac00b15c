"""`dt tune` and `dt cache` (docs/tuning.md): the subcommands of dt's command line that search
a program's schedules and manage what the searches found."""
from __future__ import annotations

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
    import dt
    from rich.progress import Progress
    from dt.tune.dtypes import label, parse, with_default
    prog = dt.load(args.file)
    sizes = args.parse_sizes(args.size or [])
    dtype = with_default(prog, *parse(args.dtype or []))
    with Progress(transient=True) as bar:
        task = bar.add_task(f"tuning {Path(args.file).name}", total=None)

        def progress(done: int, total: int, name: str):
            bar.update(task, completed=done, total=total, description=f"{name}")
        result = prog.tune(sizes, dtype, args.backend, args.budget, progress=progress, cache=args.cache,
                           lookup=not args.report, workers=args.workers, ray=args.ray,
                           scalars=args.parse_scalars(args.scalar))
    print(result.table(args.show))
    if args.report:
        from dt.tune import report
        for path in report.write(result, args.report):
            print(f"wrote {path}")
    out = Path(args.output) if args.output else Path(args.file).with_name(Path(args.file).stem + "_tuned.dt")
    shape = ", ".join([f"{d}={n}" for d, n in sizes.items()] + (args.scalar or []))
    best = result.best  # a DTError where nothing ran correctly
    out.write_text(f"# Tuned by `dt tune` for {shape} ({label(dtype)}) on {result.device}: "
                   f"{result.timed[0].ms:.4f} ms, the fastest of {len(result.timed)} timed.\n" + best.text)
    print(f"wrote {out}")
    return 0


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
