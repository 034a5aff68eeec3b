"""The cost model: POET's formulas on paper boards, the physical model elsewhere."""

from __future__ import annotations

import math

import numpy as np
import pytest
from conftest import make_board

from poetsim.boards import Board, Bus, Cpu, Dma, Ram, Storage
from poetsim.costs import op_costs, transfer_cost
from poetsim.graph import (
    ForwardGraph,
    MeasuredCosts,
    Op,
    Phase,
    TrainingGraph,
    check_gradients,
    graph_from_dict,
    graph_to_dict,
)
from poetsim.graph.ops import MAX_BYTES, MAX_FLOPS

# POET's M4F (nRF52840) constants, poet/chipsets.py, as Python evaluates them.
M4F_FLOPS = (16283 * 100 * 1000) / 255.6237
M4F_FLOPS_PER_WATT = (16283 * 100 * 1000) / (255.6237 * 0.003328 * 3.3)
PAGEIN_LATENCY, PAGEIN_THROUGHPUT = 0.109e-3, 4616.51e3
PAGEOUT_LATENCY, PAGEOUT_THROUGHPUT = 0.113e-3, 4440e3
MEMORY_POWER = 100e-3 * 3.3


def poet_m4f_board() -> Board:
    return Board(
        name="poet_m4f", title="POET M4F profile", profile="paper",
        cpu=Cpu(core="Cortex-M4F", clock_hz=64e6, flops_per_s=M4F_FLOPS, active_power_w=0.011,
                idle_power_w=0, sleep_power_w=0, wakeup_latency_s=0, wakeup_energy_j=0,
                flops_per_j=M4F_FLOPS_PER_WATT),
        ram=Ram(bytes=256 * 1024, reserved_bytes=0, bandwidth_bytes_per_s=1e8),
        dma=Dma(channels=1, active_power_w=0, idle_power_w=0),
        storage=Storage(kind="sd_spi", bus_clock_hz=50e6, bus_width_bits=1, double_data_rate=False,
                        read_throughput_bytes_per_s=PAGEIN_THROUGHPUT,
                        write_throughput_bytes_per_s=PAGEOUT_THROUGHPUT,
                        read_latency_s=PAGEIN_LATENCY, write_latency_s=PAGEOUT_LATENCY,
                        block_bytes=1, max_command_bytes=1 << 35, read_power_w=MEMORY_POWER,
                        write_power_w=MEMORY_POWER, idle_power_w=0, sleep_power_w=0,
                        wakeup_latency_s=0, wakeup_energy_j=0, auto_sleep_timeout_s=0,
                        capacity_bytes=1 << 35),
        bus=Bus(bandwidth_bytes_per_s=1e8, contention_model="none", compute_slowdown=1.0),
    )


def conv_and_linear_graph():
    """A 3x3 conv 3->16 on 32x32 (pad 1), then a linear 16384 -> 10."""
    fg = ForwardGraph("conv_linear")
    x = fg.input("x", 3 * 32 * 32)
    conv_macs = 32 * 32 * 16 * 3 * 3 * 3
    c = fg.op("conv", "conv2d", [x], output_elements=16 * 32 * 32, flops=2 * conv_macs,
              param_count=16 * 27 + 16)
    fc = fg.op("fc", "linear", [c], output_elements=10, flops=2 * 16384 * 10,
               param_count=16384 * 10 + 10)
    fg.loss("loss", fc)
    return fg.build()


def test_paper_profile_equals_poet_formulas_for_conv_and_linear():
    graph = conv_and_linear_graph()
    costs = op_costs(graph, poet_m4f_board())
    conv, fc = graph.index("conv"), graph.index("fc")
    # Hand-computed: conv 884,736 FLOP; output 16x32x32 floats = 65,536 B.
    assert costs.compute_time_s[conv] == pytest.approx(884736 / 6369910.145264308, rel=1e-12)
    assert costs.compute_time_s[conv] == pytest.approx(0.13889, rel=1e-4)
    assert costs.compute_energy_j[conv] == pytest.approx(884736 / 580010757.690879, rel=1e-12)
    assert costs.compute_energy_j[conv] == pytest.approx(1.52538e-3, rel=1e-4)
    assert costs.pageout_time_s[conv] == pytest.approx(0.113e-3 + 65536 / 4440e3, rel=1e-12)
    assert costs.pageout_energy_j[conv] == pytest.approx((0.113e-3 + 65536 / 4440e3) * 0.33,
                                                         rel=1e-12)
    assert costs.pagein_energy_j[conv] == pytest.approx((0.109e-3 + 65536 / 4616510) * 0.33,
                                                        rel=1e-12)
    # Linear 16384 -> 10: 327,680 FLOP; output 10 floats = 40 B.
    assert costs.compute_time_s[fc] == pytest.approx(327680 / M4F_FLOPS, rel=1e-12)
    assert costs.compute_energy_j[fc] == pytest.approx(5.64958e-4, rel=1e-4)
    assert costs.pagein_time_s[fc] == pytest.approx(0.109e-3 + 40 / 4616510, rel=1e-12)
    # Backward conv computes only the weight gradient (its input is the data).
    conv_grad = graph.index("conv/grad")
    assert costs.compute_energy_j[conv_grad] == pytest.approx(884736 / M4F_FLOPS_PER_WATT)


def test_physical_transfer_rounds_blocks_and_counts_commands():
    board = make_board()
    # 1000 B -> 1024 B (2 blocks), one command.
    t = transfer_cost(board, 1000, write=False)
    assert t.time_s == pytest.approx(1e-3 + 1024 / 1e6)
    assert t.energy_j == pytest.approx(t.time_s * (0.1 + 0.002))  # storage + DMA
    # 10,000 B -> 10,240 B, 3 commands of at most 4096 B.
    t = transfer_cost(board, 10_000, write=True)
    assert t.time_s == pytest.approx(3 * 2e-3 + 10240 / 0.5e6)
    assert t.energy_j == pytest.approx(t.time_s * (0.2 + 0.002))
    assert transfer_cost(board, 0, write=True).time_s == 0


def test_without_dma_the_cpu_moves_the_bytes():
    board = make_board(dma_channels=0)
    t = transfer_cost(board, 512, write=False)
    assert t.energy_j == pytest.approx(t.time_s * (0.1 + board.cpu.active_power_w))


def test_nor_flash_erases_before_write():
    board = make_board(storage_kind="qspi_nor", block_bytes=256, max_command_bytes=256)
    t = transfer_cost(board, 5000, write=True)  # 20 pages of 256 B, 2 sectors of 4 KiB
    program = 20 * 2e-3 + 5120 / 0.5e6
    assert t.time_s == pytest.approx(program + 2 * 0.05)
    assert t.energy_j == pytest.approx(program * (0.2 + 0.002) + 2 * 0.05 * 0.08)
    read = transfer_cost(board, 5000, write=False)
    assert read.time_s == pytest.approx(20 * 1e-3 + 5120 / 1e6)


def test_physical_compute_is_a_roofline():
    graph = conv_and_linear_graph()
    board = make_board()
    costs = op_costs(graph, board)
    conv = graph.index("conv")
    # Conv: compute-bound, 884,736 FLOP at 1 MFLOP/s.
    moved = 3 * 1024 * 4 + 65536 + (16 * 27 + 16) * 4
    assert costs.compute_time_s[conv] == pytest.approx(max(884736 / 1e6, moved / 1e7))
    assert costs.compute_energy_j[conv] == pytest.approx(costs.compute_time_s[conv] * 0.01)
    # The input op reads the batch from storage; with DMA the CPU waits for it, awake.
    x = graph.index("x")
    read = transfer_cost(board, 12288, write=False)
    assert costs.compute_time_s[x] == read.time_s
    assert costs.compute_energy_j[x] == pytest.approx(read.energy_j + read.time_s * 0.005)
    # Without DMA the CPU moves the bytes itself, which the read's mover power prices.
    read = transfer_cost(make_board(dma_channels=0), 12288, write=False)
    without_dma = op_costs(graph, make_board(dma_channels=0))
    assert (without_dma.compute_time_s[x], without_dma.compute_energy_j[x]) == (
        read.time_s, read.energy_j)


def test_memory_bound_op_is_priced_by_bytes():
    fg = ForwardGraph("relu")
    x = fg.input("x", 1000)
    fc = fg.op("fc", "linear", [x], output_elements=1000, flops=10, param_count=1)
    fg.op("r", "relu", [fc], output_elements=1000, flops=100)
    fg.loss("loss", "r")
    graph = fg.build()
    board = make_board()
    t = op_costs(graph, board).compute_time_s[graph.index("r")]
    assert t == pytest.approx(8000 / 1e7)  # 8 KB moved at 10 MB/s, not 100 FLOP at 1 MFLOP/s


def test_a_frozen_layers_backward_reads_its_weights_but_writes_no_gradient():
    """By the roofline on a memory-bound board: a backward op moves its forward op's
    weights once (read) plus the gradients of the trained ones (write)."""
    import attrs

    from poetsim.zoo import build_model

    board = make_board()
    board = attrs.evolve(board, cpu=attrs.evolve(board.cpu, flops_per_s=1e15))
    full = build_model("mlp", layers=2, width=8)
    frozen = build_model("mlp", layers=2, width=8, bias_only=1)
    full_s, frozen_s = op_costs(full, board).compute_time_s, op_costs(frozen, board).compute_time_s
    checked = 0
    for op in frozen.ops:
        if op.forward_of is None:
            continue
        forward = frozen.op(op.forward_of)
        if forward.frozen_param_bytes == 0:
            continue
        k, k_full = frozen.index(op.name), full.index(op.name)
        saved_bytes = (full_s[k_full] - frozen_s[k]) * 1e7  # at 10 MB/s
        extra = (sum(full.ops[u].output_bytes for u in full.predecessors(k_full))
                 - sum(frozen.ops[u].output_bytes for u in frozen.predecessors(k)))
        assert saved_bytes == pytest.approx(forward.frozen_param_bytes + extra, rel=1e-9)
        checked += 1
    assert checked >= 1


def test_measured_costs_replace_each_analytic_value():
    graph = conv_and_linear_graph()
    doc = graph_to_dict(graph)
    doc["ops"][1]["measured"] = {"compute_time_s": 0.5, "pagein_energy_j": 0.25}
    measured = graph_from_dict(doc)
    board = make_board()
    plain, profiled = op_costs(graph, board), op_costs(measured, board)
    conv = graph.index("conv")
    assert profiled.compute_time_s[conv] == 0.5
    assert profiled.pagein_energy_j[conv] == 0.25
    assert profiled.compute_energy_j[conv] == plain.compute_energy_j[conv]
    assert profiled.measured[conv] and not profiled.measured[graph.index("fc")]


def test_costs_are_read_only_and_finite():
    costs = op_costs(conv_and_linear_graph(), make_board())
    with pytest.raises(ValueError):
        costs.compute_time_s[0] = 1.0
    for name in ("compute_time_s", "compute_energy_j", "pagein_time_s", "pageout_energy_j"):
        assert all(math.isfinite(v) and v >= 0 for v in getattr(costs, name))
    assert MeasuredCosts().empty


def _largest_graph() -> TrainingGraph:
    """Every cost at the top of the graph file's plausibility range (poetsim.graph.ops)."""
    big = dict(flops=MAX_FLOPS, output_bytes=MAX_BYTES, workspace_bytes=MAX_BYTES)
    ops = [Op("x", "input", Phase.FORWARD, output_bytes=MAX_BYTES),
           Op("fc", "linear", Phase.FORWARD, param_bytes=MAX_BYTES, **big),
           Op("loss", "cross_entropy", Phase.LOSS, **big),
           Op("loss/grad", "cross_entropy", Phase.BACKWARD, forward_of="loss", **big),
           Op("fc/grad", "linear", Phase.BACKWARD, forward_of="fc", **big)]
    inputs = {"fc": ["x"], "loss": ["fc"], "loss/grad": ["loss", "fc"],
              "fc/grad": ["x", "loss/grad"]}
    return TrainingGraph.from_ops("largest", ops, inputs)


@pytest.mark.parametrize("board", [
    # the slowest storage a board file may declare: 1-byte blocks and commands, 10 s each
    lambda: make_board(read_throughput_bytes_per_s=1e2, write_throughput_bytes_per_s=1e2,
                       read_latency_s=10.0, write_latency_s=10.0, block_bytes=1,
                       max_command_bytes=1),
    lambda: make_board(storage_kind="qspi_nor", block_bytes=1, erase_sector_bytes=1,
                       erase_time_s=10.0),
    lambda: make_board("paper"),
    poet_m4f_board,
])
def test_costs_stay_finite_at_the_largest_allowed_numbers(board):
    graph = _largest_graph()
    check_gradients(graph)
    with np.errstate(all="raise"):
        costs = op_costs(graph, board())
    for name in ("compute_time_s", "compute_energy_j", "pagein_time_s", "pagein_energy_j",
                 "pageout_time_s", "pageout_energy_j"):
        values = getattr(costs, name)
        assert np.all(np.isfinite(values)) and np.all(values >= 0), name
    assert list(costs.output_bytes) == [MAX_BYTES] * len(graph)
    assert costs.output_bytes.sum() == MAX_BYTES * len(graph)  # int64 sums do not wrap


def test_a_spent_time_limit_stops_costing_a_long_graph():
    import time

    from poetsim import clock
    from poetsim.boards import get_board
    from poetsim.errors import OutOfTime
    from poetsim.zoo import build_model

    graph = build_model("mlp", layers=300, width=4)
    with clock.command(time.perf_counter() - 1e9, 1.0), pytest.raises(OutOfTime):
        op_costs(graph, get_board("rpi4"))
    # the same costs for every op of one size, priced once
    costs = op_costs(graph, get_board("rpi4"))
    size = graph.ops[1].output_bytes
    same = [k for k, op in enumerate(graph.ops) if op.output_bytes == size]
    assert len(same) > 100
    assert {float(costs.pagein_energy_j[k]) for k in same} == {
        transfer_cost(get_board("rpi4"), size, write=False).energy_j}
