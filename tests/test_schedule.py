"""Schedule and Step (poetsim.schedule.ops): construction, validation, counts."""

from __future__ import annotations

import attrs
import pytest

from poetsim.errors import InputError, PoetsimError
from poetsim.graph import graph_fingerprint
from poetsim.schedule import Action, Schedule, Step


def test_action_values():
    assert [a.value for a in Action] == ["compute", "page_out", "page_in", "free", "read_weights",
                                        "write_weights", "hold_weights", "drop_weights", "move"]


def test_step_converts_action_strings_and_defaults_stage():
    assert Step("page_in", 3, 2) == Step(Action.PAGE_IN, 3, 2)
    assert Step(Action.FREE, 1).stage == 0


@pytest.mark.parametrize(("args", "text"), [
    (("fly", 1, 0), "action = 'fly': must be one of compute, page_out, page_in, free, "
                    "read_weights, write_weights, hold_weights, drop_weights, move"),
    (("compute", -1, 0), "step op = -1: must not be negative"),
    (("compute", 1, -2), "step stage = -2: must not be negative"),
    (("compute", 1.0, 0), "step op = 1.0: must be an integer"),
    (("compute", 1, True), "step stage = True: must be an integer"),
])
def test_step_rejects_bad_fields(args, text):
    with pytest.raises(InputError) as err:
        Step(*args)
    assert str(err.value) == text
    assert isinstance(err.value, PoetsimError)


def test_step_describe(residual):
    assert Step("compute", 9, 9).describe(residual) == "compute 'r/grad', stage 9"
    assert Step("free", 99, 1).describe(residual) == "free #99, stage 1"
    assert Step("free", 2, 1).describe() == "free #2, stage 1"


def test_schedule_rejects_non_steps():
    with pytest.raises(InputError, match=r"steps\[1\] = \('compute', 1\): must be a Step"):
        Schedule("g", "f", [Step("compute", 0), ("compute", 1)])
    with pytest.raises(InputError, match="graph_fingerprint = None: must be a string"):
        Schedule("g", None, [])


def test_counts_and_recomputations(residual):
    steps = [Step("compute", 0, 0), Step("compute", 1, 1), Step("page_out", 0, 1),
             Step("free", 0, 1), Step("free", 1, 1), Step("compute", 1, 2),
             Step("page_in", 0, 2), Step("free", 1, 3), Step("compute", 1, 3),
             Step("compute", 2, 3)]
    s = Schedule.for_graph(residual, steps, {"method": "hand"})
    assert s.graph_name == "residual"
    assert s.graph_fingerprint == graph_fingerprint(residual)
    assert s.counts() == {Action.COMPUTE: 5, Action.PAGE_OUT: 1, Action.PAGE_IN: 1,
                          Action.FREE: 3, Action.READ_WEIGHTS: 0, Action.WRITE_WEIGHTS: 0,
                          Action.HOLD_WEIGHTS: 0, Action.DROP_WEIGHTS: 0, Action.MOVE: 0}
    assert (s.computes, s.page_outs, s.page_ins, s.frees) == (5, 1, 1, 3)
    assert s.count("compute") == 5
    assert s.recomputations() == 2
    assert s.recomputed_ops() == {1: 2}
    assert s.stages == 4
    assert len(s) == 10 and list(s) == steps


def test_empty_schedule_counts():
    s = Schedule("g", "f", [])
    assert s.recomputations() == 0 and s.stages == 0
    assert s.counts() == dict.fromkeys(Action, 0)


def test_schedule_is_frozen_hashable_and_compares_metadata():
    a = Schedule("g", "f", [Step("compute", 0)], {"method": "x"})
    b = Schedule("g", "f", (Step("compute", 0),), {"method": "x"})
    assert a == b and hash(a) == hash(b)
    assert a != attrs.evolve(a, metadata={"method": "y"})
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        a.steps = ()  # type: ignore[misc]
    c = a.with_metadata(energy_j=1.5)
    assert c.metadata == {"method": "x", "energy_j": 1.5}
    assert a.metadata == {"method": "x"}
