"""The baselines' shared executor and program builder follow the schedule contract."""

from __future__ import annotations

import ast
import itertools
import random
from pathlib import Path

import pytest
from conftest import residual_graph

import poetsim.baselines
from poetsim.baselines.base import GRACE_S, OutOfTime, Ticker, finish_estimate_s
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
from poetsim.baselines.revolve import (
    _energy_floor,
    _first_descent,
    _plan,
    _slot_order,
    binomial_advances,
    revolve,
    revolve_program,
)
from poetsim.graph import ForwardGraph, TrainingGraph, graph_fingerprint, plain_peak
from poetsim.schedule import Schedule, Step, check_schedule, plain_schedule
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


def test_binomial_plan_is_the_recursions_optimum():
    """Revolve's closed form (advances and the smallest best first split) against the
    recursion ``advances(s, c) = min over 0 < m < s of m + advances(s - m, c - 1) +
    advances(m, c)`` itself, for every step count to 120 and slot count to 12."""
    steps_max, slots_max = 120, 12
    advances = [[0] * (steps_max + 1) for _ in range(slots_max + 1)]
    for s in range(steps_max + 1):
        advances[0][s] = s * (s - 1) // 2 if s > 1 else 0
    for c in range(1, slots_max + 1):
        for s in range(2, steps_max + 1):
            costs = [m + advances[c - 1][s - m] + advances[c][m] for m in range(1, s)]
            advances[c][s] = min(costs)
            if c < s - 1:
                assert _plan(s, c) == (advances[c][s], costs.index(advances[c][s]) + 1), (s, c)
            assert binomial_advances(s, c) == advances[c][s], (s, c)


def _chains():
    """MLP chains of several lengths and widths (linear and ReLU steps cost unequally)."""
    yield build_model("mlp", layers=7, width=4)
    yield build_model("mlp", layers=40, width=8)
    yield build_model("mlp", layers=30, width=24, input_dim=300)


@pytest.mark.parametrize("graph", list(_chains()), ids=lambda g: g.name)
def test_revolves_bounds_never_exceed_what_a_slot_count_needs(graph):
    """For every slot count: the snapshots of the first descent are resident together (so
    their bytes are at most the program's peak), and the energy floor is at most the
    program's compute energy; so the counts they skip cannot win."""
    from poetsim.boards import get_board
    from poetsim.costs import op_costs

    energy = op_costs(graph, get_board("rpi4")).compute_energy_j
    chain, _ = chain_order(graph)
    size = [op.output_bytes for op in graph.ops]
    steps = len(chain) - 1
    for slots in range(steps):
        prog = revolve_program(graph, chain, slots)
        held = size[chain[0]] + sum(size[chain[j]] for j in _first_descent(steps, slots))
        assert held <= prog.peak, slots
        assert _energy_floor(energy, chain, slots) <= prog.compute_sum(energy) * (1 + 1e-12)


@pytest.mark.parametrize("graph", list(_chains()), ids=lambda g: g.name)
def test_revolves_pruned_search_finds_what_trying_every_count_finds(graph):
    """The least-energy feasible count (ties: fewer slots) by lowering every count, against
    revolve()'s search, which skips the counts its bounds rule out, at budgets from the
    least that fits to all of it."""
    from poetsim.boards import get_board
    from poetsim.costs import op_costs

    board = get_board("rpi4")
    costs = op_costs(graph, board)
    chain, _ = chain_order(graph)
    programs = [revolve_program(graph, chain, c) for c in range(len(chain) - 1)]
    peaks = sorted({prog.peak for prog in programs})
    for budget in (*peaks[:3], peaks[len(peaks) // 2], peaks[-1]):
        keys = [(prog.compute_sum(costs.compute_energy_j), c)
                for c, prog in enumerate(programs) if prog.peak <= budget]
        energy_j, slots = min(keys)
        result = revolve(graph, board, costs, budget)
        assert result.details["snapshots"] == slots, budget
        assert list(result.schedule.steps) == list(programs[slots].steps)


def _slot_orders(counts, peak, budget):
    peaks: dict[int, int] = {}
    order = []
    for slots in _slot_order(counts, budget, peaks):
        order.append(slots)
        peaks[slots] = peak(slots)
    return order


@pytest.mark.parametrize("counts", [1, 2, 3, 10, 101, 1500])
def test_revolve_tries_every_slot_count_once_the_largest_that_fits_early(counts):
    rng = random.Random(counts)
    for budget in (0, 1, 50, 10 * counts, 10**9):
        order = _slot_orders(counts, lambda c: 10 * c + 7, budget)
        assert sorted(order) == list(range(counts))
        fits = [c for c in range(counts) if 10 * c + 7 <= budget]
        if fits:  # found after a few probes, however many counts there are
            assert max(fits) in order[:2 + 2 * max(1, counts).bit_length()]
        # a peak that does not grow with the count: still every count, once
        noise = [rng.randrange(100) for _ in range(counts)]
        assert sorted(_slot_orders(counts, noise.__getitem__, budget)) == list(range(counts))


def test_no_recursion_in_the_baselines():
    """No function of poetsim.baselines calls itself, directly or through other functions
    of its module (by name: functions are told apart by name only, so a false alarm is
    possible, a miss is not, methods called on other objects aside): an op list over a
    long chain must not need one Python frame per op."""
    package = Path(poetsim.baselines.__file__).parent
    for path in sorted(package.glob("*.py")):
        tree = ast.parse(path.read_text())
        calls: dict[str, set[str]] = {}
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                called = calls.setdefault(node.name, set())
                for inner in ast.walk(node):
                    if isinstance(inner, ast.Call):
                        f = inner.func  # a function of the module, or a method of self
                        if isinstance(f, ast.Name):
                            called.add(f.id)
                        elif isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) \
                                and f.value.id == "self":
                            called.add(f.attr)
        for start in calls:
            seen, todo = set(), [start]
            while todo:
                for callee in calls.get(todo.pop(), ()):
                    assert callee != start, f"{path.name}: {start} calls itself (via {todo})"
                    if callee in calls and callee not in seen:
                        seen.add(callee)
                        todo.append(callee)


def test_ticker_looks_at_the_clock_every_so_often(monkeypatch):
    from poetsim.baselines import base

    now = [0.0]
    reads = []

    def clock():
        reads.append(now[0])
        return now[0]

    monkeypatch.setattr(base.time, "perf_counter", clock)
    ticker = Ticker(stop_at=10.0, every=100)
    for _ in range(250):
        ticker.tick()
    assert len(reads) == 2
    now[0] = 10.5
    with pytest.raises(OutOfTime):
        for _ in range(100):
            ticker.tick()
    ticker = Ticker(stop_at=20.0, every=100)
    ticker.reserve(4.0)  # 4 s kept to finish a schedule: stops at 16
    now[0] = 15.0
    ticker.tick(100)
    assert ticker.can_finish(4.0) and ticker.can_finish(5.0 + GRACE_S)
    assert not ticker.can_finish(5.0 + 2 * GRACE_S)
    now[0] = 16.5
    with pytest.raises(OutOfTime):
        ticker.tick(100)
    never = Ticker(stop_at=None)
    for _ in range(10_000):
        never.tick()
    never.reserve(5.0)
    never.tick(10**9)
    assert never.can_finish(1e9)


def test_finishing_takes_longer_before_the_graph_is_hashed():
    graph = build_model("mlp", layers=5)
    unhashed = finish_estimate_s(graph, 1.0)
    graph_fingerprint(graph)
    assert finish_estimate_s(graph, 1.0) < unhashed


def test_program_steps_are_made_on_demand_and_kept():
    graph = build_model("mlp")
    program = run_policy(graph, [KEEP] * len(graph))
    steps = program.steps
    assert len(steps) == len(program) and program.steps is steps
    assert all(isinstance(s, Step) for s in steps)
    assert Schedule.for_graph(graph, steps).steps == plain_schedule(graph).steps
