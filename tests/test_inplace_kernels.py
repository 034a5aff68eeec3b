"""In-place kernels (Op.overwrites): an op whose output may take over an input's buffer, in the
graph, the replay, the arena, the simulator, the optimizer and the zoo's int8 models."""

from __future__ import annotations

import attrs
import pytest
from conftest import make_board, paper_request
from test_sim_support import hand

from poetsim.errors import GraphError
from poetsim.graph import Op, Phase, TrainingGraph, graph_from_dict, graph_to_dict
from poetsim.graph.memory import minimum_ram_bytes, plain_peak
from poetsim.optimizer import SolveStatus, solve
from poetsim.schedule import check_schedule
from poetsim.schedule.arena import check_layout, plan_arena
from poetsim.schedule.replay import Replay, replay
from poetsim.sim import simulate
from poetsim.zoo import build_model


def chain(overwrites: str | None = "x") -> TrainingGraph:
    """x (64 B) -> a (64 B, may overwrite x, 8 B of workspace) -> loss -> backward."""
    ops = [Op("x", "input", Phase.FORWARD, output_bytes=64),
           Op("a", "linear", Phase.FORWARD, flops=1000, output_bytes=64, workspace_bytes=8,
              param_bytes=64, overwrites=overwrites),
           Op("loss", "cross_entropy", Phase.LOSS, flops=100, output_bytes=4),
           Op("loss/grad", "cross_entropy", Phase.BACKWARD, flops=100, output_bytes=64,
              forward_of="loss"),
           Op("a/grad", "linear", Phase.BACKWARD, flops=1000, output_bytes=0,
              forward_of="a")]
    inputs = {"a": ["x"], "loss": ["a"], "loss/grad": ["loss"], "a/grad": ["loss/grad"]}
    return TrainingGraph.from_ops("chain", ops, inputs)


IN_PLACE = ("compute x 0", "compute a 1", "free x 1", "compute loss 2", "free a 2",
            "compute loss/grad 3", "free loss 3", "compute a/grad 4", "free loss/grad 4")


# ------------------------------------------------------------------ the graph


def test_an_op_may_overwrite_only_an_input_no_smaller_than_its_output():
    graph = chain()
    assert graph.overwrites(graph.index("a")) == graph.index("x")
    assert graph.overwrites(graph.index("loss")) == -1
    ops = list(graph.ops)
    with pytest.raises(GraphError, match=r"op 'a': overwrites = 'loss': must be one of the "
                                         r"op's inputs"):
        TrainingGraph.from_ops("bad", [attrs.evolve(ops[1], overwrites="loss"), *ops[:1],
                                       *ops[2:]],
                               {"a": ["x"], "loss": ["a"], "loss/grad": ["loss"],
                                "a/grad": ["loss/grad"]})
    big = attrs.evolve(ops[1], output_bytes=65)
    with pytest.raises(GraphError, match=r"larger than that input \(64 B\)"):
        TrainingGraph.from_ops("bad", [ops[0], big, *ops[2:]],
                               {"a": ["x"], "loss": ["a"], "loss/grad": ["loss"],
                                "a/grad": ["loss/grad"]})
    with pytest.raises(GraphError, match="overwrites = 3: must be an op name"):
        Op("a", "relu", Phase.FORWARD, output_bytes=4, overwrites=3)


def test_graph_files_keep_the_declaration_and_old_files_their_fingerprint():
    from poetsim.graph import graph_fingerprint

    graph = chain()
    data = graph_to_dict(graph)
    assert [op.get("overwrites") for op in data["ops"]] == [None, "x", None, None, None]
    back = graph_from_dict(data)
    assert back.overwrites(back.index("a")) == back.index("x")
    assert graph_fingerprint(back) == graph_fingerprint(graph)
    plain = chain(None)
    assert "overwrites" not in str(graph_to_dict(plain))
    assert graph_fingerprint(plain) != graph_fingerprint(graph)


def test_the_floors_count_the_output_in_the_input_buffer():
    graph, plain = chain(), chain(None)
    # while a runs: x, a's workspace; a's output lands in x's buffer
    assert minimum_ram_bytes(graph) == (72, "a")
    assert minimum_ram_bytes(plain) == (136, "a")
    assert plain_peak(graph).bytes == 72 == plain_peak(plain).bytes - 64


# ------------------------------------------------------------------ the replay


def test_the_replay_runs_an_op_in_place_only_where_its_input_dies_with_it():
    graph = chain()
    a = graph.index("a")
    done = replay(graph, hand(graph, *IN_PLACE))
    assert done.ram_bytes[1] == 64 + 8 and done.overwrites == {1: graph.index("x")}
    assert done.ram_bytes[2] == 64  # x's FREE leaves a's output in its buffer
    assert done.peak_bytes == 72
    # x kept past a's run: a writes a buffer of its own
    kept = ("compute x 0", "compute a 1", "compute loss 2", "free x 2", "free a 2",
            *IN_PLACE[5:])
    assert replay(graph, hand(graph, *kept)).ram_bytes[1] == 64 + 64 + 8
    # x paged out after a ran: a must not have overwritten it
    written = ("compute x 0", "compute a 1", "page_out x 1", "free x 1", *IN_PLACE[3:])
    done = replay(graph, hand(graph, *written))
    assert done.ram_bytes[1] == 136 and done.overwrites == {}
    # paged out before: in place, the copy on storage stays valid
    before = ("compute x 0", "page_out x 0", *IN_PLACE[1:])
    done = replay(graph, hand(graph, *before))
    assert done.ram_bytes[2] == 72 and done.overwrites == {2: graph.index("x")}
    assert list(Replay(graph, hand(graph, *IN_PLACE)))[1].overwrites == graph.index("x")
    assert check_schedule(graph, hand(graph, *IN_PLACE), budget_bytes=72).valid
    assert not check_schedule(graph, hand(graph, *kept), budget_bytes=72).valid
    assert a == 1


# ------------------------------------------------------------------ the arena


def test_the_arena_puts_an_in_place_output_in_its_inputs_buffer():
    graph = chain()
    plan = plan_arena(replay(graph, hand(graph, *IN_PLACE)))
    tensors = {b.op: b for b in plan.buffers if b.kind == "tensor"}
    x, a = tensors[graph.index("x")], tensors[graph.index("a")]
    assert a.offset_bytes == x.offset_bytes and a.shares == graph.index("x")
    assert plan.peak_bytes == replay(graph, hand(graph, *IN_PLACE)).peak_bytes
    assert check_layout(plan.buffers, plan.arena_bytes) is None
    # the overlap is allowed for the declared pair only: a workspace there is not
    workspace = next(b for b in plan.buffers if b.kind == "workspace")
    moved = [attrs.evolve(b, offset_bytes=x.offset_bytes) if b is workspace else b
             for b in plan.buffers]
    assert "share bytes" in check_layout(moved, plan.arena_bytes)
    # nor an output placed past the end of the buffer it took over
    shifted = [attrs.evolve(b, offset_bytes=b.offset_bytes + 8) if b is a else b
               for b in plan.buffers]
    assert "share bytes" in check_layout(shifted, plan.arena_bytes + 8)


# ------------------------------------------------------------------ the simulator


def test_the_simulator_allocates_an_in_place_output_nowhere():
    graph = chain()
    board = make_board()
    report = simulate(graph, board, hand(graph, *IN_PLACE))
    assert report.peak_ram_bytes == replay(graph, hand(graph, *IN_PLACE)).peak_bytes
    plain = chain(None)
    steps = hand(plain, *IN_PLACE)
    assert simulate(plain, board, steps).peak_ram_bytes == report.peak_ram_bytes + 64


def test_an_in_place_run_waits_for_the_write_of_its_input():
    graph = chain()
    board = make_board()  # with DMA: the page-out runs beside the CPU
    lines = ("compute x 0", "page_out x 0", *IN_PLACE[1:6], "page_in x 3", "free x 3",
             *IN_PLACE[6:])
    def stalls(graph: TrainingGraph) -> list[tuple[str, int]]:
        report = simulate(graph, board, hand(graph, *lines), trace=True)
        return [(s.args["waiting_for"], s.args["step"]) for s in report.timeline.slices
                if s.name == "stall"]

    assert stalls(graph) == [("page_out x", 2)]  # a's run, before it overwrites x
    # an op with a buffer of its own goes on; the FREE of x waits for the write instead
    # (when the next allocation needs its RAM)
    assert ("page_out x", 2) not in stalls(chain(None))


# ------------------------------------------------------------------ the optimizer


@pytest.mark.parametrize(("remat", "paging"), [(True, True), (False, True), (True, False)])
def test_the_solver_plans_at_the_in_place_floor(remat, paging):
    graph = chain()
    board = make_board()
    floor, _ = minimum_ram_bytes(graph)
    result = solve(paper_request(graph, board, floor), remat=remat, paging=paging,
                   time_limit_s=30)
    if remat and not paging:  # the loss's gradient needs a's output or x's: both 64 B
        assert result.status in (SolveStatus.OPTIMAL, SolveStatus.INFEASIBLE)
        return
    assert result.status is SolveStatus.OPTIMAL, result.message
    check = check_schedule(graph, result.schedule, budget_bytes=floor)
    assert check.valid and check.peak_ram_bytes == result.metrics.peak_ram_bytes <= floor
    assert solve(paper_request(chain(None), board, floor), remat=remat, paging=paging,
                 time_limit_s=30).status is SolveStatus.INFEASIBLE


# ------------------------------------------------------------------ the zoo


def test_int8_graphs_run_depthwise_convolutions_and_residual_adds_in_place():
    graph = build_model("mobilenet_v2_w035", int8=1, sparse_update=1)
    dw = graph.op("block2.dw.conv")
    assert dw.overwrites == "block2.expand.conv"
    assert dw.workspace_bytes >= 64 * 64  # one padded input channel, int8
    adds = [op for op in graph.ops if op.kind == "add" and op.phase is Phase.FORWARD]
    assert adds and all(op.overwrites is not None for op in adds)
    # backward: a stride-1 depthwise convolution's input gradient over the incoming one
    # (channel by channel), a stride-2 one's is larger and gets its own buffer
    dw_grad = graph.op("block13.dw.conv/grad")
    assert dw_grad.overwrites == "block13.project.conv/grad"
    assert dw_grad.output_bytes == graph.op("block13.project.conv/grad").output_bytes
    strided = graph.op("block14.dw.conv/grad")
    assert strided.output_bytes > graph.op("block14.project.conv/grad").output_bytes
    assert strided.overwrites is None
    fp32 = build_model("mobilenet_v2_w035", sparse_update=1)
    assert all(op.overwrites is None for op in fp32.ops)
    # the depthwise convolution no longer sets the floor of the model
    assert minimum_ram_bytes(graph)[1] != "block2.dw.conv"
