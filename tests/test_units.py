"""Parsing and formatting of quantities."""

from __future__ import annotations

import pytest

from poetsim.errors import InputError
from poetsim.units import format_bytes, format_quantity, parse_bytes


@pytest.mark.parametrize("text, expected", [
    ("4096", 4096), ("256KiB", 262144), ("256 KB", 256000), ("1.5MB", 1_500_000),
    ("2GiB", 2 << 30), ("10.2", 11), ("1e3", 1000),
])
def test_parse_bytes(text, expected):
    assert parse_bytes(text) == expected


@pytest.mark.parametrize("text", ["", "abc", "12 parsecs", "-5", "0", "KB"])
def test_parse_bytes_rejects(text):
    with pytest.raises(InputError, match="ram = "):
        parse_bytes(text, what="ram")


def test_format():
    assert format_bytes(262144) == "256.0 KiB"
    assert format_bytes(100) == "100 B"
    assert format_quantity(0.0123, "J") == "12.3 mJ"
    assert format_quantity(2.5e9, "FLOP") == "2.5 GFLOP"
    assert format_quantity(0, "s") == "0 s"


def test_a_deadline_is_met_up_to_float_rounding_only():
    from poetsim.units import DEADLINE_RTOL, meets_deadline

    plain = 0.0025155272307692306
    assert meets_deadline(plain + 4.336808689942018e-19, plain)  # the old 'late' golden
    assert meets_deadline(plain, plain)
    assert not meets_deadline(plain * (1 + 10 * DEADLINE_RTOL), plain)
    assert not meets_deadline(1.01, 1.0)
