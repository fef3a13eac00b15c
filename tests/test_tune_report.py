"""dt.tune.report: the figure and markdown page of a search, from Results built by hand."""
import sys

import pytest

from dt.errors import DTError
from dt.tune import report
from dt.tune.search import Result, Timed
from dt.tune.space import Candidate

PNG = b"\x89PNG\r\n\x1a\n"
# 1.0, 1.02 and exactly 1.05 are within 5% of the best; 1.06 just outside
TIMES = [1.0, 1.02, 1.05, 1.06, 1.5, 2.0, 30.0]


def timed(*times, names=None):
    names = names or [f"mm: x{i} y{i} w4 s1" for i in range(len(times))]
    return [Timed(Candidate(name, f"# {name}"), ms) for name, ms in zip(names, times)]


def result(times=TIMES, **fields) -> Result:
    fields.setdefault("baselines", {"as written": 1.5, "torch": 0.8})
    return Result(timed(*times, names=fields.pop("names", None)), fields.pop("failed", {}), fields.pop("untried", 4),
                  "7 schedules kept of 12 generated", "NVIDIA H100 80GB HBM3",
                  title="matmul x=4096 y=4096 bf16 on triton", **fields)


def test_within_counts_the_boundary():
    assert report.within(result()) == 3
    best = 0.02  # a time that is not a round binary fraction: 1.05x of it must still count
    assert report.within(result([best, best * 1.05, best * 1.0501])) == 2
    assert report.within(result([best, best * 1.05, best * 1.0501]), fraction=0.10) == 3
    assert report.within(result([0.043, 0.04515])) == 2  # 1.05x as written in decimal, above 0.043 * 1.05 in floats
    assert report.within(result([2.0])) == 1
    assert report.within(result([])) == 0


def test_within_does_not_rely_on_the_order():
    assert report.within(result(list(reversed(TIMES)))) == 3


def test_writes_a_png_and_the_page(tmp_path):
    pytest.importorskip("matplotlib")
    directory = tmp_path / "nested" / "report"
    paths = report.write(result(), directory)
    assert [p.name for p in paths] == ["schedules.png", "report.md"]
    assert all(p.parent == directory and p.exists() for p in paths)
    png = paths[0].read_bytes()
    assert png.startswith(PNG) and len(png) > 10_000
    text = paths[1].read_text(encoding="utf-8")
    assert text.startswith("# Tuning report: matmul x=4096 y=4096 bf16 on triton\n")
    assert "NVIDIA H100 80GB HBM3" in text and "7 schedules kept of 12 generated" in text
    assert "7 timed, 0 failed, 4 left untried" in text
    assert "**3 of 7 schedules within 5% of the best** (1.0000 ms)" in text
    assert "](schedules.png)" in text
    assert "| as written | 1.5000 | 1.50 |" in text and "| torch | 0.8000 | 0.80 |" in text
    assert "| 3 | 1.0500 | 1.050 | `mm: x2 y2 w4 s1` |" in text
    assert "| 7 | 30.0000 | 30.000 |" in text
    assert "## Failed" not in text


def test_page_escapes_names_and_lists_failures(tmp_path):
    pytest.importorskip("matplotlib")
    failed = {f"mm: x{i} w16": f"wrong output:\nmax error {i}" for i in range(25)}
    names = ["mm: x64 | y64 w4"] + [f"mm: x{i}" for i in range(29)]
    res = result([1.0 + i / 100 for i in range(30)], names=names, failed=failed, baselines={})
    text = report.write(res, tmp_path)[1].read_text(encoding="utf-8")
    assert "| 1 | 1.0000 | 1.000 | `mm: x64 \\| y64 w4` |" in text
    assert "## The fastest 20 schedules" in text and "| 20 |" in text and "| 21 |" not in text
    assert "## Baselines" not in text
    assert "- `mm: x0 w16`: wrong output: max error 0" in text
    assert "- `mm: x19 w16`: wrong output: max error 19" in text
    assert "mm: x20 w16" not in text and "- and 5 more" in text
    assert "**6 of 30 schedules within 5% of the best**" in text  # 1.00 .. 1.05


def test_the_page_of_a_search_cut_short_says_so(tmp_path):
    pytest.importorskip("matplotlib")
    text = report.write(result(stopped=True, baselines={}), tmp_path)[1].read_text(encoding="utf-8")
    assert "- **cut short by an interrupt**: 7 timed, 0 failed, 4 left untried; the times are the search's own " \
           "(no final rounds)" in text
    assert "(budget)" not in text

def test_a_cached_result_is_refused(tmp_path):
    res = Result(timed(0.5), {}, 0, "from the tuning cache (x.json)", "cpu", cached=True)
    with pytest.raises(DTError) as caught:
        report.write(res, tmp_path / "out")
    assert "needs a search" in caught.value.message and "--no-cache" in caught.value.hint
    assert not (tmp_path / "out").exists()


def test_without_matplotlib(tmp_path, monkeypatch):
    for name in ("matplotlib", "matplotlib.figure", "matplotlib.backends", "matplotlib.backends.backend_agg"):
        monkeypatch.setitem(sys.modules, name, None)  # None in sys.modules: the import fails
    with pytest.raises(DTError) as caught:
        report.write(result(), tmp_path / "out")
    assert caught.value.hint == "pip install matplotlib"
    assert not (tmp_path / "out").exists()
