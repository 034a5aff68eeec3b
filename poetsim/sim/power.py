"""Power states and energy integration at state transitions (the ns-3 / gem5 model).

Every simulated component (CPU, DMA engine, storage device) owns a :class:`PowerMachine`:
a current *state* (``"active"``, ``"idle"``, ``"sleep"``, ``"read"``, ...) and the power
drawn in it, split into *contributions* ``(kind, watts)``. ``kind`` says what the power is
spent on (``"compute"``, ``"recompute"``, ``"page_in"``, ``"page_out"``, ``"idle"``,
``"stall"``, ``"wakeup"``), so one integration yields the energy by component, by power
state and by op kind at once.

Energy is integrated *only* when the state or the contributions change::

    E[component, state, kind] += watts * (t_now - t_last_change)

There is no sampling: power is piecewise constant between transitions. The machine also
keeps the residency (seconds per state) and the number of transitions per ``(from, to)``
pair, like gem5's ``pwrStateResidencyTicks`` and ``numTransitions``. Instantaneous energy
quanta (a wake-up of zero latency, an op of zero duration) go through :meth:`quantum`.

All machines of one run share one :class:`EnergyLedger`; the report's breakdowns are sums
over its keys, so they add up to the total by construction.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["Contribution", "EnergyLedger", "PowerMachine"]

#: ``(kind, watts)``: one share of a component's power and what it is spent on.
Contribution = tuple[str, float]

#: Times closer than this (seconds) are treated as equal when checking monotonicity.
_TIME_EPS = 1e-12


class EnergyLedger:
    """Joules per ``(component, state, kind)``."""

    __slots__ = ("entries",)

    def __init__(self) -> None:
        self.entries: dict[tuple[str, str, str], float] = {}

    def add(self, component: str, state: str, kind: str, joules: float) -> None:
        key = (component, state, kind)
        self.entries[key] = self.entries.get(key, 0.0) + joules

    @property
    def total_j(self) -> float:
        return sum(self.entries.values())

    def by(self, field: int) -> dict[str, float]:
        """Sum over one key field: 0 component, 1 state, 2 kind."""
        out: dict[str, float] = {}
        for key, joules in self.entries.items():
            out[key[field]] = out.get(key[field], 0.0) + joules
        return out

    def by_state(self) -> dict[str, float]:
        """Joules per ``"component.state"``."""
        out: dict[str, float] = {}
        for (component, state, _), joules in self.entries.items():
            name = f"{component}.{state}"
            out[name] = out.get(name, 0.0) + joules
        return out


class PowerMachine:
    """The power state of one component, integrated at every change.

    :param component: name used in the ledger and in traces (``"cpu"``, ``"dma"``, ...).
    :param state: the initial state.
    :param contributions: the initial power contributions.
    :param ledger: where energy is booked.
    :param record: keep the list of ``(start_s, end_s, state, watts)`` intervals for traces.
    """

    __slots__ = ("component", "state", "since", "contributions", "residency", "transitions",
                 "ledger", "entries", "intervals")

    def __init__(self, component: str, state: str, contributions: Iterable[Contribution],
                 ledger: EnergyLedger, *, record: bool = False, t0: float = 0.0) -> None:
        self.component = component
        self.state = state
        self.since = t0
        self.contributions: tuple[Contribution, ...] = tuple(contributions)
        self.residency: dict[str, float] = {}
        self.transitions: dict[tuple[str, str], int] = {}
        self.ledger = ledger
        self.entries = ledger.entries  # booked into at every transition
        self.intervals: list[tuple[float, float, str, float]] | None = [] if record else None

    @property
    def power_w(self) -> float:
        """The power drawn now."""
        return sum(watts for _, watts in self.contributions)

    def set(self, t: float, state: str, contributions: Iterable[Contribution]) -> None:
        """From time ``t`` on, the component is in ``state`` drawing ``contributions``.

        The energy since the last change is integrated first (the hot path of every run:
        one call per transition)."""
        since = self.since
        if t != since:
            dt = t - since
            if dt > 0.0:
                current = self.state
                entries = self.entries
                component = self.component
                for kind, watts in self.contributions:
                    if watts:
                        key = (component, current, kind)
                        entries[key] = entries.get(key, 0.0) + watts * dt
                residency = self.residency
                residency[current] = residency.get(current, 0.0) + dt
                if self.intervals is not None:
                    total = 0.0
                    for _, watts in self.contributions:
                        if watts:
                            total += watts
                    self.intervals.append((since, t, current, total))
                self.since = t
            elif dt < -_TIME_EPS * max(1.0, abs(t)):
                raise RuntimeError(f"{self.component}: time went backwards "
                                   f"({since!r} -> {t!r})")
        if state != self.state:
            key = (self.state, state)
            self.transitions[key] = self.transitions.get(key, 0) + 1
            self.state = state
        self.contributions = contributions  # type: ignore[assignment]

    def quantum(self, state: str, kind: str, joules: float, *, transition: bool = False) -> None:
        """Book ``joules`` spent instantaneously in ``state`` (a zero-latency wake-up, say).

        With ``transition``, count a ``current -> state -> current`` round trip.
        """
        if joules:
            self.ledger.add(self.component, state, kind, joules)
        if transition and state != self.state:
            for key in ((self.state, state), (state, self.state)):
                self.transitions[key] = self.transitions.get(key, 0) + 1

    def finish(self, t: float) -> None:
        """Integrate up to the end of the run."""
        self.set(t, self.state, self.contributions)

    def transition_count(self, to_state: str) -> int:
        """Number of transitions into ``to_state``."""
        return sum(n for (_, dst), n in self.transitions.items() if dst == to_state)
