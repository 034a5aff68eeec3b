"""The command's time limit: stop times, what runs out says so, and the time for work that
cannot be cut short. No test waits for the clock: a stop time in the past or far ahead."""

import time

import pytest

from poetsim import clock
from poetsim.errors import OutOfTime

PAST, FAR = -1e9, 1e9  # stop times relative to now that no machine's speed can move


def test_no_limit_outside_a_command():
    assert clock.stop_at() is None
    ticker = clock.Ticker(clock.stop_at(), every=1)
    for _ in range(10):
        ticker.tick()
    assert clock.time_for(1e6)


def test_the_sooner_limit_holds_inside_a_command():
    now = time.perf_counter()
    with clock.command(now, 10.0):
        assert clock.stop_at() == now + 10.0
        with clock.limit(now + 5.0):
            assert clock.stop_at() == now + 5.0
        with clock.limit(now + 50.0):
            assert clock.stop_at() == now + 10.0
        with clock.limit(None):
            assert clock.stop_at() == now + 10.0
    assert clock.stop_at() is None
    with clock.command(None, 10.0):  # no start: no limit for the whole
        assert clock.stop_at() is None


def test_running_out_names_the_users_limit_and_what_was_under_way():
    with clock.command(time.perf_counter() + PAST, 10.0, "--time-limit"):
        ticker = clock.Ticker(clock.stop_at(), every=1)
        with clock.doing("building the model"), pytest.raises(OutOfTime) as caught:
            ticker.tick()
    assert str(caught.value) == ("the 10 s --time-limit ran out while building the model; a "
                                 "longer --time-limit may find one")
    assert caught.value.when == "while building the model"


def test_a_nested_command_keeps_the_name_the_user_knows():
    now = time.perf_counter()
    with clock.command(now, 10.0, "--time-limit"), clock.command(now, 10.0):
        assert clock.ran_out("").startswith("the 10 s --time-limit ran out;")


def test_the_share_of_the_limit_is_named_beside_it():
    """#32 item 4: the message names the user's limit, not the method's share of it."""
    with clock.command(time.perf_counter(), 10.0, "--time-limit"):
        line = clock.ran_out("while checking poet's schedule on the board", 0.2539, "poet")
        assert line == ("the 10 s --time-limit (poet had 0.254 s of it) ran out while "
                        "checking poet's schedule on the board; a longer --time-limit may "
                        "find one")
        # the whole limit is not a share of it
        assert clock.named(10.0, "poet") == clock.named() == "the 10 s --time-limit"
    # outside a command the share is the limit
    assert clock.ran_out("while x", 2.5, "poet", then="checks it") == (
        "the 2.5 s time limit ran out while x; a longer time limit checks it")
    assert clock.named() == "the time limit"


def test_work_that_cannot_be_cut_short_starts_only_when_it_can_end_in_time():
    now = time.perf_counter()
    with clock.command(now + PAST, 10.0):
        assert not clock.time_for(0.0)
    with clock.command(now + FAR, 10.0):
        assert clock.time_for(1.0)
        with clock.limit(time.perf_counter() + 0.5):
            assert not clock.time_for(1e3)  # a CPU share is at most 1
