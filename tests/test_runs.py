"""poetsim.runs: one method at one request, judged, and the run cache."""

from __future__ import annotations

import json

import attrs
import pytest
from conftest import paper_request

from poetsim.boards import get_board
from poetsim.methods import METHODS, MethodStatus, Produced, SolverSettings
from poetsim.request import resolve_request
from poetsim.runs import Outcome, RunCache, judge_outcome, run_and_judge, run_key, run_method
from poetsim.schedule import check_schedule, plain_schedule
from poetsim.zoo import build_model

FAST = SolverSettings(time_limit_s=1)


@pytest.fixture(scope="module")
def mlp():
    return build_model("mlp", layers=3)


@pytest.fixture(scope="module")
def board():
    return get_board("nrf52840")


def test_methods_are_poet_then_every_baseline():
    assert METHODS[0] == "poet" and "dtr" in METHODS and "checkmate" in METHODS


@pytest.mark.parametrize("method", METHODS)
def test_every_method_returns_a_checked_schedule_or_a_reason(mlp, board, method):
    request = paper_request(mlp, board, "70%", "2x")
    outcome = run_and_judge(request, method, FAST)
    assert outcome.method == method and not outcome.cached
    if outcome.schedule is None:
        assert outcome.reason and outcome.predicted_energy_j is None
        assert outcome.verdict is None and not outcome.feasible
        return
    check = check_schedule(mlp, outcome.schedule, budget_bytes=outcome.budget_activation_bytes)
    assert check.valid and check.peak_ram_bytes == outcome.predicted_peak_ram_bytes
    verdict = outcome.verdict
    assert verdict.within_budget
    assert verdict.peak_total_bytes == check.peak_ram_bytes + request.resident_bytes
    assert verdict.deadline_s == request.deadline_s
    # the schedule carries the request it was made for, with the user's deadline
    meta = outcome.schedule.metadata
    assert meta["method"] == method and meta["deadline_s"] == request.deadline_s
    assert meta["accounting"] == "paper" and meta["ram"] == "70%"


def test_under_physical_accounting_no_method_fits_an_mcu(mlp, board):
    # the MLP's parameters and gradients alone (5.6 MiB) are far over the nRF52840's RAM
    request = resolve_request(mlp, board, ram="70%")
    for method in ("poet", "dtr", "checkpoint_all"):
        outcome = run_and_judge(request, method, FAST)
        assert outcome.status is MethodStatus.INFEASIBLE and outcome.schedule is None
        assert "parameters, gradients and optimizer state alone need" in outcome.reason
        assert not outcome.feasible and outcome.why_not == outcome.reason


def test_unknown_method_is_refused(mlp, board):
    from poetsim.errors import InputError

    with pytest.raises(InputError, match="method = 'gurobi'"):
        run_method(paper_request(mlp, board, "70%"), "gurobi")


def test_cache_returns_the_same_run_and_schedule(mlp, board, tmp_path):
    cache = RunCache(tmp_path)
    request = paper_request(mlp, board, "60%")
    first = run_method(request, "poet", SolverSettings(time_limit_s=2), cache=cache)
    again = run_method(request, "poet", SolverSettings(time_limit_s=2), cache=cache)
    assert (cache.misses, cache.hits) == (1, 1)
    assert again.cached and again.schedule.steps == first.schedule.steps
    assert again.schedule.metadata == first.schedule.metadata
    assert attrs.evolve(again, cached=False) == first


def test_cache_key_changes_with_every_input_that_matters(mlp, board):
    request = paper_request(mlp, board, 1000, 1.0)
    key = run_key(request, "poet", {"time_limit_s": 5})
    faster = attrs.evolve(board, storage=attrs.evolve(
        board.storage, read_throughput_bytes_per_s=2 * board.storage.read_throughput_bytes_per_s))
    assert run_key(paper_request(mlp, faster, 1000, 1.0), "poet", {"time_limit_s": 5}) != key
    assert run_key(paper_request(build_model("mlp", layers=4), board, 1000, 1.0), "poet",
                   {"time_limit_s": 5}) != key
    assert run_key(request, "dtr", {"time_limit_s": 5}) != key
    assert run_key(paper_request(mlp, board, 999, 1.0), "poet", {"time_limit_s": 5}) != key
    assert run_key(paper_request(mlp, board, 1000, 1.0000001), "poet",
                   {"time_limit_s": 5}) != key
    assert run_key(request, "poet", {"time_limit_s": 6}) != key
    physical = resolve_request(mlp, board, ram=1000, deadline=1.0)
    assert run_key(physical, "poet", {"time_limit_s": 5}) != key
    # a renamed but otherwise identical board is the same point
    renamed = attrs.evolve(board, name="copy", title="copy")
    assert run_key(paper_request(mlp, renamed, 1000, 1.0), "poet", {"time_limit_s": 5}) == key


def test_a_corrupt_cache_entry_is_a_miss_and_is_replaced(mlp, board, tmp_path):
    cache = RunCache(tmp_path)
    request = paper_request(mlp, board, "60%")
    run_method(request, "dtr", cache=cache)
    (entry,) = tmp_path.glob("*/*.json")
    entry.write_text("{not json")
    outcome = run_method(request, "dtr", cache=cache)
    assert not outcome.cached and cache.misses == 2
    assert json.loads(entry.read_text())["run"]["method"] == "dtr"


def test_as_dict_has_units_the_verdict_and_no_steps(mlp, board):
    outcome = run_and_judge(paper_request(mlp, board, "100%"), "checkpoint_all")
    doc = outcome.as_dict()
    assert "schedule" not in doc and doc["energy_j"] > 0
    assert doc["verdict"] == "PASS" and doc["status"] == "ok"
    assert doc["fits_board_ram"] is False  # paper accounting: reported, not decisive
    assert doc["peak_total_bytes"] > doc["board_ram_bytes"]
    assert isinstance(outcome, Outcome) and outcome.status is MethodStatus.OK


def test_judging_an_outcome_without_a_schedule_changes_nothing(mlp, board):
    request = paper_request(mlp, board, 10)
    outcome = run_method(request, "dtr")
    assert outcome.schedule is None and judge_outcome(request, outcome) is outcome


def test_a_solver_schedule_late_in_simulation_is_solved_again_with_a_tighter_deadline(
        monkeypatch):
    # The stage model prices the waits the board has (writes, page-ins before their
    # readers), so that POET's schedules are seldom late; here the board runs the first
    # schedule 10% slower than the simulation says, which makes it late at 60% / 1.1x (the
    # first plan recomputes close to the deadline: 20% would ask for less than the plain
    # time). Five layers: the default ten take 5x the CPU for the same path.
    import poetsim.runs as runs

    judged = []

    def slow_first(request, schedule, **options):
        report, verdict = check_on_board(request, schedule, **options)
        if not judged:
            report = attrs.evolve(report, makespan_s=1.1 * report.makespan_s)
        judged.append(report.makespan_s)
        return report, verdict

    check_on_board = runs.check_on_board
    monkeypatch.setattr(runs, "check_on_board", slow_first)
    graph, board = build_model("mlp", layers=5), get_board("stm32h743")
    request = paper_request(graph, board, "60%", "1.1x")
    # a counted effort and a time limit that leaves room for the re-solve on any machine
    outcome = run_and_judge(request, "poet", SolverSettings(time_limit_s=300, effort=20))
    assert judged[0] > request.deadline_s
    assert outcome.tightenings >= 1
    assert outcome.solver_deadline_s < outcome.deadline_s == request.deadline_s
    assert outcome.verdict.deadline_met and outcome.feasible
    # the schedule keeps the user's deadline, and says which one the solver used
    meta = outcome.schedule.metadata
    assert meta["deadline_s"] == request.deadline_s
    assert meta["solver_deadline_s"] == outcome.solver_deadline_s


def test_without_a_deadline_nothing_is_tightened(mlp, board):
    outcome = run_method(paper_request(mlp, board, "60%"), "poet", FAST)
    assert outcome.tightenings == 0 and outcome.solver_deadline_s is None


def test_a_deadline_margin_is_planned_against_and_the_users_deadline_judged():
    graph, board = build_model("mlp", layers=2), get_board("rpi4")
    request = resolve_request(graph, board, ram="70%", deadline="2x", deadline_margin="10%")
    assert request.planning_deadline_s == pytest.approx(0.9 * request.deadline_s)
    for method in ("poet", "dtr"):
        outcome = run_and_judge(request, method, FAST)
        assert outcome.feasible, outcome.why_not
        # the solver and the heuristics are given the tighter deadline ...
        assert outcome.solver_deadline_s <= request.planning_deadline_s * (1 + 1e-12)
        assert outcome.predicted_time_s <= request.planning_deadline_s * (1 + 1e-9)
        meta = outcome.schedule.metadata
        assert meta["solver_deadline_s"] == outcome.solver_deadline_s
        # ... the verdict, the outcome and the schedule keep the user's, and say the margin
        assert outcome.deadline_s == outcome.verdict.deadline_s == request.deadline_s
        assert meta["deadline_s"] == request.deadline_s and meta["deadline_margin"] == "10%"
        assert outcome.makespan_s <= request.planning_deadline_s


def test_the_margin_is_part_of_the_run_key_only_when_given(mlp, board):
    plain = paper_request(mlp, board, 1000, 1.0)
    key = run_key(plain, "poet", {"time_limit_s": 5})
    assert run_key(paper_request(mlp, board, 1000, 1.0, deadline_margin="0%"), "poet",
                   {"time_limit_s": 5}) == key
    assert run_key(paper_request(mlp, board, 1000, 1.0, deadline_margin="10%"), "poet",
                   {"time_limit_s": 5}) != key


def test_a_schedule_that_does_not_lay_out_is_planned_again_with_fewer_bytes():
    """DTR on ResNet-18 at 50% of the rpi4: its first schedule's bytes fit the budget but
    its buffers need 118.6 KiB more in a static arena; planned again with the budget
    lowered by that excess, it lays out and passes (and the file records the user's
    budget, not the lowered one)."""
    from poetsim.methods import produce
    from poetsim.verdict import check_on_board

    request = resolve_request(build_model("resnet18_cifar"), get_board("rpi4"), ram="50%")
    first = produce(request, "dtr").schedule
    report, verdict = check_on_board(request, first)
    assert report.peak_ram_bytes <= request.ram_limit_bytes < report.arena_bytes
    assert not verdict.passed and "arena" in verdict.violations[0]
    outcome = run_method(request, "dtr")
    assert outcome.verdict.passed and outcome.verdict.arena_bytes <= request.ram_limit_bytes
    lowered = outcome.planned_activation_bytes
    assert lowered is not None and lowered < request.activation_budget_bytes
    meta = outcome.schedule.metadata
    assert meta["budget_activation_bytes"] == request.activation_budget_bytes
    assert meta["planned_activation_bytes"] == lowered


def test_plans_are_made_again_only_while_the_time_limit_lasts(monkeypatch):
    """The time limit holds for the whole run: a layout over the RAM is planned again only
    while time is left (a fake clock: no test depends on the machine's speed)."""
    from types import SimpleNamespace

    from poetsim import runs

    request = resolve_request(build_model("mlp"), get_board("nrf52840"), ram="board")
    over = SimpleNamespace(makespan_s=0.0, arena_bytes=request.ram_limit_bytes + 4096,
                           peak_activation_bytes=request.activation_budget_bytes,
                           layout=None)
    monkeypatch.setattr(runs, "check_on_board", lambda _request, _schedule, **_kw: (over, None))
    calls = []

    def attempt(deadline, tightenings, budget=None):
        calls.append(budget)
        return first

    first = Outcome(method="poet", produced=Produced(MethodStatus.FEASIBLE, "",
                                                     plain_schedule(request.graph)),
                    accounting="physical", budget_bytes=0, budget_activation_bytes=0,
                    resident_bytes=0, deadline_s=None)
    clock = iter([10.0, 10.0, 0.2, 0.2])
    runs._meet_the_board(request, first, attempt, retime=False,
                         time_left_s=lambda: next(clock))
    assert len(calls) == 2  # two re-plans while 10 s were left, none with 0.2 s
    calls.clear()
    runs._meet_the_board(request, first, attempt, retime=False, time_left_s=lambda: 0.0)
    assert calls == []


def test_a_schedule_no_replanning_lays_out_is_compacted_and_the_cheaper_one_kept():
    """#28 item 4: the fragmented schedule's bytes fit, no layout of them does, and a
    method that can only give it again cannot help by replanning: compaction (MOVE steps)
    lays it out, passes, and is kept, its metadata saying why; where both pass, the one
    of less simulated energy is kept."""
    from conftest import make_board
    from test_sim_support import fragmented_graph, fragmented_schedule

    from poetsim import runs
    from poetsim.schedule import Action

    graph = fragmented_graph()
    board = make_board()
    resident = resolve_request(graph, board, ram="board").resident_bytes
    request = resolve_request(graph, board, ram=str(resident + 264))
    schedule = fragmented_schedule(graph)

    def attempt(deadline, tightenings, budget=None):
        return Outcome(method="hand", produced=Produced(MethodStatus.FEASIBLE, "", schedule),
                       accounting="physical", budget_bytes=request.budget_bytes,
                       budget_activation_bytes=request.activation_budget_bytes,
                       resident_bytes=resident, deadline_s=None,
                       planned_activation_bytes=budget)

    kept = runs._meet_the_board(request, attempt(None, 0), attempt, retime=False)
    assert kept.feasible and kept.verdict.arena_bytes <= request.ram_limit_bytes
    assert kept.schedule.count(Action.MOVE) > 0
    fit = kept.schedule.metadata["arena_fit"]
    assert fit.startswith("compaction chosen: compaction with ") and "(does not pass)" in fit
    # both pass: the less energy wins, and the note gives both
    cheap = attrs.evolve(kept, report=attrs.evolve(kept.report, energy_j=1.0))
    dear = attrs.evolve(kept, report=attrs.evolve(kept.report, energy_j=2.0))
    chosen = runs._less_energy(cheap, dear)
    assert chosen.report.energy_j == 1.0
    assert chosen.schedule.metadata["arena_fit"].startswith("replanning chosen")
    assert runs._less_energy(dear, cheap).schedule.metadata["arena_fit"].startswith(
        "compaction chosen")


def test_methods_sharing_a_spent_limit_each_say_it_ran_out(mlp, board):
    """#32 item 3: a command whose time limit is gone (here it started an hour ago) runs
    no method: each answers no_solution at once, saying which limit to raise."""
    import time

    from poetsim.runs import run_all_and_judge

    request = resolve_request(mlp, board, ram="50%", deadline="1.5x")
    names = ["poet", "dtr", "checkpoint_all"]
    outcomes = run_all_and_judge(request, names, SolverSettings(time_limit_s=5),
                                 started=time.perf_counter() - 3600)
    assert [o.method for o in outcomes] == names
    for outcome in outcomes:
        assert outcome.status is MethodStatus.NO_SOLUTION and outcome.schedule is None
        assert outcome.reason == (f"the 5 s time limit ran out before {outcome.method} "
                                  "could start; a longer time limit may find one")


def test_a_baseline_out_of_time_has_a_status_of_its_own(mlp, board):
    """A baseline its limit stops before it finds a schedule answers no_solution (not
    infeasible: nothing was proven) and names the limit."""
    from poetsim.baselines.base import ran_out_of_time
    from poetsim.methods import _from_baseline

    made = _from_baseline(ran_out_of_time("pofo", 1000), 2.5)
    assert made.status is MethodStatus.NO_SOLUTION and made.limits_hit == ("time",)
    assert made.reason == ("the 2.5 s time limit ran out before pofo found a schedule; a "
                           "longer time limit may find one")


def _check_runs_out(monkeypatch):
    """The board check as when the time limit runs out in it (a fake clock: no waiting);
    how many checks were begun."""
    import poetsim.runs as runs
    from poetsim import clock

    begun = []

    def out_of_time(*_args, **_kwargs):
        begun.append(1)
        raise clock.out_of_time()

    monkeypatch.setattr(runs, "check_on_board", out_of_time)
    return begun


@pytest.mark.parametrize("method", ["poet", "dtr"])
def test_a_schedule_whose_check_runs_out_is_kept_unchecked(mlp, method, monkeypatch):
    """#32 item 3: when the limit runs out while a found schedule is checked on the board,
    the schedule stays, with no verdict (never PASS) and one line saying why; it is not
    dropped as though none had been found, and nothing checks it again past the limit."""
    import time

    from poetsim import clock

    request = resolve_request(mlp, get_board("rpi4"), ram="80%", deadline="2x")  # checked
    begun = _check_runs_out(monkeypatch)
    with clock.command(time.perf_counter(), 30.0, "--time-limit"):
        outcome = run_method(request, method, SolverSettings(time_limit_s=20))
    assert outcome.schedule is not None and outcome.verdict is None and begun == [1]
    assert outcome.status is not MethodStatus.NO_SOLUTION
    if method == "poet":  # the search's own word stands
        assert outcome.solve_result.schedule is not None
    assert not outcome.feasible and outcome.verdict_label == "unchecked"
    assert outcome.unchecked == (
        f"the 30 s --time-limit ({method} had 20 s of it) ran out while checking {method}'s "
        "schedule on the board; a longer --time-limit checks it")
    assert f"not checked on the board: {outcome.unchecked}" in outcome.why_not
    assert judge_outcome(request, outcome) is outcome and begun == [1]
    row = outcome.as_dict()
    assert row["verdict"] == "unchecked" and row["feasible"] is False


def test_an_unjudged_schedule_the_limit_stops_is_kept_unchecked(mlp, monkeypatch):
    """Judged after its run (paper accounting, no deadline: nothing to plan again), as
    compare and the demo do: the same."""
    request = paper_request(mlp, get_board("rpi4"), "80%")
    outcome = run_method(request, "dtr")
    assert outcome.verdict is None and not outcome.unchecked
    _check_runs_out(monkeypatch)
    judged = judge_outcome(request, outcome)
    assert judged.schedule is outcome.schedule and judged.verdict_label == "unchecked"
    assert judged.unchecked.startswith("the time limit ran out while checking dtr's schedule")
