"""Benchmark helpers: collect one table row per solve and print the table at the end."""

from __future__ import annotations

import pytest

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
