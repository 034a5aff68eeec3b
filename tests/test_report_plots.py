"""poetsim.report: the plotted series (hand-checked) and the PNG files."""

from __future__ import annotations

import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import make_board, paper_request, residual_graph

from poetsim.errors import InputError, ScheduleError
from poetsim.optimizer import solve
from poetsim.report import (
    CELL_COMPUTE,
    CELL_EMPTY,
    CELL_PAGE_IN,
    CELL_PAGE_OUT,
    CELL_RECOMPUTE,
    CELL_RESIDENT,
    backward_start,
    byte_unit,
    plot_power,
    plot_ram,
    plot_schedule_matrix,
    plot_simulation,
    power_series,
    ram_series,
    schedule_matrix,
    watt_unit,
)
from poetsim.schedule import Action, Schedule, Step, check_schedule, plain_schedule
from poetsim.sim import simulate
from poetsim.verdict import PASS, check_on_board

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"

C, PO, PI, F = Action.COMPUTE, Action.PAGE_OUT, Action.PAGE_IN, Action.FREE

# The residual graph: 0 x, 1 fc1, 2 r, 3 fc2, 4 s, 5 loss, 6 loss/grad, 7 s/grad,
# 8 fc2/grad (reads 2, 7), 9 r/grad (reads 2, 7, 8), 10 fc1/grad (reads 0, 9).
# x is paged out in stage 1 and read back for fc1/grad; r is freed after s and
# recomputed from fc1 for the backward pass.
HAND_STEPS = [
    (C, 0, 0),
    (C, 1, 1), (PO, 0, 1), (F, 0, 1),
    (C, 2, 2),
    (C, 3, 3),
    (C, 4, 4), (F, 3, 4), (F, 2, 4),
    (C, 5, 5),
    (C, 6, 6), (F, 5, 6), (F, 4, 6),
    (C, 7, 7), (F, 6, 7),
    (C, 2, 8), (C, 8, 8), (F, 1, 8),
    (C, 9, 9), (F, 8, 9), (F, 7, 9), (F, 2, 9),
    (PI, 0, 10), (C, 10, 10), (F, 9, 10), (F, 0, 10), (F, 10, 10),
]

_, R, K, RC, O, I = (  # noqa: E741
    CELL_EMPTY, CELL_RESIDENT, CELL_COMPUTE, CELL_RECOMPUTE, CELL_PAGE_OUT, CELL_PAGE_IN)
HAND_MATRIX = [
    # op: 0  1  2  3  4  5  6  7  8  9 10
    [K, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],  # stage 0
    [O, K, 0, 0, 0, 0, 0, 0, 0, 0, 0],  # x kept into stage 1, then paged out
    [0, R, K, 0, 0, 0, 0, 0, 0, 0, 0],
    [0, R, R, K, 0, 0, 0, 0, 0, 0, 0],
    [0, R, R, R, K, 0, 0, 0, 0, 0, 0],
    [0, R, 0, 0, R, K, 0, 0, 0, 0, 0],
    [0, R, 0, 0, R, R, K, 0, 0, 0, 0],
    [0, R, 0, 0, 0, 0, R, K, 0, 0, 0],
    [0, R, RC, 0, 0, 0, 0, R, K, 0, 0],  # r recomputed
    [0, 0, R, 0, 0, 0, 0, R, R, K, 0],
    [I, 0, 0, 0, 0, 0, 0, 0, 0, R, K],  # x paged back in
]


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


@pytest.fixture(scope="module")
def graph():
    return residual_graph()


@pytest.fixture(scope="module")
def board():
    return make_board()


@pytest.fixture(scope="module")
def hand_schedule(graph):
    schedule = Schedule.for_graph(graph, [Step(a, k, t) for a, k, t in HAND_STEPS],
                                  {"method": "hand", "board": "testboard"})
    assert check_schedule(graph, schedule).valid
    return schedule


@pytest.fixture(scope="module")
def hand_report(graph, board, hand_schedule):
    return simulate(graph, board, hand_schedule, resident_bytes=100, trace=True)


@pytest.fixture(scope="module")
def solved(graph, board):
    request = paper_request(graph, board, "70%")
    result = solve(request, time_limit_s=1)
    assert result.schedule is not None
    report, verdict = check_on_board(request, result.schedule, trace=True)
    assert report.budget_bytes == request.activation_budget_bytes + request.resident_bytes
    assert report.resident_bytes == request.resident_bytes
    assert verdict.passed and not report.violations, verdict.violations
    return result.schedule, report, verdict


# ----------------------------------------------------------------------------- data

def test_schedule_matrix_hand_checked(graph, hand_schedule):
    matrix = schedule_matrix(graph, hand_schedule)
    assert matrix.shape == (11, 11)
    assert matrix.tolist() == HAND_MATRIX


def test_schedule_matrix_plain_schedule_is_diagonal(graph):
    matrix = schedule_matrix(graph, plain_schedule(graph))
    assert matrix.shape == (len(graph), len(graph))
    assert (np.diag(matrix) == CELL_COMPUTE).all()
    assert not np.isin(matrix, [CELL_RECOMPUTE, CELL_PAGE_IN, CELL_PAGE_OUT]).any()
    assert (np.triu(matrix, 1) == CELL_EMPTY).all()


def test_schedule_matrix_rejects_foreign_op(graph):
    bad = Schedule("residual", "0" * 64, [Step(C, 0, 0), Step(C, 99, 1)])
    with pytest.raises(ScheduleError, match="op index 99"):
        schedule_matrix(graph, bad)


def test_backward_start(graph):
    assert backward_start(graph) == 6  # loss is op 5


def test_ram_series_hand_checked(hand_report):
    r = hand_report
    times, values = ram_series(r)
    assert times.dtype == float and values.dtype == np.int64
    assert len(times) == len(values) == len(r.timeline.ram) + (times[-2] < r.makespan_s)
    # Starts with the resident region at 0 s, ends at the makespan with every tensor freed.
    assert (times[0], values[0]) == (0.0, 100)
    assert times[-1] == pytest.approx(r.makespan_s)
    assert values[-1] == 100
    assert (np.diff(times) >= 0).all()
    assert values.max() == r.peak_ram_bytes
    assert values.min() >= r.resident_bytes
    # The peak sample sits at the reported peak time.
    assert r.peak_time_s in times[values == r.peak_ram_bytes]


def test_power_series_integrates_to_the_energy(hand_report):
    r = hand_report
    times, watts = power_series(r)
    assert list(watts) == ["cpu", "dma", "storage"]
    assert times[0] == 0.0 and times[-1] == pytest.approx(r.makespan_s)
    assert (np.diff(times) > 0).all()
    dt = np.diff(times)
    for component, series in watts.items():
        assert series.shape == times.shape
        assert (series >= 0).all()
        energy = float(np.sum(series[:-1] * dt))
        assert energy == pytest.approx(r.energy_by_component_j.get(component, 0.0),
                                       rel=1e-6, abs=1e-15)
    total = sum(float(np.sum(s[:-1] * dt)) for s in watts.values())
    assert total == pytest.approx(r.energy_j, rel=1e-6)
    # Paging ran: the storage drew more than its sleep power at some point, the DMA worked.
    assert r.energy_by_component_j["dma"] > 0 and watts["dma"].max() > 0
    assert watts["storage"].max() > watts["storage"].min()


def test_series_are_deterministic(graph, board, hand_schedule, hand_report):
    again = simulate(graph, board, hand_schedule, resident_bytes=100, trace=True)
    for a, b in zip(ram_series(hand_report), ram_series(again)):
        np.testing.assert_array_equal(a, b)
    times_a, watts_a = power_series(hand_report)
    times_b, watts_b = power_series(again)
    np.testing.assert_array_equal(times_a, times_b)
    assert list(watts_a) == list(watts_b)
    for name in watts_a:
        np.testing.assert_array_equal(watts_a[name], watts_b[name])
    np.testing.assert_array_equal(schedule_matrix(graph, hand_schedule),
                                  schedule_matrix(graph, hand_schedule))


def test_solved_series_match_the_report(graph, solved):
    schedule, report, _ = solved
    times, values = ram_series(report)
    assert values.max() == report.peak_ram_bytes
    assert values[0] == report.resident_bytes
    assert times[-1] == pytest.approx(report.makespan_s)
    times, watts = power_series(report)
    dt = np.diff(times)
    for component, series in watts.items():
        assert float(np.sum(series[:-1] * dt)) == pytest.approx(
            report.energy_by_component_j.get(component, 0.0), rel=1e-6, abs=1e-15)
    matrix = schedule_matrix(graph, schedule)
    assert matrix.shape == (schedule.stages, len(graph))
    assert int((matrix == CELL_RECOMPUTE).sum()) <= schedule.recomputations()


def test_units():
    assert byte_unit(100) == ("B", 1)
    assert byte_unit(2048) == ("KiB", 1024)
    assert byte_unit(3 << 20) == ("MiB", 1 << 20)
    assert watt_unit(0.25) == ("mW", 1e-3)
    assert watt_unit(2.0) == ("W", 1.0)
    assert watt_unit(5e-5) == ("µW", 1e-6)


# ----------------------------------------------------------------------------- plots

def _assert_png(path: Path, size: tuple[int, int]) -> None:
    assert path.is_file()
    assert _png_size(path) == size
    assert 5_000 < path.stat().st_size < 3_000_000
    # Written atomically: no temporary file left beside it.
    assert [p.name for p in path.parent.iterdir() if p.name.startswith(".")] == []


def test_plot_each(tmp_path, graph, solved):
    schedule, report, verdict = solved
    assert verdict.label == PASS
    plot_ram(report, tmp_path / "ram.png")
    _assert_png(tmp_path / "ram.png", (1200, 540))
    plot_power(report, tmp_path / "power.png")
    _assert_png(tmp_path / "power.png", (1200, 540))
    plot_schedule_matrix(graph, schedule, tmp_path / "matrix.png")
    _assert_png(tmp_path / "matrix.png", (1200, 960))
    plot_simulation(graph, schedule, report, tmp_path / "sim.png", verdict=verdict.label)
    _assert_png(tmp_path / "sim.png", (1440, 1080))  # 12 x 9 in at 120 dpi


def test_plot_with_paging_overwrites_and_svg(tmp_path, graph, hand_schedule, hand_report):
    target = tmp_path / "out" / "sim.png"  # missing folder is created
    plot_simulation(graph, hand_schedule, hand_report, target)
    first = target.read_bytes()
    assert first[:8] == PNG_SIGNATURE and len(first) > 5_000
    plot_simulation(graph, hand_schedule, hand_report, target)
    assert target.read_bytes() == first  # same figure, same bytes (no dates in the file)
    plot_ram(hand_report, tmp_path / "ram.svg")
    assert (tmp_path / "ram.svg").read_text().lstrip().startswith("<?xml")


def test_time_plots_need_a_trace(tmp_path, graph, board, hand_schedule):
    report = simulate(graph, board, hand_schedule)
    assert report.timeline is None
    for call in (lambda p: plot_ram(report, p), lambda p: plot_power(report, p),
                 lambda p: plot_simulation(graph, hand_schedule, report, p)):
        with pytest.raises(InputError, match="trace=True"):
            call(tmp_path / "x.png")
    for series in (ram_series, power_series):
        with pytest.raises(InputError, match="trace=True"):
            series(report)
    assert list(tmp_path.iterdir()) == []


def test_bad_arguments(tmp_path, graph, hand_schedule, hand_report):
    with pytest.raises(InputError, match="image format"):
        plot_ram(hand_report, tmp_path / "ram.bmpx")
    other = plain_schedule(graph)
    from poetsim.zoo import build_model

    mlp = build_model("mlp", layers=2)
    with pytest.raises(InputError, match="not for graph"):
        plot_schedule_matrix(mlp, other, tmp_path / "m.png")
    empty = Schedule.for_graph(graph, [])
    with pytest.raises(InputError, match="no steps"):
        plot_schedule_matrix(graph, empty, tmp_path / "m.png")
    assert list(tmp_path.iterdir()) == []


def test_import_does_not_load_matplotlib():
    code = "import sys, poetsim.report; print('matplotlib' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "False"


def test_transfer_labels_stack_instead_of_printing_over_each_other():
    """#31 item 5: close page-ins and page-outs (six on the MLP at 70% on the nRF52840,
    Capuchin's) get labels whose boxes do not overlap once drawn; apart, they sit on one
    level."""
    from poetsim.boards import get_board
    from poetsim.methods import produce
    from poetsim.report.plots import _draw_power, _label_levels, new_figure
    from poetsim.request import resolve_request
    from poetsim.zoo import build_model

    assert _label_levels([(0, 1), (2, 3), (4, 5)]) == [0, 0, 0]
    assert _label_levels([(0, 2), (1, 3), (1.5, 4), (2.5, 6)]) == [0, 1, 2, 0]
    graph = build_model("mlp")
    request = resolve_request(graph, get_board("nrf52840"), ram="70%", accounting="paper")
    produced = produce(request, "capuchin")
    report, _ = check_on_board(request, produced.schedule, trace=True)
    fig = new_figure(8, 4)
    ax = fig.add_subplot()
    _draw_power(ax, report)
    fig.canvas.draw()
    from matplotlib.text import Text

    # the text's own box (an Annotation's box also spans its leader line)
    boxes = [Text.get_window_extent(t) for t in ax.texts if t.get_text().startswith("page-")]
    assert len(boxes) == 6
    for i, a in enumerate(boxes):
        for b in boxes[i + 1:]:
            assert not a.overlaps(b), (a, b)
