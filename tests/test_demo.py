"""The end-to-end demo, on a small model so that it runs in seconds."""

from __future__ import annotations

import json

import pytest

import poetsim.demo as demo
from poetsim.cli.main import main
from poetsim.errors import InputError
from poetsim.zoo import build_model

FILES = ["summary.md", "summary.json", "costs.json", "schedule.json", "schedule.bin",
         "trace.json", "simulation.png", "comparison.png"]


def test_run_demo_writes_a_complete_folder(tmp_path):
    lines: list[str] = []
    out = tmp_path / "demo"
    result = demo.run_demo(build_model("mlp", layers=4, width=64), None, ram="90%",
                           time_limit_s=2, out_dir=out, echo=lines.append)
    assert result.out_dir == out and result.passed
    assert sorted(p.name for p in out.iterdir()) == sorted(FILES)
    assert list(result.files) == FILES
    assert all((out / f).stat().st_size > 0 for f in FILES)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["verified"] is True and summary["board"] == "nrf52840"
    assert [r["method"] for r in summary["comparison"]] == ["poet", *demo.DEMO_BASELINES]
    trace = json.loads((out / "trace.json").read_text())
    assert trace["traceEvents"]
    text = (out / "summary.md").read_text()
    assert "simulated on the board: **PASS**" in text and "| dtr |" in text
    assert any(line.startswith("solving POET") for line in lines)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp folder


def test_run_demo_refuses_a_used_folder_and_leaves_nothing_on_failure(tmp_path, monkeypatch):
    used = tmp_path / "used"
    used.mkdir()
    (used / "keep.txt").write_text("mine")
    with pytest.raises(InputError, match="exists and is not an empty folder"):
        demo.run_demo(build_model("mlp", layers=4, width=64), None, ram="90%",
                      time_limit_s=1, out_dir=used)
    assert [p.name for p in used.iterdir()] == ["keep.txt"]

    def broken(*_a, **_k):
        raise RuntimeError("disk full")

    monkeypatch.setattr(demo, "_plot_comparison", broken)
    with pytest.raises(RuntimeError, match="disk full"):
        demo.run_demo(build_model("mlp", layers=4, width=64), None, ram="90%",
                      time_limit_s=1, out_dir=tmp_path / "new")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["used"]


def test_default_out_dir_is_new(tmp_path):
    first = demo.default_out_dir(tmp_path)
    assert first.name.startswith("poetsim-demo-") and not first.exists()
    first.mkdir()
    assert demo.default_out_dir(tmp_path) != first


def test_demo_command(tmp_path, capsys):
    out = tmp_path / "d"
    status = main(["demo", "--model", "mlp", "--set", "layers=4", "--set", "width=64",
                   "--ram", "90%", "--time-limit", "2", "--out", str(out)])
    text = capsys.readouterr().out
    assert status == 0
    assert "PASS" in text and "capuchin" in text and str(out) in text
    assert (out / "summary.md").is_file()
    status = main(["demo", "--model", "mlp", "--set", "layers=4", "--set", "width=64",
                   "--ram", "90%", "--time-limit", "2", "--out", str(tmp_path / "j"), "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert status == 0 and doc["verified"] and doc["out_dir"] == str(tmp_path / "j")
