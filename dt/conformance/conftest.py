"""pytest plugin for the conformance suite: `pytest dt/conformance --dt-backend NAME`.

Adds the --dt-* options, parametrizes dt/conformance/test_suite.py over the planned runs, and
ends the session with the same op x dtype table as `dt conformance`. A backend that does not
load, a bad vendor file, or a selection matching no case stops the session with the reason;
a session in which no run executed fails.
"""
import os

import pytest

from dt import backends
from dt.conformance import runner as R
from dt.conformance import vendor
from dt.dtypes import NAMES as DTYPES
from dt.errors import DTBackendError

_STATE = pytest.StashKey[dict]()


def pytest_addoption(parser):
    group = parser.getgroup("dt conformance")
    group.addoption("--dt-backend", default=None,
                    help="backend to certify (default: $DT_BACKEND, else interp)")
    group.addoption("--dt-ops", action="append", metavar="PATTERN",
                    help="only cases whose name or op matches this glob (repeat, or comma-separate)")
    group.addoption("--dt-dtypes", metavar="LIST", help="comma-separated dtypes (default: all)")
    group.addoption("--dt-full", action="store_true", help="full sizes, meant for GPUs")
    group.addoption("--dt-vendor", metavar="FILE", help="vendor skip/xfail file (TOML)")
    group.addoption("--dt-report", metavar="FILE", help="write a report: FILE.json or FILE.md")


def pytest_configure(config):
    name = config.getoption("--dt-backend") or os.environ.get("DT_BACKEND") or "interp"
    dtypes = [d for d in (config.getoption("--dt-dtypes") or "").split(",") if d]
    unknown = [d for d in dtypes if d not in DTYPES]
    if unknown:
        raise pytest.UsageError(f"--dt-dtypes: unknown dtype(s) {', '.join(unknown)}; use {', '.join(DTYPES)}")
    report = config.getoption("--dt-report")
    if report and os.path.splitext(report)[1] not in (".json", ".md"):
        raise pytest.UsageError(f"--dt-report writes FILE.json or FILE.md, not {report!r}")
    try:
        expectations = vendor.load(config.getoption("--dt-vendor")) if config.getoption("--dt-vendor") \
            else vendor.Expectations()
    except vendor.VendorFileError as e:
        raise pytest.UsageError(str(e)) from None
    try:
        backend = R.load_backend(name)
    except DTBackendError as e:
        failures = "".join(f"\nbackend '{n}' failed to load: {why}" for n, why in backends.failures().items())
        raise pytest.UsageError(e.render() + failures) from None
    ops = config.getoption("--dt-ops")
    runs = R.plan(R.CATALOGUE, ops=ops, dtypes=dtypes or None, full=config.getoption("--dt-full"))
    if not runs:
        raise pytest.UsageError(f"no conformance case matches --dt-ops {ops} --dt-dtypes {dtypes}: zero cases "
                                f"would run")
    config.stash[_STATE] = {"backend": backend, "runs": runs, "expectations": expectations, "report": report,
                            "zero": None}


def pytest_generate_tests(metafunc):
    if "conformance_run" in metafunc.fixturenames:
        runs = metafunc.config.stash[_STATE]["runs"]
        metafunc.parametrize("conformance_run", runs, ids=[r.id for r in runs])


@pytest.fixture(scope="session")
def conformance_runner(pytestconfig):
    state = pytestconfig.stash[_STATE]
    return R.Runner(state["backend"], state["expectations"])


_RESULTS: list[dict] = []  # every finished run, as Result.as_dict(); the hook below gets no config


def pytest_runtest_logreport(report):
    if report.when == "call":  # teardown reports repeat the test's properties
        _RESULTS.extend(value for key, value in report.user_properties if key == "dt_conformance")


def _is_worker(config) -> bool:
    return hasattr(config, "workerinput")  # pytest-xdist: workers forward results to the controller


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session):
    if _is_worker(session.config) or _STATE not in session.config.stash:
        return
    state = session.config.stash[_STATE]
    state["zero"] = R.zero_ran_message(state["backend"].name, _RESULTS) if _RESULTS else None
    if state["zero"] and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter, config):
    if _is_worker(config) or _STATE not in config.stash or not _RESULTS:
        return
    state = config.stash[_STATE]
    backend = state["backend"]
    warnings = R.vendor_warnings(state["expectations"], _RESULTS)
    terminalreporter.section(f"dt conformance: backend {backend.name}")
    header, rows = R.summary_table(_RESULTS)
    terminalreporter.write_line("| " + " | ".join(header) + " |")
    for row in rows:
        terminalreporter.write_line("| " + " | ".join(row) + " |")
    terminalreporter.write_line(R.totals_line(backend.name, _RESULTS))
    for w in warnings:
        terminalreporter.write_line(f"warning: {w}", yellow=True)
    if state["report"]:
        R.write_report(state["report"], backend, _RESULTS, warnings, sum(r["seconds"] for r in _RESULTS),
                       {"ops": config.getoption("--dt-ops"), "dtypes": config.getoption("--dt-dtypes"),
                        "full": config.getoption("--dt-full"), "vendor": config.getoption("--dt-vendor")})
        terminalreporter.write_line(f"wrote {state['report']}")
    if state["zero"]:
        terminalreporter.write_line(state["zero"], red=True, bold=True)
