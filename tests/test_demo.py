"""The end-to-end demo, on a small model so that it runs in seconds."""

from __future__ import annotations

import json

import pytest

import poetsim.demo as demo
from poetsim.boards import get_board
from poetsim.cli.main import main
from poetsim.errors import InputError
from poetsim.methods import SolverSettings
from poetsim.request import resolve_request
from poetsim.zoo import build_model

FILES = ["summary.md", "summary.json", "costs.json", "schedule.json", "schedule.bin",
         "trace.json", "simulation.png", "comparison.png"]
QUICK = SolverSettings(time_limit_s=2)


def _request(board: str = demo.DEMO_BOARD, ram: str = demo.DEMO_RAM, **options):
    """The demo's own job (it must fit the demo board), on ``board``."""
    return resolve_request(build_model(demo.DEMO_MODEL, **demo.DEMO_MODEL_OPTIONS),
                           get_board(board), ram=ram, deadline=demo.DEMO_DEADLINE, **options)


def _unfit_request(accounting: str):
    """A model whose training state does not fit the demo's MCU board."""
    return resolve_request(build_model("mlp", layers=4, width=64), get_board("nrf52840"),
                           ram="90%", deadline="1.5x", accounting=accounting)


def test_run_demo_writes_a_complete_folder(tmp_path):
    lines: list[str] = []
    out = tmp_path / "demo"
    result = demo.run_demo(_request(), QUICK, out_dir=out, echo=lines.append)
    assert result.out_dir == out and result.passed
    assert sorted(p.name for p in out.iterdir()) == sorted(FILES)
    assert list(result.files) == FILES
    assert all((out / f).stat().st_size > 0 for f in FILES)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["verdict"] == "PASS" and summary["board"] == demo.DEMO_BOARD
    assert summary["fits_board_ram"] is True
    assert summary["peak_total_bytes"] <= summary["board_ram_bytes"]
    # the demo's story: training that needs remat or paging to fit the MCU at all
    poet = summary["poet"]
    assert poet["recomputations"] + poet["page_outs"] > 0
    assert summary["energy_per_iteration_j"] > 0 and summary["time_per_iteration_s"] > 0
    assert [r["method"] for r in summary["comparison"]] == ["poet", *demo.DEMO_BASELINES]
    trace = json.loads((out / "trace.json").read_text())
    assert trace["traceEvents"] and trace["otherData"]["verdict"] == "PASS"
    text = (out / "summary.md").read_text()
    assert "verdict on the board: **PASS** (physical accounting)" in text and "dtr" in text
    assert any(line.startswith("solving POET") for line in lines)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp folder


@pytest.mark.parametrize("accounting", ["physical", "paper"])
def test_the_demo_never_says_pass_for_a_model_that_does_not_fit_the_board(tmp_path, accounting):
    result = demo.run_demo(_unfit_request(accounting), QUICK, out_dir=tmp_path / accounting)
    summary = result.summary
    for row in summary["comparison"]:
        assert row["verdict"] != "PASS" or accounting == "paper"
        if row["peak_total_bytes"] is not None:
            assert row["fits_board_ram"] is False
    assert not (summary["verdict"] == "PASS" and accounting == "physical")
    if accounting == "physical":
        assert not result.passed and "usable RAM" in summary["unfit_reason"]
        assert summary["violations"] and "usable RAM" in summary["violations"][0]


def test_run_demo_refuses_a_used_folder_and_leaves_nothing_on_failure(tmp_path, monkeypatch):
    used = tmp_path / "used"
    used.mkdir()
    (used / "keep.txt").write_text("mine")
    with pytest.raises(InputError, match="exists and is not an empty folder"):
        demo.run_demo(_request(), QUICK, out_dir=used)
    assert [p.name for p in used.iterdir()] == ["keep.txt"]

    def broken(*_a, **_k):
        raise RuntimeError("disk full")

    monkeypatch.setattr(demo, "_plot_comparison", broken)
    with pytest.raises(RuntimeError, match="disk full"):
        demo.run_demo(_request(), QUICK, out_dir=tmp_path / "new")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["used"]


def test_default_out_dir_is_new(tmp_path):
    first = demo.default_out_dir(tmp_path)
    assert first.name.startswith("poetsim-demo-") and not first.exists()
    first.mkdir()
    assert demo.default_out_dir(tmp_path) != first


def test_demo_command(tmp_path, capsys):
    out = tmp_path / "d"
    status = main(["demo", "--time-limit", "5", "--out", str(out)])
    text = capsys.readouterr().out
    assert status == 0
    assert f"{demo.DEMO_MODEL} on {demo.DEMO_BOARD}: PASS [physical accounting]" in text
    # the main job is deterministic: bounded by SCIP nodes, the time limit only a cap
    assert f"effort {demo.DEMO_SETTINGS.effort} nodes" in text
    assert "capuchin" in text and str(out) in text
    assert (out / "summary.md").is_file()
    mlp = ["demo", "--model", "mlp", "--set", "layers=4", "--set", "width=64", "--ram", "90%",
           "--deadline", "1.5x", "--time-limit", "2"]
    status = main([*mlp, "--board", "rpi4", "--out", str(tmp_path / "j"), "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert status == 0 and doc["verdict"] == "PASS" and doc["out_dir"] == str(tmp_path / "j")
    # where the training state does not fit, the demo tells the truth: FAIL, exit 1
    status = main([*mlp, "--out", str(tmp_path / "m"), "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert status == 1 and doc["verdict"] is None and "usable RAM" in doc["violations"][0]


def test_a_spent_time_limit_draws_no_figure_and_says_so(tmp_path):
    """#32: drawing cannot be cut short, so a figure that would end past the limit is not
    begun; every method answers at once, and the summary is written."""
    import time

    lines: list[str] = []
    out = tmp_path / "demo"
    result = demo.run_demo(_request(), QUICK, out_dir=out, echo=lines.append,
                           started_at=time.perf_counter() - 1e9)
    assert list(result.files) == ["summary.md", "summary.json", "costs.json"]
    assert sorted(p.name for p in out.iterdir()) == sorted(result.files)
    assert all(o.status.value == "no_solution" for o in result.outcomes)
    assert ("  comparison.png not drawn: the 2 s time limit ran out before it was drawn; a "
            "longer time limit draws it") in lines
