"""poetsim.regress and ``poetsim regress``: golden schedules, what moved, and is it a regression."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from poetsim.cli.main import main
from poetsim.errors import InputError
from poetsim.regress import check_goldens, load_cases, make_goldens, update_goldens

LANDED = Path(__file__).resolve().parents[1] / "schedules"

CASES = """
[[case]]
name = "dtr-mlp-nrf52840-60-paper"
model = "mlp"
options = { layers = 3 }
board = "nrf52840"
ram = "60%"
accounting = "paper"
method = "dtr"

[[case]]
name = "poet-mlp-nrf52840-90-paper"
model = "mlp"
options = { layers = 4, width = 64 }
board = "nrf52840"
accounting = "paper"
ram = "90%"
deadline = "1.3x"
method = "poet"
effort = 20
time_limit_s = 60
"""


@pytest.fixture
def goldens(tmp_path):
    (tmp_path / "cases.toml").write_text(CASES)
    written = make_goldens(tmp_path)
    assert [p.name for p in written] == ["dtr-mlp-nrf52840-60-paper.json",
                                         "poet-mlp-nrf52840-90-paper.json"]
    return tmp_path


def _rewrite(path: Path, change) -> None:
    """Change a golden's document as a poetsim that wrote it so would have (the digest made
    again: a change by hand alone is an error of its own)."""
    from poetsim.schedule.io import content_digest

    doc = json.loads(path.read_text())
    change(doc)
    doc["metadata"]["digest"] = content_digest(doc)
    path.write_text(json.dumps(doc))


def _edit_expected(path: Path, field: str, factor: float) -> None:
    """Move an expected figure by ``factor``."""
    _rewrite(path, lambda doc: doc["metadata"]["expected"].update(
        {field: doc["metadata"]["expected"][field] * factor}))


def test_fresh_goldens_check_ok_and_carry_how_to_remake_them(goldens):
    checks = check_goldens(goldens)
    assert [c.status for c in checks] == ["ok", "ok"]
    meta = json.loads((goldens / "poet-mlp-nrf52840-90-paper.json").read_text())["metadata"]
    assert meta["case"] == "poet-mlp-nrf52840-90-paper" and meta["model_options"] == {"layers": 4,
                                                                            "width": 64}
    assert meta["solver"]["effort"] == 20 and meta["expected"]["verdict"] in ("PASS", "FAIL")
    assert {"energy_j", "peak_total_bytes", "makespan_s", "objective_j",
            "bound_j"} <= set(meta["expected"])
    assert make_goldens(goldens) == []  # nothing missing


def test_a_lowered_expected_energy_is_a_regression_named_by_case(goldens, capsys):
    _edit_expected(goldens / "dtr-mlp-nrf52840-60-paper.json", "energy_j", 0.95)
    assert main(["regress", str(goldens)]) == 1
    out = capsys.readouterr().out
    assert "REGRESSED dtr-mlp-nrf52840-60-paper" in out and "energy_j" in out
    assert out.splitlines()[-1].endswith("regressed: dtr-mlp-nrf52840-60-paper")
    # a raised expectation is an improvement: nothing regressed
    _edit_expected(goldens / "dtr-mlp-nrf52840-60-paper.json", "energy_j", 1.1 / 0.95)
    assert main(["regress", str(goldens), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [c["status"] for c in doc["cases"]] == ["improved", "ok"]


def test_a_higher_peak_or_longer_run_that_buys_less_energy_is_no_regression(goldens):
    golden = goldens / "dtr-mlp-nrf52840-60-paper.json"
    _rewrite(golden, lambda doc: doc["metadata"]["expected"].update(  # the peak rose 4 KiB
        peak_total_bytes=doc["metadata"]["expected"]["peak_total_bytes"] - 4096))
    assert [c.status for c in check_goldens(goldens)] == ["regressed", "ok"]  # alone: worse
    _edit_expected(golden, "energy_j", 1.1)
    _edit_expected(golden, "makespan_s", 0.9)
    check = check_goldens(goldens)[0]
    assert check.status == "improved"
    assert {c.field: c.worse for c in check.changes} == {
        "energy_j": False, "peak_total_bytes": True, "makespan_s": True}
    _edit_expected(golden, "energy_j", 0.9 / 1.1)  # the energy rose too: a regression
    assert check_goldens(goldens)[0].status == "regressed"


def test_update_rewrites_the_expected_figures_on_purpose(goldens, capsys):
    _edit_expected(goldens / "dtr-mlp-nrf52840-60-paper.json", "makespan_s", 0.5)
    assert main(["regress", str(goldens), "--update"]) == 0
    assert "updated" in capsys.readouterr().out
    assert [c.status for c in check_goldens(goldens)] == ["ok", "ok"]


def test_resolve_solves_the_milp_cases_again_deterministically(goldens):
    checks = check_goldens(goldens, resolve=True)
    assert [c.status for c in checks] == ["ok", "ok"]
    assert checks[1].found["objective_j"] is not None and checks[1].resolved is not None
    _edit_expected(goldens / "poet-mlp-nrf52840-90-paper.json", "objective_j", 0.9)
    checks = check_goldens(goldens, resolve=True)
    assert checks[1].status == "regressed"
    assert [c.field for c in checks[1].changes] == ["objective_j"]
    assert update_goldens(checks)[0].startswith("updated ")


def test_a_resolve_keeps_within_the_cases_time_limit():
    """#32 item 3: a case's time_limit_s holds for its re-solve and the re-solve's
    simulation: no schedule of a 2,401-op chain is found and simulated in a millisecond."""
    from poetsim.boards import get_board
    from poetsim.methods import SolverSettings
    from poetsim.regress import _solved
    from poetsim.request import resolve_request
    from poetsim.zoo import build_model

    request = resolve_request(build_model("mlp", layers=600, width=4), get_board("rpi4"),
                              ram="50%", deadline="1.5x")
    outcome = _solved(request, "poet", SolverSettings(time_limit_s=0.001, effort=20))
    assert outcome.verdict is None and "the 0.001 s time_limit_s " in outcome.why_not
    assert "ran out" in outcome.why_not and "a longer time_limit_s" in outcome.why_not


def test_a_broken_golden_is_an_error_not_a_crash(goldens, capsys):
    (goldens / "poet-mlp-nrf52840-90-paper.json").write_text("{not json")
    assert main(["regress", str(goldens)]) == 1
    assert "ERROR     poet-mlp-nrf52840-90-paper" in capsys.readouterr().out


@pytest.mark.parametrize("change, message", [
    # the deadline word of a golden edited, or deleted, by hand
    (lambda meta: meta.update(deadline="100x"), "changed by hand since poetsim wrote it"),
    (lambda meta: meta.update(ram="90%"), "changed by hand since poetsim wrote it"),
    (lambda meta: meta.pop("digest"), "records no digest"),
])
def test_a_golden_changed_by_hand_is_an_error(goldens, capsys, change, message):
    path = goldens / "dtr-mlp-nrf52840-60-paper.json"
    doc = json.loads(path.read_text())
    change(doc["metadata"])
    path.write_text(json.dumps(doc))
    assert main(["regress", str(goldens)]) == 1
    line = next(x for x in capsys.readouterr().out.splitlines()
                if x.startswith("ERROR     dtr-mlp-nrf52840-60-paper"))
    assert message in line and "regress --make" in line


@pytest.mark.parametrize("change, resolve, message", [
    (lambda meta: meta["expected"].pop("energy_j"), [],
     "metadata.expected.energy_j is missing: a golden expects energy_j, "),
    (lambda meta: meta["expected"].update(makespan_s=None), ["--resolve"],
     "metadata.expected.makespan_s is missing"),
    (lambda meta: meta.update(method="nope"), ["--resolve"],
     "metadata.method = 'nope': must be one of poet, "),
])
def test_a_golden_that_would_switch_a_check_off_is_an_error(goldens, capsys, change, message,
                                                            resolve):
    """#32: a golden expecting no energy was checked without it, one of an unknown method
    was never re-solved: both passed as ok."""
    _rewrite(goldens / "poet-mlp-nrf52840-90-paper.json", lambda doc: change(doc["metadata"]))
    assert main(["regress", str(goldens), "poet-mlp-nrf52840-90-paper", *resolve]) == 1
    line = next(x for x in capsys.readouterr().out.splitlines()
                if x.startswith("ERROR     poet-mlp-nrf52840-90-paper"))
    assert "poet-mlp-nrf52840-90-paper.json: " + message in line


def test_regress_checks_the_cases_it_names(goldens, capsys):
    """#31 item 5: ``regress [DIR] NAME...`` checks those cases alone; an unknown name is
    one line, exit 2; ``--resolve`` says on stderr as each case ends."""
    assert [c.name for c in check_goldens(goldens, names=["dtr-mlp-nrf52840-60-paper"])] \
        == ["dtr-mlp-nrf52840-60-paper"]
    assert main(["regress", str(goldens), "poet-mlp-nrf52840-90-paper", "--resolve"]) == 0
    out, err = capsys.readouterr()
    assert out.splitlines()[0].startswith("ok        poet-mlp-nrf52840-90-paper: ")
    assert " mJ," in out or " J," in out  # figures with their units
    assert out.splitlines()[-1].startswith("1 golden: 1 ok")
    assert err == "regress: poet-mlp-nrf52840-90-paper: ok\n"
    assert main(["regress", str(goldens), "poet-mlp-nrf52840-80-paper"]) == 2
    assert "no golden 'poet-mlp-nrf52840-80-paper' (did you mean 'poet-mlp-nrf52840-90-paper'" \
        in capsys.readouterr().err
    # a named case whose golden is gone is still an error, not a pass
    (goldens / "dtr-mlp-nrf52840-60-paper.json").unlink()
    assert main(["regress", str(goldens), "dtr-mlp-nrf52840-60-paper"]) == 1
    assert "ERROR     dtr-mlp-nrf52840-60-paper" in capsys.readouterr().out


def test_a_deleted_golden_is_an_error_not_a_pass(goldens, capsys):
    (goldens / "dtr-mlp-nrf52840-60-paper.json").unlink()
    assert main(["regress", str(goldens)]) == 1
    out = capsys.readouterr().out
    assert ("ERROR     dtr-mlp-nrf52840-60-paper: cases.toml lists it but "
            "dtr-mlp-nrf52840-60-paper.json is missing") in out


def test_bad_cases_files_are_one_line_errors(tmp_path):
    (tmp_path / "cases.toml").write_text(CASES.replace('effort = 20\n', ''))
    with pytest.raises(InputError, match="a MILP case needs an effort"):
        load_cases(tmp_path)
    (tmp_path / "cases.toml").write_text(CASES.replace('method = "dtr"', 'method = "x"'))
    with pytest.raises(InputError, match="method = 'x'"):
        load_cases(tmp_path)
    (tmp_path / "cases.toml").write_text(CASES.replace('method = "dtr"',
                                                       'method = "dtr"\noptimizer = "lion"'))
    with pytest.raises(InputError, match="optimizer = 'lion': must be one of sgd, momentum, "
                                         "adam"):
        load_cases(tmp_path)
    assert main(["regress", str(tmp_path / "none")]) == 2


def test_the_landed_goldens_pass():
    """CI's regression check: every golden in schedules/ re-simulates to its figures."""
    cases = {c.name for c in load_cases(LANDED)}
    checks = check_goldens(LANDED)
    assert {c.name for c in checks} == cases and len(cases) >= 20
    bad = [c.line() for c in checks if c.status in ("regressed", "error")]
    assert not bad, "\n".join(bad)


def test_every_golden_carries_its_layout_and_runs_in_it():
    """Issue 28: a golden records where each buffer lives; its simulation uses that layout,
    and a PASS's layout lies within the board's usable RAM."""
    from poetsim.regress import _goldens, _simulate
    from poetsim.schedule import read_schedule

    for path in _goldens(LANDED):
        assert read_schedule(path).layout is not None, path.name
        _, report, verdict = _simulate(path)
        assert report.layout_from_schedule, path.name
        if verdict.passed and verdict.accounting.value == "physical":
            assert report.arena_bytes <= verdict.board_ram_bytes, path.name


def test_every_mcu_board_has_a_golden_training_job_that_passes_physically():
    """Issue 15's target, kept by the goldens: boards show lists them, simulated again."""
    from poetsim.boards import builtin_board_names, get_board
    from poetsim.regress import trained_on

    mcu = [name for name in builtin_board_names()
           if get_board(name).profile.value == "physical" and get_board(name).ram.bytes <= 2**20]
    assert {"nrf52840", "mkr1000", "rp2040", "esp32s3", "stm32h743"} <= set(mcu)
    for name in mcu:
        jobs = trained_on(name, LANDED)
        assert jobs, f"no golden training job passes physically on {name}"
        for job in jobs:
            assert job["peak_total_bytes"] <= get_board(name).ram.usable_bytes
            assert job["energy_j"] > 0 and job["makespan_s"] > 0
    # paper-accounting goldens do not count: on the paper profiles nothing trains physically
    assert trained_on("poet_nrf52840", LANDED) == []


def test_boards_show_lists_the_training_jobs(capsys):
    status = main(["boards", "show", "nrf52840", "--goldens", str(LANDED)])
    out = capsys.readouterr().out
    assert status in (None, 0)
    assert "trains (golden schedules in" in out and "ds_cnn_s (train_last=3) by poet" in out
    main(["boards", "show", "mkr1000", "--goldens", str(LANDED), "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert doc["trains"] and doc["trains"][0]["model"] == "mlp"


def test_regress_and_boards_show_read_the_built_in_goldens_wherever_they_run(
        tmp_path, monkeypatch, capsys):
    """#31: without a DIR, ``regress`` (and ``boards show``) read the goldens poetsim carries
    (poetsim.data), not a ``schedules/`` of the working folder: here an installed package's
    copy, holding one golden."""
    import shutil

    import poetsim.data

    package = tmp_path / "site-packages" / "poetsim"
    (package / "schedules").mkdir(parents=True)
    (package / "device_models").symlink_to(LANDED.parent / "device_models")
    shutil.copy(LANDED / "poet-ds_cnn_s_last3-nrf52840-board.json", package / "schedules")
    monkeypatch.setattr(poetsim.data, "_PACKAGE", package)
    work = tmp_path / "work"
    (work / "schedules").mkdir(parents=True)  # not goldens: ignored without a DIR
    monkeypatch.chdir(work)
    assert main(["regress"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("ok        poet-ds_cnn_s_last3-nrf52840-board: PASS")
    assert "1 golden: 1 ok" in out
    main(["boards", "show", "nrf52840"])
    out = capsys.readouterr().out
    assert "trains (built-in golden schedules that PASS physically" in out
    assert "ds_cnn_s (train_last=3) by poet" in out


def test_corners_are_reported_beside_the_figures_not_compared(goldens, capsys):
    """#29: with --corners each golden is judged at its board's corners too (the
    nRF52840's measured SD ranges); the expected figures stay the typical corner's."""
    checks = check_goldens(goldens, corners=True)
    assert [c.status for c in checks] == ["ok", "ok"]
    for check in checks:
        assert [c.corner for c in check.corners] == ["typical", "slow", "costly"]
        assert "; corners " in check.line() and "corners" in check.as_dict()
    assert not check_goldens(goldens)[0].corners
    assert main(["regress", str(goldens), "--corners"]) == 0
    assert "(typical/slow/costly)" in capsys.readouterr().out
