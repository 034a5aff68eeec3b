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
    forward_indices,
    run_policy,
)
from poetsim.baselines.revolve import binomial_advances, revolve_program
from poetsim.graph import plain_peak
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
