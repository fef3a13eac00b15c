"""The conformance suite as pytest tests: one test per run (case x schedule x sizes x dtype).

    pytest dt/conformance --dt-backend NAME [--dt-ops PATTERN] [--dt-dtypes f32,f16] [--dt-full]
                       [--dt-vendor FILE.toml] [--dt-report FILE.json|FILE.md] [-n 2]

The options and the summary table come from dt/conformance/conftest.py.
"""
import warnings

import pytest


class XPassWarning(UserWarning):
    """A run the vendor file expects to fail passed."""


def test_conformance(conformance_run, conformance_runner, record_property):
    result = conformance_runner.run(conformance_run)
    record_property("dt_conformance", result.as_dict())
    if result.status in ("unsupported", "skip"):
        pytest.skip(f"{result.status}: {result.reason or result.message}")
    if result.status == "xfail":
        pytest.xfail(f"{result.reason} [{result.describe()}]")
    if result.status in ("fail", "error"):
        pytest.fail(result.describe(), pytrace=False)
    if result.status == "xpass":
        warnings.warn(XPassWarning(f"{conformance_run.id} passed, but {result.vendor_entry} expects it to fail "
                                   f"({result.reason})"))
