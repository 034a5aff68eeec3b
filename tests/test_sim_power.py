"""Power states and energy integration at transitions (poetsim.sim.power)."""

from __future__ import annotations

import math

import pytest

from poetsim.sim.power import EnergyLedger, PowerMachine


def test_energy_is_power_times_time_in_each_state():
    ledger = EnergyLedger()
    m = PowerMachine("cpu", "idle", (("idle", 2.0),), ledger)
    m.set(1.0, "active", (("compute", 10.0),))
    m.set(1.5, "sleep", (("stall", 0.5),))
    m.finish(3.5)
    assert ledger.entries == {("cpu", "idle", "idle"): 2.0, ("cpu", "active", "compute"): 5.0,
                              ("cpu", "sleep", "stall"): 1.0}
    assert ledger.total_j == 8.0
    assert m.residency == {"idle": 1.0, "active": 0.5, "sleep": 2.0}


def test_transitions_are_counted_per_pair_and_same_state_is_not_a_transition():
    m = PowerMachine("storage", "sleep", (), EnergyLedger())
    m.set(1.0, "wake", ())
    m.set(2.0, "read", (("page_in", 1.0),))
    m.set(3.0, "read", (("page_in", 2.0),))  # more power, same state
    m.set(4.0, "idle", ())
    assert m.transitions == {("sleep", "wake"): 1, ("wake", "read"): 1, ("read", "idle"): 1}
    assert m.transition_count("read") == 1


def test_several_contributions_are_booked_per_kind():
    ledger = EnergyLedger()
    m = PowerMachine("storage", "write", (("page_out", 1.0), ("page_in", 3.0)), ledger)
    m.finish(2.0)
    assert ledger.by(2) == {"page_out": 2.0, "page_in": 6.0}
    assert ledger.by_state() == {"storage.write": 8.0}
    assert m.power_w == 4.0


def test_quantum_books_instant_energy_and_round_trip_transitions():
    ledger = EnergyLedger()
    m = PowerMachine("cpu", "idle", (), ledger)
    m.quantum("wake", "wakeup", 1e-6, transition=True)
    assert ledger.entries == {("cpu", "wake", "wakeup"): 1e-6}
    assert m.transitions == {("idle", "wake"): 1, ("wake", "idle"): 1}


def test_recorded_intervals_integrate_to_the_ledger():
    ledger = EnergyLedger()
    m = PowerMachine("dma", "idle", (("idle", 0.1),), ledger, record=True)
    for t, p in ((0.3, 1.0), (0.7, 0.2), (1.9, 3.0)):
        m.set(t, "active", (("page_in", p),))
    m.finish(2.5)
    assert m.intervals[0] == (0.0, 0.3, "idle", 0.1)
    assert math.isclose(sum(p * (b - a) for a, b, _, p in m.intervals), ledger.total_j)


def test_time_going_backwards_is_an_error():
    m = PowerMachine("cpu", "idle", (), EnergyLedger())
    m.set(1.0, "active", ())
    with pytest.raises(RuntimeError, match="backwards"):
        m.set(0.5, "idle", ())
