"""The report of a search (issue 31), as `dt tune --report DIR` writes it: a figure of every
timed schedule's time, fastest first, with the baselines drawn as lines and the band within 5%
of the best shaded (schedules.png), and a markdown page with the counts and tables (report.md).

    result = prog.tune({"x": 4096, "y": 4096}, "bf16", budget=300, cache=False)
    for path in report.write(result, "softmax_report"):
        print(path)
"""
from __future__ import annotations

from pathlib import Path

from dt.errors import DTError

NEAR = 0.05  # "within 5% of the best": how flat the space is near its best
ROWS = 20  # schedules in the table, failures listed
FIGURE = "schedules.png"


def within(result, fraction: float = NEAR) -> int:
    """How many timed schedules take at most (1 + fraction) times the best one's time."""
    if not result.timed:
        return 0
    # the relative slack keeps a time of exactly 1.05x the best inside despite float rounding
    limit = min(t.ms for t in result.timed) * (1 + fraction) * (1 + 1e-9)
    return sum(t.ms <= limit for t in result.timed)


def write(result, directory) -> list[Path]:
    """Write schedules.png and report.md into `directory` (created); return their paths."""
    if result.cached:  # one cached entry: no spread of schedules to show
        raise DTError("a report needs a search: this result is the tuning cache's one entry", None,
                      "run again with --no-cache")
    try:  # not a core dependency; the Agg canvas directly, so the user's pyplot backend is left alone
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise DTError("the tuning report's figure needs matplotlib, which is not installed", None,
                      "pip install matplotlib") from None
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    figure, page = directory / FIGURE, directory / "report.md"
    _plot(result, figure, Figure, FigureCanvasAgg)
    page.write_text(_markdown(result), encoding="utf-8")
    return [figure, page]


def _plot(result, path: Path, Figure, Canvas) -> None:
    times = sorted(t.ms for t in result.timed)
    fig = Figure(figsize=(8, 4.5), dpi=150)
    Canvas(fig)
    ax = fig.add_subplot()
    if times:
        best = times[0]
        ax.plot(range(1, len(times) + 1), times, marker=".", markersize=4, linewidth=0.8, color="C0",
                label=f"{len(times)} schedules")
        ax.axhspan(best, best * (1 + NEAR), color="C2", alpha=0.25,
                   label=f"within 5% of the best: {within(result)} of {len(times)}")
    else:
        ax.text(0.5, 0.5, "no schedule ran correctly", transform=ax.transAxes, ha="center")
    for i, (name, ms) in enumerate(result.baselines.items()):
        ax.axhline(ms, color=f"C{(i + 3) % 10}", linestyle="--", linewidth=1.2, label=f"{name}: {ms:.4g} ms")
    values = [v for v in times + list(result.baselines.values()) if v > 0]
    if values and max(values) / min(values) > 10:  # a slow tail would flatten the fast end
        ax.set_yscale("log")
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.set_xlabel("schedule, fastest first (rank)")
    ax.set_ylabel("time (ms, median)")
    ax.set_title(", ".join(s for s in (result.title, result.device) if s) or "tuning search", fontsize=10)
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    fig.savefig(path)


def _line(text: str) -> str:
    return " ".join(str(text).split())  # a reason may span lines; a list item or cell may not


def _cell(text: str) -> str:
    return _line(text).replace("|", "\\|")  # a table's column break otherwise, even in a code span


def _markdown(result) -> str:
    timed = sorted(result.timed, key=lambda t: t.ms)
    best = timed[0].ms if timed else None
    lines = [f"# Tuning report: {result.title or 'search'}", "",
             f"- device: {result.device}", f"- space: {result.summary}",
             f"- **cut short by an interrupt**: {len(timed)} timed, {len(result.failed)} failed, {result.untried} left "
             f"untried; the times are the search's own (no final rounds)" if result.stopped else
             f"- {len(timed)} timed, {len(result.failed)} failed, {result.untried} left untried (budget)",
             f"- **{within(result)} of {len(timed)} schedules within 5% of the best**"
             + (f" ({best:.4f} ms)" if timed else ""), "",
             f"![every schedule's time, fastest first]({FIGURE})", ""]
    if result.baselines and best:
        lines += ["## Baselines", "", "| baseline | ms | speed-up of the best |", "|---|---:|---:|"]
        lines += [f"| {_cell(name)} | {ms:.4f} | {ms / best:.2f} |" for name, ms in result.baselines.items()]
        lines.append("")
    if timed:
        lines += [f"## The fastest {min(ROWS, len(timed))} schedules", "",
                  "| rank | ms | relative to the best | schedule |", "|---:|---:|---:|---|"]
        # three decimals: at two, 1.0504x would read as 1.05, inside the 5% it is not
        lines += [f"| {i} | {t.ms:.4f} | {t.ms / best:.3f} | `{_cell(t.candidate.name)}` |"
                  for i, t in enumerate(timed[:ROWS], 1)]
        lines.append("")
    if result.failed:
        lines += ["## Failed", ""]
        lines += [f"- `{_line(name)}`: {_line(why)}" for name, why in list(result.failed.items())[:ROWS]]
        if len(result.failed) > ROWS:
            lines.append(f"- and {len(result.failed) - ROWS} more")
        lines.append("")
    return "\n".join(lines)
