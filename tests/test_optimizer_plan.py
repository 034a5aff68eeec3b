"""Stage plans (poetsim.optimizer.plan): structure rules, exact accounting, lowering.

Every plan is judged three ways that must agree: :func:`plan_violations` (the MILP's
structural rules), :func:`evaluate_plan` (the optimizer's accounting) and the independent
checker after :func:`lower_plan`. Energies and times are also recomputed here from the
lowered op list alone.

The `residual` graph (tests/conftest.py), op indices and output bytes::

    0 x 32    1 fc1 16   2 r 16     3 fc2 16       4 s 16 (reads r, fc2)   5 loss 4
    6 loss/grad 16 (s, loss)   7 s/grad 16 (loss/grad)   8 fc2/grad 16 (r, s/grad)
    9 r/grad 16 (r, s/grad, fc2/grad)   10 fc1/grad 0 (x, r/grad)
"""

from __future__ import annotations

import math

import attrs
import numpy as np
import pytest
from conftest import dtr_lifted_resnet18, make_board, op_list_energy, paper_request

from poetsim.costs import op_costs
from poetsim.graph import TrainingGraph, plain_peak
from poetsim.optimizer import (
    StagePlan,
    evaluate_plan,
    greedy_plan,
    lower_plan,
    plain_plan,
    plan_violations,
)
from poetsim.schedule import Action, Schedule, check_schedule
from poetsim.zoo import build_model, model_names

MODES = [(True, True), (True, False), (False, True)]


# ----------------------------------------------------------------------------- helpers




def op_list_seconds(schedule: Schedule, costs) -> tuple[float, float]:
    """Compute time and transfer time of an op list, all steps added up."""
    compute = transfer = 0.0
    for step in schedule.steps:
        if step.action is Action.COMPUTE:
            compute += float(costs.compute_time_s[step.op])
        elif step.action is Action.PAGE_IN:
            transfer += float(costs.pagein_time_s[step.op])
        elif step.action is Action.PAGE_OUT:
            transfer += float(costs.pageout_time_s[step.op])
    return compute, transfer


def assert_consistent(graph: TrainingGraph, costs, plan: StagePlan, budget: int | None) -> None:
    """The three views of ``plan`` agree, and the plan is valid within ``budget``."""
    assert plan_violations(graph, plan) == []
    metrics = evaluate_plan(graph, costs, plan)
    schedule = lower_plan(graph, plan)
    check = check_schedule(graph, schedule, budget_bytes=budget)
    assert check.valid, check.violation
    assert metrics.peak_ram_bytes == check.peak_ram_bytes
    if budget is not None:
        assert metrics.peak_ram_bytes <= budget
    active = op_list_energy(schedule, costs)
    assert metrics.energy_j - metrics.wait_energy_j == pytest.approx(active, rel=1e-9, abs=0)
    assert metrics.energy_j == pytest.approx(
        metrics.compute_energy_j + metrics.pagein_energy_j + metrics.pageout_energy_j
        + metrics.wait_energy_j, rel=1e-12)
    # the wait energy is the cost model's formula over the plan's timeline
    cpu_busy = metrics.compute_time_s + (metrics.transfer_time_s if costs.cpu_moves else 0.0)
    assert metrics.wait_energy_j == pytest.approx(costs.wait.energy_j(
        makespan_s=metrics.time_s, cpu_busy_s=cpu_busy, storage_busy_s=metrics.transfer_time_s,
        wakeups=metrics.storage_wakeups), rel=1e-9, abs=1e-15)
    assert metrics.storage_wakeups <= int((plan.page_in | plan.page_out).any(axis=1).sum())
    if plan.page_in.any() or plan.page_out.any():
        assert metrics.storage_wakeups >= 1  # the storage starts asleep
    compute_s, transfer_s = op_list_seconds(schedule, costs)
    assert metrics.compute_time_s == pytest.approx(compute_s, rel=1e-12)
    assert metrics.transfer_time_s == pytest.approx(transfer_s, rel=1e-12, abs=1e-15)
    # the CPU computes and the storage transfers: with DMA side by side, never both idle;
    # without DMA in a row
    wake_s = metrics.storage_wakeups * costs.wait.wakeup_s
    least = compute_s + transfer_s + wake_s if costs.cpu_moves else max(compute_s, transfer_s)
    assert least * (1 - 1e-9) <= metrics.time_s <= (compute_s + transfer_s + wake_s) * (1 + 1e-9)
    assert metrics.recomputations == check.recomputes == schedule.recomputations()
    assert metrics.page_ins == check.page_ins == int(plan.page_in.sum())
    assert metrics.page_outs == check.page_outs == int(plan.page_out.sum())
    assert metrics.peak_storage_bytes == check.peak_storage_bytes
    # Stage labels follow the plan's stages, in non-decreasing order.
    stages = [step.stage for step in schedule.steps]
    assert stages == sorted(stages)
    assert schedule.stages == plan.n


def matrices(plan: StagePlan) -> dict[str, np.ndarray]:
    """Writable copies of the plan's matrices."""
    return {name: np.array(getattr(plan, name)) for name in
            ("compute", "keep", "stored", "page_in", "page_out")}


# ----------------------------------------------------------------------------- plain plans


@pytest.mark.parametrize("name", model_names())
def test_plain_plan_of_every_zoo_model_is_the_plain_schedule(name: str) -> None:
    graph = build_model(name)
    board = make_board()
    costs = op_costs(graph, board)
    plan = plain_plan(graph)
    n = len(graph)
    assert plan.n == n
    assert np.array_equal(plan.compute, np.eye(n, dtype=bool))
    assert not plan.page_in.any() and not plan.page_out.any() and not plan.stored.any()
    assert plan_violations(graph, plan) == []

    peak = plain_peak(graph).bytes
    schedule = lower_plan(graph, plan)
    check = check_schedule(graph, schedule, budget_bytes=peak)
    assert check.valid, check.violation
    assert check.recomputes == 0 and check.page_ins == 0 and check.page_outs == 0
    assert check.computes == n
    for dma_channels in (1, 0):
        costs = op_costs(graph, make_board(dma_channels=dma_channels))
        metrics = evaluate_plan(graph, costs, plan)
        assert metrics.peak_ram_bytes == check.peak_ram_bytes == peak
        assert metrics.energy_j == pytest.approx(costs.plain_energy_j, rel=1e-12)
        assert metrics.compute_energy_j == pytest.approx(float(costs.compute_energy_j.sum()),
                                                         rel=1e-12)
        assert metrics.pagein_energy_j == 0 and metrics.pageout_energy_j == 0
        assert metrics.time_s == pytest.approx(float(costs.compute_time_s.sum()), rel=1e-12)
        assert metrics.transfer_time_s == 0
        assert metrics.recomputations == 0 and metrics.page_ins == 0 and metrics.page_outs == 0
        assert metrics.peak_storage_bytes == 0
    # One byte less and the checker rejects the same op list.
    tight = check_schedule(graph, schedule, budget_bytes=peak - 1)
    assert not tight.valid and tight.violation.rule == "budget_exceeded"


def test_plain_plan_keeps_exactly_the_tensors_read_later(residual: TrainingGraph) -> None:
    plan = plain_plan(residual)
    for t in range(len(residual)):
        for i in range(len(residual)):
            read_later = i < t and max(residual.successors(i), default=-1) >= t
            assert plan.keep[t, i] == read_later, (t, i)


# ----------------------------------------------------------------------------- greedy plans

GREEDY_MODELS = ["mlp", "resnet18_cifar", "mobilenet_v2", "transformer_block", "vgg16_cifar"]


@pytest.mark.parametrize("dma", [1, 0], ids=["dma", "no-dma"])
@pytest.mark.parametrize("name", GREEDY_MODELS)
def test_greedy_plans_are_valid_and_accounted_exactly(name: str, dma: int) -> None:
    graph = build_model(name)
    board = make_board(dma_channels=dma)
    costs = op_costs(graph, board)
    peak = plain_peak(graph).bytes
    returned = 0
    for fraction in (0.7, 0.5):
        budget = math.floor(fraction * peak)
        for remat, paging in MODES:
            for by_time, cascade in ((False, False), (True, False), (False, True)):
                plan = greedy_plan(graph, costs, budget, remat=remat, paging=paging,
                                   by_time=by_time, cascade=cascade)
                if plan is None:
                    continue
                returned += 1
                assert_consistent(graph, costs, plan, budget)
                if not remat:
                    assert np.array_equal(plan.compute, np.eye(len(graph), dtype=bool))
                if not paging:
                    assert not plan.page_in.any() and not plan.page_out.any()
    assert returned > 0, f"no greedy plan at all for {name}"


def test_greedy_finds_plans_on_the_zoo_with_paging() -> None:
    """Not vacuous: with paging the greedy does find plans at half the peak."""
    for name in ("mlp", "resnet18_cifar", "mobilenet_v2"):
        graph = build_model(name)
        costs = op_costs(graph, make_board())
        budget = plain_peak(graph).bytes // 2
        for remat in (True, False):
            plan = greedy_plan(graph, costs, budget, remat=remat, paging=True)
            assert plan is not None, (name, remat)
            assert plan.page_out.any(), (name, remat)


# ----------------------------------------------------------------------------- a hand plan


def residual_paging_remat_plan() -> StagePlan:
    """x paged out in stage 0 and paged in twice (stages 8, 10); fc1 and r recomputed.

    Stage by stage (bytes in RAM, by the accounting rule):
      0: x                                           peak 32
      1: keep x; fc1 (x freed after fc1)             peak 48
      2: keep fc1; r                                 peak 32
      3: keep r; fc2                                 peak 32
      4: keep r, fc2; s (both freed after s)         peak 48
      5: keep s; loss                                peak 20
      6: keep s, loss; loss/grad                     peak 36
      7: keep loss/grad; s/grad                      peak 32
      8: keep s/grad; page in x; fc1 (x freed), r (fc1 freed), fc2/grad   peak 64 at fc1
      9: keep r, s/grad, fc2/grad; r/grad            peak 64
     10: keep r/grad; page in x; fc1/grad            peak 48
    """
    m = StagePlan.empty(11)
    for t in range(11):
        m["compute"][t, t] = True
    keeps = {1: [0], 2: [1], 3: [2], 4: [2, 3], 5: [4], 6: [4, 5], 7: [6], 8: [7],
             9: [2, 7, 8], 10: [9]}
    for t, kept in keeps.items():
        m["keep"][t, kept] = True
    m["page_out"][0, 0] = True
    m["stored"][1:, 0] = True
    m["page_in"][8, 0] = True
    m["page_in"][10, 0] = True
    m["compute"][8, [1, 2]] = True
    return StagePlan(**m)


@pytest.mark.parametrize("dma", [1, 0], ids=["dma", "no-dma"])
def test_hand_plan_with_paging_and_recomputation(residual: TrainingGraph, dma: int) -> None:
    board = make_board(dma_channels=dma)
    costs = op_costs(residual, board)
    plan = residual_paging_remat_plan()
    assert_consistent(residual, costs, plan, 64)
    metrics = evaluate_plan(residual, costs, plan)
    assert metrics.peak_ram_bytes == 64
    assert (metrics.peak_stage, metrics.peak_op) == (8, 1)
    assert metrics.recomputations == 2
    assert (metrics.page_ins, metrics.page_outs) == (2, 1)
    assert metrics.peak_storage_bytes == 32
    active = (float(costs.compute_energy_j.sum()) + float(costs.compute_energy_j[[1, 2]].sum())
              + 2 * float(costs.pagein_energy_j[0]) + float(costs.pageout_energy_j[0]))
    # By hand, from the board's numbers: the storage wakes once (stage 0; the ops between
    # the transfers of stages 0, 8 and 10 take far less than its 5 ms timeout), which
    # delays the page-out by 1 ms; the CPU waits at 5 mW idle, the storage sleeps at 0.1 mW
    # when not busy and costs 0.1 mJ per wake-up plus 5 ms awake at 0.9 mW more.
    ct, pin, pout = costs.compute_time_s, costs.pagein_time_s, costs.pageout_time_s
    assert float(ct[1:8].sum()) < 5e-3
    compute = {t: float(ct[t]) for t in range(11)}
    compute[8] += float(ct[1] + ct[2])
    storage = {0: float(pout[0]) + 1e-3, 8: float(pin[0]), 10: float(pin[0])}
    if dma:
        # The storage lane beside the CPU: x's write starts once x is made (after the
        # wake-up) and runs on, and the CPU waits for it where x leaves RAM (the end of
        # stage 1); the page-ins of stages 8 and 10 start when the stage does and arrive
        # before it computes (fc1 and fc1/grad read x).
        write_end = compute[0] + 1e-3 + float(pout[0])
        end7 = max(compute[0] + compute[1], write_end) + sum(compute[t] for t in range(2, 8))
        makespan = end7 + float(pin[0]) + compute[8] + compute[9] + float(pin[0]) + compute[10]
        cpu_wait = makespan - sum(compute.values())
    else:
        cpu_wait = 1e-3
        makespan = sum(compute.values()) + sum(storage.values())
    wait = (0.005 * cpu_wait + 0.0001 * (makespan - sum(storage.values()))
            + 1e-4 + (0.001 - 0.0001) * 5e-3)
    assert metrics.storage_wakeups == 1
    assert metrics.time_s == pytest.approx(makespan, rel=1e-12)
    assert metrics.wait_energy_j == pytest.approx(wait, rel=1e-9)
    assert metrics.energy_j == pytest.approx(active + wait, rel=1e-12)
    # The lowered list: page-ins open stages 8 and 10, the page-out follows x's compute.
    steps = lower_plan(residual, plan).steps
    assert [(s.action, s.op) for s in steps[:2]] == [(Action.COMPUTE, 0), (Action.PAGE_OUT, 0)]
    stage8 = [(s.action, s.op) for s in steps if s.stage == 8]
    assert stage8[0] == (Action.PAGE_IN, 0)
    assert stage8[1:3] == [(Action.COMPUTE, 1), (Action.FREE, 0)]
    # A byte less fails in the checker as well.
    tight = check_schedule(residual, lower_plan(residual, plan), budget_bytes=63)
    assert not tight.valid and tight.violation.rule == "budget_exceeded"


def test_a_stage_streaming_weights_waits_for_the_storage_lane(residual: TrainingGraph) -> None:
    """In the hand plan above, x's write (after stage 0 and the storage's 1 ms wake-up)
    runs beside stage 1's compute. If op 1 streams its weights from the same storage it
    holds the device: stage 1 computes after the write instead, and the iteration is that
    much longer; the rest of the timeline (the page-ins that stages 8 and 10 read) does
    not change."""
    board = make_board(dma_channels=1)
    costs = op_costs(residual, board)
    plan = residual_paging_remat_plan()
    before = evaluate_plan(residual, costs, plan)
    streams = np.zeros(len(residual), dtype=bool)
    streams[1] = True
    after = evaluate_plan(residual, attrs.evolve(costs, streams=streams), plan)
    ct, pout = costs.compute_time_s, costs.pageout_time_s
    write_end = float(ct[0]) + 1e-3 + float(pout[0])
    later = write_end + float(ct[1]) - max(float(ct[0] + ct[1]), write_end)
    assert later > 0
    assert after.time_s == pytest.approx(before.time_s + later, rel=1e-12)
    assert after.energy_j == pytest.approx(before.energy_j + later * (0.005 + 0.0001),
                                           rel=1e-9)


def test_keeping_a_tensor_past_its_reader_costs_memory_until_the_stage_ends(
        residual: TrainingGraph) -> None:
    """A tensor kept but not read in a stage is freed only when the stage ends."""
    m = matrices(plain_plan(residual))
    # keep x (32 B) through stage 2..10 although only fc1 (1) and fc1/grad (10) read it:
    # that is what the plain plan does; additionally keep fc1 into stage 3 (unread there).
    m["keep"][3, 1] = True
    plan = StagePlan(**m)
    assert plan_violations(residual, plan) == []
    costs = op_costs(residual, make_board())
    base = evaluate_plan(residual, costs, plain_plan(residual))
    metrics = evaluate_plan(residual, costs, plan)
    schedule = lower_plan(residual, plan)
    check = check_schedule(residual, schedule)
    assert check.valid
    assert metrics.peak_ram_bytes == check.peak_ram_bytes
    # stage 3 holds x, r, fc1 and computes fc2: 32 + 16 + 16 + 16 = 80 > plain's stage 3.
    assert metrics.peak_ram_bytes == max(base.peak_ram_bytes, 80)
    assert (Action.FREE, 1, 3) in [(s.action, s.op, s.stage) for s in schedule.steps]


# ----------------------------------------------------------------------------- broken plans


def broken(residual: TrainingGraph, edit) -> list[str]:
    m = matrices(plain_plan(residual))
    edit(m)
    return plan_violations(residual, StagePlan(**m))


def _has(problems: list[str], text: str) -> bool:
    return any(text in p for p in problems)


def test_op_of_the_stage_not_computed(residual: TrainingGraph) -> None:
    def edit(m):
        m["compute"][4, 4] = False
    assert _has(broken(residual, edit), "stage 4: op 4 is not computed")


@pytest.mark.parametrize("matrix,t,i", [("compute", 3, 5), ("keep", 3, 3), ("keep", 3, 7),
                                        ("page_in", 3, 4), ("page_out", 3, 4)])
def test_decision_about_an_op_not_reached_yet(residual: TrainingGraph, matrix: str, t: int,
                                              i: int) -> None:
    def edit(m):
        m[matrix][t, i] = True
    assert _has(broken(residual, edit), f"stage {t}: decision about an op not reached yet")


def test_missing_input(residual: TrainingGraph) -> None:
    def edit(m):
        m["keep"][4, 3] = False  # s reads fc2
    problems = broken(residual, edit)
    assert _has(problems, "stage 4: op 4 needs tensor 3")


def test_missing_input_of_a_recomputed_op(residual: TrainingGraph) -> None:
    def edit(m):
        m["compute"][8, 1] = True  # fc1 reads x, which is kept: fine
        m["compute"][8, 3] = True  # fc2 reads r: kept in stage 8 by the plain plan: fine
        m["keep"][8, 2] = False    # ... unless r is dropped
        m["keep"][9, 2] = False
    problems = broken(residual, edit)
    assert _has(problems, "stage 8: op 3 needs tensor 2")
    assert _has(problems, "stage 8: op 8 needs tensor 2")


def test_tensor_made_resident_twice(residual: TrainingGraph) -> None:
    def edit(m):
        m["compute"][6, 4] = True  # s recomputed while kept
    assert _has(broken(residual, edit), "stage 6: tensor made resident twice")


def test_page_in_without_a_copy(residual: TrainingGraph) -> None:
    def edit(m):
        m["keep"][10, 0] = False
        m["page_in"][10, 0] = True
    assert _has(broken(residual, edit), "stage 10: page-in of a tensor not on storage")


def test_page_in_of_a_kept_tensor(residual: TrainingGraph) -> None:
    def edit(m):
        m["page_out"][0, 0] = True
        m["stored"][1:, 0] = True
        m["page_in"][5, 0] = True  # x is kept in stage 5 too
    assert _has(broken(residual, edit), "stage 5: tensor made resident twice")


def test_page_out_of_a_tensor_not_in_ram(residual: TrainingGraph) -> None:
    def edit(m):
        m["page_out"][5, 1] = True  # fc1 was freed in stage 2
        m["stored"][6:, 1] = True
    assert _has(broken(residual, edit),
                "stage 5: page-out of a tensor not in RAM or already stored")


def test_second_page_out(residual: TrainingGraph) -> None:
    def edit(m):
        m["page_out"][0, 0] = True
        m["page_out"][3, 0] = True
        m["stored"][1:, 0] = True
    assert _has(broken(residual, edit),
                "stage 3: page-out of a tensor not in RAM or already stored")


def test_keep_of_a_tensor_that_was_not_in_ram(residual: TrainingGraph) -> None:
    def edit(m):
        m["keep"][6, 3] = True  # fc2 was freed after s in stage 4 and not kept into 5
    assert _has(broken(residual, edit), "stage 6: keeps a tensor that was not in RAM")


@pytest.mark.parametrize("case", ["appears", "vanishes"])
def test_storage_set_must_follow_the_page_outs(residual: TrainingGraph, case: str) -> None:
    def edit(m):
        if case == "appears":
            m["stored"][5:, 1] = True  # never paged out
        else:
            m["page_out"][0, 0] = True
            m["stored"][1:4, 0] = True  # released after stage 3
    problems = broken(residual, edit)
    stage = 5 if case == "appears" else 4
    assert _has(problems, f"stage {stage}: storage set does not follow the page-outs")


def test_stage_zero_starts_empty(residual: TrainingGraph) -> None:
    def edit(m):
        m["stored"][0, 3] = True
        m["stored"][1:, 3] = True
    assert _has(broken(residual, edit), "stage 0: starts with tensors in RAM or on storage")


def test_every_broken_plan_is_reported_and_valid_ones_are_not(residual: TrainingGraph) -> None:
    """Flipping any single entry of the plain plan's matrices either keeps a plan that the
    checker accepts after lowering, or breaks a rule plan_violations reports."""
    base = matrices(plain_plan(residual))
    n = len(residual)
    for name in ("compute", "keep", "page_in", "page_out"):
        for t in range(n):
            for i in range(n):
                m = {k: v.copy() for k, v in base.items()}
                m[name][t, i] = not m[name][t, i]
                if name == "page_out":  # keep the storage set consistent
                    m["stored"][t + 1:, i] = True
                plan = StagePlan(**m)
                problems = plan_violations(residual, plan)
                if problems:
                    continue
                check = check_schedule(residual, lower_plan(residual, plan))
                assert check.valid, (name, t, i, check.violation)


@pytest.mark.parametrize("model", ["mlp", "resnet18_cifar", "vgg16_cifar"])
def test_lifted_baseline_schedules_keep_their_decisions(model):
    """plan_from_schedule lifts a baseline's op list into stage form: no more energy, and a
    valid lowered schedule whose peak is the plan's own accounting."""
    from poetsim.baselines import chen_greedy, dtr
    from poetsim.boards import get_board
    from poetsim.optimizer.lowering import plan_from_schedule

    graph, board = build_model(model), get_board("nrf52840")
    costs = op_costs(graph, board)
    budget = paper_request(graph, board, "70%").activation_budget_bytes
    for method in (dtr, chen_greedy):
        result = method(graph, board, costs, budget)
        assert result.schedule is not None
        plan = plan_from_schedule(graph, result.schedule)
        if plan is None:
            continue
        assert plan_violations(graph, plan) == []
        metrics = evaluate_plan(graph, costs, plan)
        assert metrics.energy_j <= result.energy_j * (1 + 1e-9)
        check = check_schedule(graph, lower_plan(graph, plan))
        assert check.valid and check.peak_ram_bytes == metrics.peak_ram_bytes


def test_schedules_without_stage_form_are_refused(residual):
    from poetsim.optimizer.lowering import plan_from_schedule
    from poetsim.schedule import Action, Schedule, Step

    # x and fc1 computed out of index order: no frontier-advancing stage form.
    steps = [Step(Action.COMPUTE, 0), Step(Action.COMPUTE, 2)]
    assert plan_from_schedule(residual, Schedule.for_graph(residual, steps)) is None


def test_an_unread_page_out_is_dropped_and_its_energy_saved():
    from poetsim.boards import get_board
    from poetsim.optimizer.plan import drop_unread_page_outs

    graph = build_model("mlp", layers=3)
    costs = op_costs(graph, get_board("nrf52840"))
    plan = plain_plan(graph)
    assert drop_unread_page_outs(plan) is plan  # nothing to drop
    matrices = {name: getattr(plan, name).copy() for name in
                ("compute", "keep", "stored", "page_in", "page_out")}
    i = 1  # the first linear layer's output, kept to its backward op: page it out needlessly
    matrices["page_out"][i, i] = True
    matrices["stored"][i + 1:, i] = True
    wasteful = StagePlan(**matrices)
    assert plan_violations(graph, wasteful) == []
    pruned = drop_unread_page_outs(wasteful)
    assert pruned == plan and plan_violations(graph, pruned) == []
    saved = (evaluate_plan(graph, costs, wasteful).energy_j
             - evaluate_plan(graph, costs, pruned).energy_j)
    # at least the write itself; the time it took and a wake-up may come on top
    assert saved >= float(costs.pageout_energy_j[i]) * (1 - 1e-9)


def test_an_idle_keep_is_dropped_and_never_costs_ram():
    """A tensor kept past its last reader into stages that neither read, keep nor write it
    is held to each stage's end for nothing: drop_idle_keeps removes the keeps (the later
    one first, then the one it made idle), at the same energy and time and no more RAM."""
    from poetsim.boards import get_board
    from poetsim.optimizer.plan import drop_idle_keeps

    graph = build_model("mlp", layers=3)
    costs = op_costs(graph, get_board("nrf52840"))
    plan = plain_plan(graph)
    assert drop_idle_keeps(graph, plan) is plan  # the plain plan keeps nothing idle
    i = 1  # the first linear layer's output; keep it two stages past its last reader
    last = max(graph.successors(i))
    assert last + 2 < len(graph)
    matrices = {name: getattr(plan, name).copy() for name in
                ("compute", "keep", "stored", "page_in", "page_out")}
    matrices["keep"][last + 1:last + 3, i] = True
    wasteful = StagePlan(**matrices)
    assert plan_violations(graph, wasteful) == []
    dropped = drop_idle_keeps(graph, wasteful)
    assert dropped == plan
    before, after = evaluate_plan(graph, costs, wasteful), evaluate_plan(graph, costs, dropped)
    assert after.energy_j == before.energy_j and after.time_s == before.time_s
    assert after.peak_ram_bytes <= before.peak_ram_bytes


def test_dtr_lifted_without_idle_keeps_fits_where_its_list_does():
    """DTR evicts tensors in the middle of stages that do not read them; lifted as they
    are kept at the stage boundaries, its ResNet-18 list at 50% needs more RAM than the
    list, and without those idle keeps it fits, prices DTR's own energy and lowers to a
    valid schedule of the plan's peak."""
    from poetsim.optimizer.plan import drop_idle_keeps

    graph, costs, budget, listed, lifted = dtr_lifted_resnet18()
    assert evaluate_plan(graph, costs, lifted).peak_ram_bytes > budget
    plan = drop_idle_keeps(graph, lifted)
    assert plan_violations(graph, plan) == []
    metrics = evaluate_plan(graph, costs, plan)
    assert metrics.peak_ram_bytes <= budget
    assert metrics.energy_j == pytest.approx(listed.energy_j, rel=1e-9)
    check = check_schedule(graph, lower_plan(graph, plan), budget_bytes=budget)
    assert check.valid and check.peak_ram_bytes == metrics.peak_ram_bytes


def test_weight_holds_lower_lift_and_price_as_the_op_list():
    """A plan holding weights (an MLP whose trained weights are on storage, updated in
    place): the op list loads each hold right before its owner's run and drops it right
    after the held op's; the checker's peak is the stage model's, the plan lifts back
    unchanged, and a held op's run costs its held figures."""
    from poetsim.graph.streaming import WeightsOnStorage
    from poetsim.optimizer.heuristic import add_holds
    from poetsim.optimizer.lowering import plan_from_schedule

    graph = WeightsOnStorage(trained=True).graph(
        build_model("mlp", layers=3, width=16, inplace_update=1))
    costs = op_costs(graph, make_board(read_throughput_bytes_per_s=2e4))
    plain = plain_plan(graph)
    before = evaluate_plan(graph, costs, plain)
    plan, metrics = add_holds(graph, costs, 10**9, plain)
    assert plan.hold.tolist() == (costs.hold_owner >= 0).tolist()
    saved = float((costs.compute_energy_j - costs.held_compute_energy_j)[plan.hold].sum())
    assert metrics.compute_energy_j == pytest.approx(before.compute_energy_j - saved)
    assert metrics.peak_ram_bytes > before.peak_ram_bytes
    schedule = lower_plan(graph, plan)
    steps = [(s.action, s.op) for s in schedule.steps]
    for b in np.flatnonzero(plan.hold):
        f = int(costs.hold_owner[b])
        at = steps.index((Action.HOLD_WEIGHTS, b))
        assert steps[at + 1:at + 3] == [(Action.READ_WEIGHTS, f), (Action.COMPUTE, f)]
        run = steps.index((Action.COMPUTE, b))
        assert steps[run - 1][0] is not Action.READ_WEIGHTS
        assert (Action.DROP_WEIGHTS, b) in steps[run + 1:run + 3]
    check = check_schedule(graph, schedule, budget_bytes=metrics.peak_ram_bytes)
    assert check.valid and check.peak_ram_bytes == metrics.peak_ram_bytes
    assert plan_from_schedule(graph, schedule) == plan
    # a budget one byte short of the largest hold's stage leaves that hold out
    tight, _ = add_holds(graph, costs, metrics.peak_ram_bytes - 1, plain)
    assert 0 < tight.hold.sum() < plan.hold.sum()
