"""The baselines' shared executor and program builder follow the schedule contract."""

from __future__ import annotations

import itertools
import random

import pytest
from conftest import residual_graph

from poetsim.baselines.program import (
    DROP,
    KEEP,
    OFFLOAD,
    Program,
    chain_order,
    checkpoint_candidates,
    forward_indices,
    run_policy,
)
from poetsim.baselines.revolve import binomial_advances, revolve_program
from poetsim.graph import ForwardGraph, TrainingGraph, plain_peak
from poetsim.schedule import Schedule, check_schedule
from poetsim.zoo import build_model

MODES = [(k, h) for k in (True, False) for h in (True, False)]


def _check(graph, program: Program):
    schedule = Schedule.for_graph(graph, program.steps)
    result = check_schedule(graph, schedule)
    assert result.valid, result.violation
    assert result.peak_ram_bytes == program.peak
    return result


def test_every_policy_on_a_diamond_is_valid():
    """Exhaustive over keep / offload / drop on the residual diamond, in every mode."""
    graph = residual_graph()
    fwd = forward_indices(graph)
    for combo in itertools.product((KEEP, DROP, OFFLOAD), repeat=len(fwd)):
        policy = [KEEP] * len(graph)
        for i, kind in zip(fwd, combo):
            policy[i] = kind
        for keep_rebuilt, hold in MODES:
            _check(graph, run_policy(graph, policy, keep_rebuilt_ancestors=keep_rebuilt,
                                     hold_checkpoints=hold))


def test_random_policies_on_resnet_are_valid():
    graph = build_model("resnet18_cifar")
    fwd = forward_indices(graph)
    rng = random.Random(7)
    for _ in range(15):
        policy = [KEEP] * len(graph)
        for i in fwd:
            policy[i] = rng.choice((KEEP, DROP, OFFLOAD))
        for keep_rebuilt, hold in MODES:
            _check(graph, run_policy(graph, policy, keep_rebuilt_ancestors=keep_rebuilt,
                                     hold_checkpoints=hold))


def test_all_keep_is_the_plain_schedule():
    for name in ("mlp", "resnet18_cifar"):
        graph = build_model(name)
        program = run_policy(graph, [KEEP] * len(graph))
        assert program.peak == plain_peak(graph).bytes
        assert program.recomputations == 0


def test_program_refuses_contract_violations():
    graph = residual_graph()
    program = Program(graph)
    with pytest.raises(AssertionError):
        program.compute(1)  # input 'x' not resident
    program.compute(0)
    with pytest.raises(AssertionError):
        program.compute(0)  # already resident
    with pytest.raises(AssertionError):
        program.page_in(0)  # nothing on storage
    program.page_out(0)
    with pytest.raises(AssertionError):
        program.page_out(0)  # written twice
    program.free(0)
    with pytest.raises(AssertionError):
        program.free(0)


@pytest.mark.parametrize("slots", [0, 1, 2, 3, 19])
def test_revolve_program_is_valid_for_every_slot_count(slots):
    graph = build_model("mlp")
    chain, _ = chain_order(graph)
    result = _check(graph, revolve_program(graph, chain, slots))
    assert result.recomputes > 0


def test_binomial_advances_match_the_closed_cases():
    assert binomial_advances(1, 0) == 0
    assert binomial_advances(5, 0) == 10          # advance 4+3+2+1
    assert binomial_advances(8, 7) == 7           # one sweep, a snapshot per step
    # beta(c, r) = C(c + r, c) steps are reversible with r sweeps: 10 steps, 2 slots, r = 3
    assert binomial_advances(10, 2) <= 3 * 10
    assert binomial_advances(20, 2) < binomial_advances(20, 1) < binomial_advances(20, 0)


def test_chain_order_names_the_branch():
    order, reason = chain_order(residual_graph())
    assert order is None and "feeds 2 forward ops" in reason
    order, reason = chain_order(build_model("mlp", layers=3))
    assert reason == "" and order == list(range(len(order)))


class _RecordingProgram(Program):
    """Copies the resident set at every new peak, the way Program once did."""

    def _note(self, amount: int, op: int) -> None:
        if amount > self.peak:
            self.copied = frozenset(self.in_ram)
        super()._note(amount, op)


def test_peak_resident_is_the_resident_set_at_the_peak(monkeypatch):
    graph = build_model("resnet18_cifar")
    fwd = forward_indices(graph)
    rng = random.Random(11)
    monkeypatch.setattr("poetsim.baselines.program.Program", _RecordingProgram)
    for _ in range(10):
        policy = [KEEP] * len(graph)
        for i in fwd:
            policy[i] = rng.choice((KEEP, DROP, OFFLOAD))
        program = run_policy(graph, policy, keep_rebuilt_ancestors=False)
        assert isinstance(program, _RecordingProgram)
        assert program.peak_resident == program.copied
    assert Program(graph).peak_resident == frozenset()


def _long_chain(relus: int) -> TrainingGraph:
    """x -> fc -> relu x ``relus`` -> loss and its backward: ``2 * relus + 5`` ops."""
    fg = ForwardGraph("long_chain")
    h = fg.op("fc", "linear", [fg.input("x", 4)], output_elements=4, flops=32, param_count=20)
    for i in range(relus):
        h = fg.op(f"relu{i}", "relu", [h], output_elements=4, flops=4)
    fg.loss("loss", h)
    return fg.build()


@pytest.fixture(scope="module")
def long_chain() -> TrainingGraph:
    graph = _long_chain(2500)
    assert len(graph) == 5005
    return graph


def test_long_chain_has_no_recursion_limit(long_chain):
    """Rebuilding a dropped tensor goes back to the input through 2,500 dropped ops: once a
    RecursionError past about 1,000 ops."""
    graph = long_chain
    order, reason = chain_order(graph)
    assert reason == "" and len(order) == 2503
    assert len(checkpoint_candidates(graph)) == 2502
    dropped = set(order[:-1])
    policy = [DROP if i in dropped else KEEP for i in range(len(graph))]
    program = run_policy(graph, policy)
    _check(graph, program)
    assert program.recomputations > 0


@pytest.mark.parametrize("slots", [2, 2501])
def test_revolve_on_a_long_chain(long_chain, slots):
    """With a snapshot for every step the reversal nests one level per step: once a
    RecursionError; with 2 the dynamic program spans 2,502 steps."""
    graph = long_chain
    chain, _ = chain_order(graph)
    steps = len(chain) - 1
    program = revolve_program(graph, chain, slots)
    _check(graph, program)
    if slots >= steps - 1:
        assert binomial_advances(steps, slots) == steps - 1
    else:
        assert steps - 1 < binomial_advances(steps, slots) < binomial_advances(steps, 1)
