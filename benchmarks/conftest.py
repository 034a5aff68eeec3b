"""Benchmark helpers: collect one table row per solve and print the table at the end; end a
run that regressed against the saved one (``./run bench --compare``) with one line and exit
status 1 instead of pytest-benchmark's traceback."""

from __future__ import annotations

import pytest
from pytest_benchmark.session import PerformanceRegression

ROWS: list[dict] = []


@pytest.fixture
def table_row():
    def add(**row):
        ROWS.append(row)
    return add


def pytest_terminal_summary(terminalreporter):
    if not ROWS:
        return
    keys = list(ROWS[0])
    terminalreporter.write_sep("=", "poetsim benchmark table")
    terminalreporter.write_line(" | ".join(keys))
    for row in ROWS:
        terminalreporter.write_line(" | ".join(
            f"{row[k]:.4g}" if isinstance(row[k], float) else str(row[k]) for k in keys))


@pytest.hookimpl(wrapper=True, specname="pytest_terminal_summary")
def pytest_terminal_summary_regression(terminalreporter):
    # pytest-benchmark raises PerformanceRegression from its own terminal summary, after
    # listing the regressed benchmarks ("Performance has regressed: ...").
    try:
        return (yield)
    except PerformanceRegression:
        pytest.exit("performance regressed against the saved benchmark run (listed above)",
                    returncode=pytest.ExitCode.TESTS_FAILED)
