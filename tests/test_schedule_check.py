"""The independent checker and the plain schedule (poetsim.schedule.check).

The `residual` graph (tests/conftest.py), op indices and output bytes::

    0 x 32    1 fc1 16   2 r 16     3 fc2 16       4 s 16 (reads r, fc2)   5 loss 4
    6 loss/grad 16 (s, loss)   7 s/grad 16 (loss/grad)   8 fc2/grad 16 (r, s/grad)
    9 r/grad 16 (r, s/grad, fc2/grad)   10 fc1/grad 0 (x, r/grad)

No op has workspace, so RAM during a COMPUTE is the resident bytes + the output.
"""

from __future__ import annotations

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from poetsim.graph import ForwardGraph, TrainingGraph, plain_peak
from poetsim.schedule import (
    RULES,
    Action,
    Schedule,
    ScheduleError,
    Step,
    check_schedule,
    check_schedule_or_raise,
    plain_schedule,
)
from poetsim.zoo import build_model, model_names


def make(graph: TrainingGraph, *lines: str) -> Schedule:
    """Steps written as "compute fc1 1" (action, op name, stage)."""
    steps = []
    for line in lines:
        action, name, stage = line.split()
        steps.append(Step(action, graph.index(name), int(stage)))
    return Schedule.for_graph(graph, steps, {"method": "hand"})


PLAIN = (
    "compute x 0", "compute fc1 1", "compute r 2", "free fc1 2", "compute fc2 3",
    "compute s 4", "free fc2 4", "compute loss 5", "compute loss/grad 6", "free s 6",
    "free loss 6", "compute s/grad 7", "free loss/grad 7", "compute fc2/grad 8",
    "compute r/grad 9", "free r 9", "free s/grad 9", "free fc2/grad 9",
    "compute fc1/grad 10", "free x 10", "free r/grad 10", "free fc1/grad 10",
)

#: r freed after s; fc1 and r recomputed before fc2/grad, r's first backward reader.
REMAT = (
    "compute x 0", "compute fc1 1", "compute r 2", "free fc1 2", "compute fc2 3",
    "compute s 4", "free fc2 4", "free r 4",
    "compute loss 5", "compute loss/grad 6", "free s 6", "free loss 6",        # 8..11
    "compute s/grad 7", "free loss/grad 7",                                    # 12, 13
    "compute fc1 8", "compute r 8", "free fc1 8",                              # 14..16
    "compute fc2/grad 8", "compute r/grad 9",                                  # 17, 18
    "free r 9", "free s/grad 9", "free fc2/grad 9",
    "compute fc1/grad 10", "free x 10", "free r/grad 10", "free fc1/grad 10",
)

#: r paged out after s, freed, paged in for the backward ops that read it.
PAGING = (
    "compute x 0", "compute fc1 1", "compute r 2", "free fc1 2", "compute fc2 3",
    "compute s 4", "free fc2 4", "page_out r 4", "free r 4",                  # 7, 8
    "compute loss 5", "compute loss/grad 6", "free s 6", "free loss 6",
    "compute s/grad 7", "free loss/grad 7",
    "page_in r 8", "compute fc2/grad 8", "compute r/grad 9",                   # 15..17
    "free r 9", "free s/grad 9", "free fc2/grad 9",
    "compute fc1/grad 10", "free x 10", "free r/grad 10", "free fc1/grad 10",
)


#: PAGING, and the input x paged out after fc1 and paged in again for fc1/grad.
PAGING_X = (PAGING[:2] + ("page_out x 1", "free x 1") + PAGING[2:21] + ("page_in x 10",)
            + PAGING[21:])


def figures(result):
    return (result.peak_ram_bytes, result.peak_step, result.computes, result.recomputes,
            result.page_outs, result.page_ins, result.frees, result.bytes_paged_out,
            result.bytes_paged_in, result.peak_storage_bytes)


def test_plain_schedule_by_hand(residual):
    # RAM per step: x 32, fc1 48, r 64, fc2 64, s 80, loss 68, loss/grad 84, s/grad 80,
    # fc2/grad 80, r/grad 96 (x, r, s/grad, fc2/grad + 16 out), fc1/grad 48.
    s = make(residual, *PLAIN)
    assert plain_schedule(residual).steps == s.steps
    result = check_schedule(residual, s)
    assert result.valid and result.violation is None
    assert figures(result) == (96, 14, 11, 0, 0, 0, 11, 0, 0, 0)


def test_remat_schedule_by_hand(residual):
    # s 80 (x, r, fc2 + s); then x, s 48; loss 52; loss/grad 68; s/grad 64;
    # recompute fc1 64 (x, s/grad + fc1), r 80, free fc1 -> 64; fc2/grad 80;
    # r/grad 96 (x 32 + r, s/grad, fc2/grad, r/grad 16 each): step 18.
    result = check_schedule(residual, make(residual, *REMAT))
    assert result.valid
    assert figures(result) == (96, 18, 13, 2, 0, 0, 13, 0, 0, 0)
    assert make(residual, *REMAT).recomputations() == 2


def test_paging_schedule_by_hand(residual):
    # page-in of r at step 15: x, s/grad + r = 64; fc2/grad 80; r/grad 96 at step 17.
    result = check_schedule(residual, make(residual, *PAGING))
    assert result.valid
    assert figures(result) == (96, 17, 11, 0, 1, 1, 12, 16, 16, 16)


def test_paging_the_input_too_lowers_the_peak(residual):
    # RAM per step: fc1 48 (x + fc1), then x leaves; r 32, fc2 32, s 48 (r, fc2 + s),
    # loss 20, loss/grad 36, s/grad 32, page-in of r 32, fc2/grad 48,
    # r/grad 64 (r, s/grad, fc2/grad + its output), page-in of x 48, fc1/grad 48.
    result = check_schedule(residual, make(residual, *PAGING_X))
    assert result.valid, result.violation
    assert result.peak_ram_bytes == 64
    assert make(residual, *PAGING_X).steps[result.peak_step] == Step("compute", 9, 9)
    assert (result.bytes_paged_out, result.bytes_paged_in, result.peak_storage_bytes) == \
        (48, 48, 48)


# ----------------------------------------------------------------------------- violations


def replace(lines, position, *new):
    return lines[:position] + tuple(new) + lines[position + 1:]


def insert(lines, position, *new):
    return lines[:position] + tuple(new) + lines[position:]


CASES = [
    # (id, lines, checker options, rule, position, the step's op, another name in the message)
    ("input_not_resident", PLAIN[:1] + PLAIN[2:], {}, "input_not_resident", 1, "r", "fc1"),
    ("compute_resident", insert(PLAIN, 1, "compute x 0"), {}, "already_resident", 1, "x", "x"),
    ("page_in_resident", insert(PAGING, 8, "page_in r 4"), {}, "already_resident", 8, "r", "r"),
    ("not_on_storage", PAGING[:7] + PAGING[8:], {}, "not_on_storage", 14, "r", "r"),
    ("free_not_resident", insert(PLAIN, 4, "free fc1 2"), {}, "not_resident", 4, "fc1", "fc1"),
    ("page_out_not_resident", insert(PLAIN, 4, "page_out fc1 2"), {}, "not_resident", 4,
     "fc1", "fc1"),
    ("redundant_page_out", insert(PAGING, 8, "page_out r 4"), {}, "redundant_page_out", 8,
     "r", "r"),
    ("storage_full", PAGING, {"storage_capacity_bytes": 15}, "storage_full", 7, "r", "r"),
    ("never_computed", PLAIN[:-4] + PLAIN[-3:-1], {}, "never_computed", 20, "fc1/grad",
     "fc1/grad"),
]


@pytest.mark.parametrize(("lines", "options", "rule", "position", "op", "other"),
                         [pytest.param(*case[1:], id=case[0]) for case in CASES])
def test_one_violation_per_rule(residual, lines, options, rule, position, op, other):
    s = make(residual, *lines)
    result = check_schedule(residual, s, **options)
    v = result.violation
    assert not result.valid
    assert (v.rule, v.position) == (rule, position), v.message
    assert v.op == residual.index(op)
    assert "\n" not in v.message
    assert repr(op) in v.message and repr(other) in v.message
    if position < len(lines):
        assert v.step == s.steps[position]
        assert v.message.startswith(f"step {position} ({s.steps[position].describe(residual)}): ")
    else:
        assert v.step is None
    assert v.rule in RULES


def test_violation_messages(residual):
    v = check_schedule(residual, make(residual, *PLAIN[:1] + PLAIN[2:])).violation
    assert v.message == ("step 1 (compute 'r', stage 2): input 'fc1' of op 'r' is not "
                         "resident in RAM")
    v = check_schedule(residual, make(residual, *PLAIN[:-4])).violation
    assert v.message == "after the last step (18 steps): op 'fc1/grad' is never computed"
    v = check_schedule(residual, make(residual, *PAGING), storage_capacity_bytes=15).violation
    assert v.message == ("step 7 (page_out 'r', stage 4): paging out tensor 'r' (16 B) needs "
                         "16 B of storage, over the capacity of 15 B")


def test_unknown_op(residual):
    s = make(residual, *PLAIN)
    bad = attrs.evolve(s, steps=s.steps[:3] + (Step("compute", 11, 2),) + s.steps[3:])
    v = check_schedule(residual, bad).violation
    assert (v.rule, v.position, v.op) == ("unknown_op", 3, 11)
    assert v.message == ("step 3 (compute #11, stage 2): op index 11 is not an op of graph "
                         "'residual' (11 ops)")


def test_fingerprint_mismatch(residual):
    s = attrs.evolve(make(residual, *PLAIN), graph_fingerprint="0" * 64)
    result = check_schedule(residual, s)
    v = result.violation
    assert (v.rule, v.position, v.step, v.op) == ("fingerprint_mismatch", -1, None, None)
    assert "\n" not in v.message and "'residual'" in v.message
    assert result.computes == 0 and result.peak_step == -1


def test_figures_stop_at_the_violation(residual):
    result = check_schedule(residual, make(residual, *insert(PLAIN, 4, "free fc1 2")))
    assert (result.computes, result.frees, result.peak_ram_bytes, result.peak_step) == \
        (3, 1, 64, 2)


# ----------------------------------------------------------------------------- budget


@pytest.mark.parametrize(("lines", "peak", "position"), [
    (REMAT, 96, 18), (PAGING, 96, 17), (PLAIN, 96, 14)])
def test_budget_passes_at_the_peak_and_fails_one_byte_below(residual, lines, peak, position):
    s = make(residual, *lines)
    assert check_schedule(residual, s, budget_bytes=peak).valid
    v = check_schedule(residual, s, budget_bytes=peak - 1).violation
    assert (v.rule, v.position) == ("budget_exceeded", position)
    assert "\n" not in v.message and "'r/grad'" in v.message


def test_budget_counts_the_resident_region(residual):
    s = make(residual, *PAGING)
    result = check_schedule(residual, s, budget_bytes=96 + 1000, resident_bytes=1000)
    assert result.valid
    assert (result.peak_ram_bytes, result.peak_activation_bytes) == (1096, 96)
    v = check_schedule(residual, s, budget_bytes=96 + 999, resident_bytes=1000).violation
    assert v.message == ("step 17 (compute 'r/grad', stage 9): RAM would reach 1096 B (96 B "
                         "activations while 'r/grad' runs + 1000 B resident), over the budget "
                         "of 1095 B")


def test_budget_applies_to_page_ins(residual):
    assert check_schedule(residual, make(residual, *PAGING_X), budget_bytes=64).valid
    # x paged in right after r/grad, before r, s/grad and fc2/grad are freed: 64 + 32 B.
    at = PAGING_X.index("compute r/grad 9") + 1
    early = (PAGING_X[:at] + ("page_in x 9",)
             + tuple(line for line in PAGING_X[at:] if line != "page_in x 10"))
    result = check_schedule(residual, make(residual, *early), budget_bytes=95)
    v = result.violation
    assert (v.rule, v.position, v.step.action) == ("budget_exceeded", at, Action.PAGE_IN)
    assert v.message == (f"step {at} (page_in 'x', stage 9): RAM would reach 96 B (96 B "
                         "activations after paging in 'x' + 0 B resident), over the budget of "
                         "95 B")
    result = check_schedule(residual, make(residual, *early))
    assert (result.peak_ram_bytes, result.peak_step) == (96, at)


def test_or_raise(residual):
    assert check_schedule_or_raise(residual, make(residual, *PLAIN)).valid
    with pytest.raises(ScheduleError) as err:
        check_schedule_or_raise(residual, make(residual, *PLAIN), budget_bytes=95)
    assert str(err.value).endswith("[budget_exceeded]")
    assert isinstance(err.value, ValueError)
    with pytest.raises(ScheduleError, match="budget_bytes = -1"):
        check_schedule(residual, make(residual, *PLAIN), budget_bytes=-1)


# ----------------------------------------------------------------------------- plain


@pytest.mark.parametrize("name", model_names())
def test_plain_schedule_peak_equals_plain_peak_on_the_zoo(name):
    graph = build_model(name)
    s = plain_schedule(graph)
    result = check_schedule(graph, s)
    assert result.valid, result.violation
    peak = plain_peak(graph)
    assert result.peak_ram_bytes == peak.bytes
    assert s.steps[result.peak_step] == Step("compute", peak.op_index, peak.op_index)
    assert (result.computes, result.frees, result.recomputes) == (len(graph), len(graph), 0)


@st.composite
def training_graphs(draw) -> TrainingGraph:
    """Random chains with random skip adds, random sizes and workspaces."""
    fg = ForwardGraph("random")
    names = [fg.input("x", draw(st.integers(0, 16)))]
    for i in range(draw(st.integers(1, 8))):
        kind = draw(st.sampled_from(["linear", "relu", "add", "conv2d"])) if i else "linear"
        inputs = [names[-1]]
        if kind == "add":
            if len(names) < 2:
                kind = "relu"
            else:
                inputs.append(draw(st.sampled_from(names[:-1])))
        params = draw(st.integers(1, 8)) if kind in ("linear", "conv2d") else 0
        names.append(fg.op(f"op{i}", kind, inputs, output_elements=draw(st.integers(0, 16)),
                           flops=1.0, param_count=params,
                           workspace_elements=draw(st.integers(0, 8))))
    fg.loss("loss", names[-1])
    return fg.build()


@settings(max_examples=60, deadline=None)
@given(training_graphs())
def test_plain_schedule_is_valid_with_the_plain_peak(graph):
    s = plain_schedule(graph)
    result = check_schedule(graph, s)
    assert result.valid, result.violation
    peak = plain_peak(graph)
    assert result.peak_ram_bytes == peak.bytes
    assert s.steps[result.peak_step] == Step("compute", peak.op_index, peak.op_index)
    if peak.bytes > 0:
        v = check_schedule(graph, s, budget_bytes=peak.bytes - 1).violation
        assert (v.rule, v.position) == ("budget_exceeded", result.peak_step)


@pytest.mark.parametrize("model", ["mlp", "resnet18_cifar", "transformer_block"])
def test_the_shared_ram_rule_agrees_with_the_checker(model):
    """The replay's RAM column (read by predictions and the transfer planner) and the
    checker with a resident region give the same peak on real schedules."""
    from poetsim.boards import get_board
    from poetsim.methods import produce
    from poetsim.request import resolve_request
    from poetsim.schedule.replay import replay
    from poetsim.zoo import build_model

    graph = build_model(model)
    request = resolve_request(graph, get_board("rpi4"), ram="70%", accounting="paper")
    for method in ("checkpoint_all", "dtr", "capuchin"):
        schedule = produce(request, method).schedule
        if schedule is None:
            continue
        check = check_schedule(graph, schedule, resident_bytes=7)
        ram = replay(graph, schedule).ram_bytes
        assert len(ram) == len(schedule.steps)
        assert max(ram) + 7 == check.peak_ram_bytes


def test_an_inplace_update_runs_once():
    """An op that applies its SGD step in place cannot be recomputed: its second run
    would read the updated weights (execute measured the earlier layers' gradients 1.3%
    off) and step twice."""
    graph = build_model("mlp", layers=3, inplace_update=1)
    plain = plain_schedule(graph)
    k = next(i for i, op in enumerate(graph.ops) if op.inplace_update and op.output_bytes)
    at = next(p for p, s in enumerate(plain.steps) if s.op == k and s.action is Action.COMPUTE)
    again = (Step(Action.FREE, k, plain.steps[at].stage),
             Step(Action.COMPUTE, k, plain.steps[at].stage))
    steps = plain.steps[:at + 1] + again + plain.steps[at + 1:]
    result = check_schedule(graph, Schedule.for_graph(graph, list(steps), {"method": "hand"}))
    assert not result.valid
    violation = result.violation
    assert violation.rule == "recomputed_inplace_update" and violation.position == at + 2
    assert graph.ops[k].name in violation.message
    assert check_schedule(graph, plain).valid


# ----------------------------------------------------------------------------- weight steps


@pytest.fixture(scope="module")
def streamed():
    """An MLP whose trained weights live on storage, updated in place: every forward op
    reads its weights, every backward op that updates them reads and writes them back."""
    from poetsim.graph.streaming import WeightsOnStorage

    graph = build_model("mlp", layers=3, width=16, inplace_update=1)
    return WeightsOnStorage(trained=True).graph(graph)


def test_the_plain_schedule_brackets_every_streaming_op_with_its_weight_steps(streamed):
    s = plain_schedule(streamed)
    assert check_schedule(streamed, s).valid
    fc1, grad = streamed.index("fc1"), streamed.index("fc1/grad")
    pairs = [(step.action, step.op) for step in s.steps]
    at = pairs.index((Action.COMPUTE, fc1))
    assert pairs[at - 1] == (Action.READ_WEIGHTS, fc1) and pairs[at + 1] != \
        (Action.WRITE_WEIGHTS, fc1)  # a forward op only reads
    at = pairs.index((Action.COMPUTE, grad))
    assert pairs[at - 1:at + 2] == [(Action.READ_WEIGHTS, grad), (Action.COMPUTE, grad),
                                    (Action.WRITE_WEIGHTS, grad)]
    relu = streamed.index("relu1")  # reads no weights
    assert (Action.READ_WEIGHTS, relu) not in pairs
    # a graph with its weights in RAM has no weight steps
    assert not any(step.action in (Action.READ_WEIGHTS, Action.WRITE_WEIGHTS)
                   for step in plain_schedule(build_model("mlp", layers=3, width=16)).steps)


def _without(schedule: Schedule, action: Action, name: str, graph) -> Schedule:
    k = graph.index(name)
    return attrs.evolve(schedule, steps=[s for s in schedule.steps
                                         if not (s.action is action and s.op == k)])


@pytest.mark.parametrize(("change", "rule", "where"), [
    (lambda s, g: _without(s, Action.READ_WEIGHTS, "fc2", g), "weights_not_read", "fc2"),
    (lambda s, g: _without(s, Action.WRITE_WEIGHTS, "fc2/grad", g), "weights_not_written",
     "fc2/grad"),
    # a read of an op that reads no weights
    (lambda s, g: attrs.evolve(s, steps=[Step(Action.READ_WEIGHTS, g.index("input"), 0),
                                         *s.steps]), "stray_weight_step", "input"),
    # the read away from its COMPUTE: the weights would sit in RAM unaccounted
    (lambda s, g: attrs.evolve(s, steps=[Step(Action.READ_WEIGHTS, g.index("fc1"), 0),
                                         *s.steps]), "stray_weight_step", "fc1"),
])
def test_weight_steps_must_bracket_their_compute(streamed, change, rule, where):
    result = check_schedule(streamed, change(plain_schedule(streamed), streamed))
    assert not result.valid and result.violation.rule == rule
    assert repr(where) in result.violation.message


# ----------------------------------------------------------------------------- weight holds


def with_holds(graph, steps, names) -> Schedule:
    """``steps`` (weight steps in them dropped) with the weights of the backward ops
    ``names`` held: ``HOLD_WEIGHTS b`` right before the first COMPUTE of its hold owner,
    ``DROP_WEIGHTS b`` right after its first COMPUTE; the weight steps put back by
    :func:`poetsim.schedule.ops.with_weight_steps`."""
    from poetsim.graph.streaming import hold_owners, weight_steps
    from poetsim.schedule.ops import WEIGHT_ACTIONS, with_weight_steps

    owners = hold_owners(graph)
    held = {graph.index(name) for name in names}
    assert all(owners[b] >= 0 for b in held)
    by_owner = {owners[b]: b for b in held}
    out = []
    for step in steps:
        if step.action in WEIGHT_ACTIONS:
            continue
        first = step.action is Action.COMPUTE and step not in out
        if first and step.op in by_owner:
            out.append(Step(Action.HOLD_WEIGHTS, by_owner[step.op], step.stage))
        out.append(step)
        if first and step.op in held:
            out.append(Step(Action.DROP_WEIGHTS, step.op, step.stage))
    return Schedule.for_graph(graph, with_weight_steps(out, *weight_steps(graph)),
                              {"method": "hand, holds"})


def _pairs(schedule: Schedule) -> list[tuple[Action, int]]:
    return [(step.action, step.op) for step in schedule.steps]


def test_a_hold_replaces_the_backward_ops_read(streamed):
    plain = plain_schedule(streamed)
    s = with_holds(streamed, plain.steps, ["fc2/grad"])
    assert check_schedule(streamed, s).valid
    f, b = streamed.index("fc2"), streamed.index("fc2/grad")
    pairs = _pairs(s)
    at = pairs.index((Action.HOLD_WEIGHTS, b))
    assert pairs[at:at + 3] == [(Action.HOLD_WEIGHTS, b), (Action.READ_WEIGHTS, f),
                                (Action.COMPUTE, f)]
    at = pairs.index((Action.COMPUTE, b))
    # no read before the held run; the write-back still follows it, then the drop
    assert pairs[at - 1] != (Action.READ_WEIGHTS, b)
    assert pairs[at:at + 3] == [(Action.COMPUTE, b), (Action.WRITE_WEIGHTS, b),
                                (Action.DROP_WEIGHTS, b)]
    assert len(s) == len(plain) + 2 - 1  # a hold and a drop, one read fewer
    # with_weight_steps is idempotent on a held list
    from poetsim.graph.streaming import weight_steps
    from poetsim.schedule.ops import with_weight_steps

    assert with_weight_steps(s.steps, *weight_steps(streamed)) == list(s.steps)


def test_held_weights_count_in_ram_from_the_hold_to_the_drop(streamed):
    from poetsim.graph.streaming import held_bytes as held_bytes_of
    from poetsim.schedule.replay import replay

    held_bytes = held_bytes_of(streamed)
    b = streamed.index("fc1/grad")
    assert held_bytes[b] == 50240 and sum(held_bytes) == 50240 + 1088 + 680
    plain = plain_schedule(streamed)
    s = with_holds(streamed, plain.steps, ["fc1/grad"])
    ram = replay(streamed, s).ram_bytes
    base = replay(streamed, plain).ram_bytes
    pairs = _pairs(s)
    hold, drop = pairs.index((Action.HOLD_WEIGHTS, b)), pairs.index((Action.DROP_WEIGHTS, b))
    f = streamed.index("fc1")
    during_f = pairs.index((Action.COMPUTE, f))
    assert during_f == hold + 2
    assert ram[hold] == ram[hold - 1] + held_bytes[b]  # counted from the hold on
    assert ram[during_f] == base[_pairs(plain).index((Action.COMPUTE, f))] + held_bytes[b]
    # and released at the drop (right after the backward op's run and its write-back)
    written = _pairs(plain).index((Action.WRITE_WEIGHTS, b))
    assert ram[drop] == ram[drop - 1] - held_bytes[b] == base[written]
    assert ram[drop + 1:] == base[written + 1:]
    # the checker's peak is the shared rule's; a budget a byte short fails at the hold
    check = check_schedule(streamed, s)
    assert check.peak_ram_bytes == max(ram) > check_schedule(streamed, plain).peak_ram_bytes
    v = check_schedule(streamed, s, budget_bytes=ram[hold] - 1).violation
    assert (v.rule, v.position) == ("budget_exceeded", hold)
    assert "holding the weights of 'fc1/grad'" in v.message


def _insert(schedule: Schedule, at, *steps: Step) -> Schedule:
    """``schedule`` with ``steps`` inserted at position ``at(pairs)``."""
    position = at(_pairs(schedule))
    return attrs.evolve(schedule, steps=[*schedule.steps[:position], *steps,
                                         *schedule.steps[position:]])


def _remove(schedule: Schedule, action: Action, name: str, graph) -> Schedule:
    return _without(schedule, action, name, graph)


def _held(graph, names=("fc2/grad",)) -> Schedule:
    return with_holds(graph, plain_schedule(graph).steps, names)


def _step(action: Action, graph, name: str) -> Step:
    return Step(action, graph.index(name), 0)


@pytest.mark.parametrize(("change", "rule", "where"), [
    # an op without a hold owner: a forward op, a backward op reading no weights
    (lambda g: _insert(plain_schedule(g),
                       lambda p: p.index((Action.READ_WEIGHTS, g.index("fc2"))),
                       _step(Action.HOLD_WEIGHTS, g, "fc2")), "stray_weight_step", "fc2"),
    (lambda g: _insert(_held(g), lambda p: 0, _step(Action.HOLD_WEIGHTS, g, "relu1/grad")),
     "stray_weight_step", "relu1/grad"),
    # held twice (the second hold at the end, never loaded again)
    (lambda g: _insert(_remove(_held(g), Action.DROP_WEIGHTS, "fc2/grad", g), lambda p: len(p),
                       _step(Action.HOLD_WEIGHTS, g, "fc2/grad")), "already_held", "fc2/grad"),
    # not loaded by its owner's run: anywhere else, or before another op's read
    (lambda g: _insert(plain_schedule(g), lambda p: 0, _step(Action.HOLD_WEIGHTS, g, "fc2/grad")),
     "hold_not_loaded", "fc2/grad"),
    (lambda g: _insert(plain_schedule(g), lambda p: p.index((Action.READ_WEIGHTS, g.index("fc1"))),
                       _step(Action.HOLD_WEIGHTS, g, "fc2/grad")), "hold_not_loaded", "fc2/grad"),
    # a hold between the owner's read and its COMPUTE breaks the read's bracket
    (lambda g: _insert(plain_schedule(g), lambda p: p.index((Action.COMPUTE, g.index("fc2"))),
                       _step(Action.HOLD_WEIGHTS, g, "fc2/grad")), "stray_weight_step", "fc2"),
    # a drop of weights not held, or dropped twice
    (lambda g: _insert(plain_schedule(g), lambda p: len(p),
                       _step(Action.DROP_WEIGHTS, g, "fc2/grad")), "not_held", "fc2/grad"),
    (lambda g: _insert(_held(g), lambda p: len(p), _step(Action.DROP_WEIGHTS, g, "fc2/grad")),
     "not_held", "fc2/grad"),
    # dropped before the backward op runs: it must read its weights again
    (lambda g: _insert(_remove(_held(g), Action.DROP_WEIGHTS, "fc2/grad", g),
                       lambda p: p.index((Action.COMPUTE, g.index("fc2"))) + 1,
                       _step(Action.DROP_WEIGHTS, g, "fc2/grad")), "weights_not_read",
     "fc2/grad"),
    # held or not, an op writing back runs its WRITE_WEIGHTS
    (lambda g: _remove(_held(g), Action.WRITE_WEIGHTS, "fc2/grad", g), "weights_not_written",
     "fc2/grad"),
])
def test_hold_rules(streamed, change, rule, where):
    result = check_schedule(streamed, change(streamed))
    assert not result.valid and result.violation.rule == rule, result.violation
    assert repr(where) in result.violation.message
    assert rule in RULES


def test_held_weights_may_be_read_again_and_stay_at_the_end(streamed):
    b = streamed.index("fc2/grad")
    s = _held(streamed)
    # a READ_WEIGHTS while held: it just streams them again
    again = _insert(s, lambda p: p.index((Action.COMPUTE, b)), Step(Action.READ_WEIGHTS, b, 0))
    assert check_schedule(streamed, again).valid
    # never dropped: like a tensor resident at the end
    kept = _remove(s, Action.DROP_WEIGHTS, "fc2/grad", streamed)
    assert check_schedule(streamed, kept).valid
    # every backward op that can hold, at once
    every = _held(streamed, ("fc1/grad", "fc2/grad", "fc3/grad"))
    assert check_schedule(streamed, every).valid
    assert every.count(Action.READ_WEIGHTS) == plain_schedule(streamed).count(
        Action.READ_WEIGHTS) - 3
