"""Sweep files, board overrides, the results store, one point on a worker, the report."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys

import pytest

from poetsim.boards import get_board
from poetsim.boards.spec import SourceKind
from poetsim.cli.main import main
from poetsim.sweep import (
    ResultsStore,
    SweepError,
    apply_overrides,
    cache_dir_for,
    expand_points,
    load_sweep,
    parse_sweep,
    variant_label,
)
from poetsim.sweep.report import format_table, read_results, write_csv, write_plots
from poetsim.sweep.store import pending_points
from poetsim.sweep.worker import run_point

MLP = {"name": "mlp", "layers": 4, "width": 64}


def doc(**changes):
    # the paper's accounting: the MLP's parameters do not fit the nRF52840 physically
    base = {"models": [MLP], "boards": ["nrf52840"], "ram": ["80%"],
            "methods": ["dtr", "chen_greedy"], "accounting": "paper"}
    base.update(changes)
    return base


# ----------------------------------------------------------------------------- spec

def test_cross_product_order_and_labels():
    sweep = parse_sweep(doc(ram=["80%", "board"], deadlines=["1.5x", "none"],
                            overrides={"dma": {"channels": [0, 1]},
                                       "storage.read_throughput_bytes_per_s": [3.64e5, 2e6]}))
    points = expand_points(sweep)
    assert len(points) == sweep.size == 2 * 2 * 2 * 2 * 2
    assert [p.index for p in points] == list(range(len(points)))
    first, last = points[0], points[-1]
    assert first.variant == "nrf52840[dma.channels=0,storage.read_throughput_bytes_per_s=364000]"
    assert last.variant == "nrf52840[dma.channels=1,storage.read_throughput_bytes_per_s=2e6]"
    assert (first.ram, first.deadline, first.method) == ("80%", "1.5x", "dtr")
    assert (last.ram, last.deadline, last.method) == ("board", None, "chen_greedy")
    assert last.board.dma.channels == 1 and last.board.storage.read_throughput_bytes_per_s == 2e6
    assert last.board.source_of("dma.channels").kind is SourceKind.WHAT_IF
    assert len({p.point_id for p in points}) == len(points)
    # deterministic: the same file gives the same ids
    assert [p.point_id for p in expand_points(sweep)] == [p.point_id for p in points]


def test_point_id_depends_on_inputs_only():
    a = expand_points(parse_sweep(doc()))
    b = expand_points(parse_sweep(doc(solver={"time_limit_s": 7})))
    assert [p.point_id for p in a] == [p.point_id for p in b]  # heuristics ignore solver
    c = expand_points(parse_sweep(doc(methods=["poet"])))
    d = expand_points(parse_sweep(doc(methods=["poet"], solver={"time_limit_s": 7})))
    assert c[0].point_id != d[0].point_id


def test_apply_overrides_runs_every_validator():
    board = get_board("nrf52840")
    assert apply_overrides(board, ()) is board
    faster = apply_overrides(board, (("storage.read_throughput_bytes_per_s", 7.28e5),))
    assert faster.storage.read_throughput_bytes_per_s == 7.28e5
    assert faster.name == board.name and faster.ram == board.ram
    assert variant_label(board, (("ram.bytes", 524288),)) == "nrf52840[ram.bytes=524288]"
    # 4 MB/s exceeds the 16 MHz SPI wire rate: a cross-field rule of Storage
    with pytest.raises(SweepError, match=r"sweep.toml: overrides .*storage\."
                                         r"read_throughput_bytes_per_s = 4000000\.0: exceeds "
                                         r"the wire rate"):
        apply_overrides(board, (("storage.read_throughput_bytes_per_s", 4e6),),
                        origin="sweep.toml")
    with pytest.raises(SweepError, match=r"dma\.channels = -1: must be >= 0"):
        apply_overrides(board, (("dma.channels", -1),))
    with pytest.raises(SweepError, match=r"ram\.reserved_bytes = 24576: must be below bytes"):
        apply_overrides(board, (("ram.bytes", 16384),))


@pytest.mark.parametrize("changes, message", [
    ({"overrides": {"storage.read_throughput_bytes_per_s": [1e6, 2e6, 4e6]}},
     r"storage\.read_throughput_bytes_per_s = 4000000\.0: exceeds the wire rate"),
    ({"overrides": {"dma.chanels": [0]}}, r"'dma\.chanels': not a field of \[dma\] "
                                          r"\(did you mean 'dma\.channels'\?\)"),
    ({"overrides": {"psram.bytes": [1]}}, r"unknown board section 'psram'"),
    ({"overrides": {"ram.bytes": []}}, r"ram\.bytes = \[\]: must list at least one value"),
    ({"overrides": {"storage.kind": ["floppy"]}}, r"storage\.kind = 'floppy': must be one of"),
    ({"ram": ["50 percent"]}, r"ram"),
    ({"deadlines": ["soon"]}, r"deadline = 'soon'"),
    ({"methods": ["magic"]}, r"methods = 'magic': must be one of poet"),
    ({"models": ["no_such_model"]}, r"models: unknown model"),
    ({"models": [{"name": "mlp", "depth": 3}]}, r"unknown option 'depth'"),
    ({"boards": ["no_such_board"]}, r"boards: unknown board 'no_such_board'"),
    ({"solver": {"time_limit_s": 0}}, r"solver\.time_limit_s = 0"),
    ({"solver": {"threads": 4}}, r"solver: unknown key 'threads'"),
    ({"method": ["dtr"]}, r"unknown key 'method' \(did you mean 'methods'\?\)"),
    # #32: a scalar where a list is expected is a slip, not one value
    ({"deadlines": "2x"}, r"deadlines = '2x': must be a list, e\.g\. deadlines = \[\"2x\"\]"),
    ({"overrides": {"dma.channels": 0}},
     r"overrides: dma\.channels = 0: must be a list of values, e\.g\. dma\.channels = \[0\]"),
    # the default results store is ./NAME.sqlite
    ({"name": "../../etc/x"}, r"name = '\.\./\.\./etc/x': must be letters, digits"),
    ({"name": ".hidden"}, r"name = '\.hidden'"),
])
def test_invalid_sweeps_fail_naming_key_and_value(changes, message):
    with pytest.raises(SweepError, match=message):
        parse_sweep(doc(**changes), origin="s.toml")


def test_load_sweep_file_and_cli_error(tmp_path, capsys):
    path = tmp_path / "bad.toml"
    path.write_text('models = ["mlp"]\nboards = ["nrf52840"]\nram = ["80%"]\n'
                    'methods = ["dtr"]\n[overrides]\n"storage.read_throughput_bytes_per_s" = '
                    '[1e6, 4e6]\n')
    with pytest.raises(SweepError, match=str(path)):
        load_sweep(path)
    results = tmp_path / "r.sqlite"
    assert main(["sweep", str(path), "--results", str(results)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("poetsim: error: ")
    assert "4000000.0" in err[0] and "read_throughput_bytes_per_s" in err[0]
    assert not results.exists()  # nothing ran
    (tmp_path / "junk.toml").write_text("models = [")
    with pytest.raises(SweepError, match="not valid TOML"):
        load_sweep(tmp_path / "junk.toml")


def test_poetsim_imports_without_dask():
    """Dask is the sweep extra (#31): the demo's setup lacks it, and every command but a
    sweep's run imports without it."""
    code = ("import sys; import poetsim, poetsim.cli.main, poetsim.demo, poetsim.regress, "
            "poetsim.sweep, poetsim.sweep.execute; "
            "sys.exit(1 if {'distributed', 'dask'} & set(sys.modules) else 0)")
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def test_a_sweep_without_dask_is_one_line_and_writes_nothing(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "distributed", None)  # import distributed raises
    path = tmp_path / "s.toml"
    path.write_text('models = ["mlp"]\nboards = ["nrf52840"]\nram = ["80%"]\n'
                    'methods = ["dtr"]\naccounting = "paper"\n')
    results = tmp_path / "r.sqlite"
    assert main(["sweep", str(path), "--results", str(results)]) == 2
    assert capsys.readouterr().err.strip() == ("poetsim: error: poetsim sweep runs its "
                                               "points on Dask: pip install 'poetsim[sweep]'")
    assert not results.exists()


def test_example_sweep_file_is_valid():
    from pathlib import Path

    sweep = load_sweep(Path(__file__).parents[1] / "sweeps" / "whatif_nrf52840.toml")
    assert len(expand_points(sweep)) == sweep.size == 144


# ----------------------------------------------------------------------------- worker

def test_run_point_records_where_the_request_put_the_weights():
    # int8 MLP, last layer trained, physical accounting: 266,752 B of frozen weights do not
    # fit the nRF52840's RAM beside the rest and are read in place from its flash
    model = {"name": "mlp", "layers": 3, "width": 256, "train_last": 1, "int8": 1}
    sweep = parse_sweep(doc(models=[model], ram=["board"], methods=["dtr"],
                            accounting="physical"))
    row = run_point(expand_points(sweep)[0], None)
    assert row["status"] == "done", row
    assert row["flash_weight_bytes"] == 266_752 and row["streamed_weight_bytes"] == 0
    assert row["row_bands"] == 1
    plain = run_point(expand_points(parse_sweep(doc(methods=["dtr"])))[0], None)
    assert plain["flash_weight_bytes"] == plain["streamed_weight_bytes"] == 0


def test_run_point_result_and_error(tmp_path):
    sweep = parse_sweep(doc(ram=["80%", "board", "1"]))
    points = expand_points(sweep)
    ok = run_point(points[0], str(tmp_path / "cache"))
    assert ok["status"] == "done" and ok["feasible"] is True and ok["cached"] is False
    assert ok["energy_j"] > 0 and ok["makespan_s"] > 0 and ok["energy_overhead"] >= 0
    assert ok["peak_total_bytes"] <= ok["budget_activation_bytes"] + ok["resident_bytes"]
    assert ok["verdict"] == "PASS" and ok["fits_board_ram"] is False
    again = run_point(points[0], str(tmp_path / "cache"))
    assert again["cached"] is True and again["energy_j"] == ok["energy_j"]
    board_budget = run_point(points[2], None)
    assert board_budget["budget_activation_bytes"] == points[2].board.ram.usable_bytes
    tiny = run_point(points[4], None)  # 1 byte: infeasible, recorded as a finished point
    assert tiny["status"] == "done" and tiny["feasible"] is False and tiny["reason"]


def test_a_points_time_limit_holds_for_all_of_it():
    """#32 item 3: the sweep's time_limit_s holds for each point as a whole, reading the
    model included: no 8,001-op model is read in a millisecond, so the point is a finished
    no_solution saying so (not an error); with time, the same point runs."""
    long_chain = {"name": "mlp", "layers": 2000, "width": 4}
    (point,) = expand_points(parse_sweep(doc(models=[long_chain], methods=["dtr"],
                                             solver={"time_limit_s": 0.001})))
    row = run_point(point, None)
    assert (row["status"], row["method_status"], row["feasible"]) == (
        "done", "no_solution", False)
    assert row["reason"] == ("the 0.001 s time_limit_s ran out while reading the model; a "
                             "longer time_limit_s may find one")


def test_a_sweep_may_judge_every_point_at_the_corners():
    """#29: with corners = true each point is judged at its board's slow and costly corners
    too (the nRF52840's measured SD ranges); without it the columns stay empty and the
    points keep their keys."""
    plain = parse_sweep(doc(methods=["dtr"], accounting="physical", ram=["board"],
                            models=[{"name": "ds_cnn_s", "train_last": 3}]))
    sweep = parse_sweep(doc(methods=["dtr"], accounting="physical", ram=["board"],
                            models=[{"name": "ds_cnn_s", "train_last": 3}], corners=True))
    assert sweep.corners and sweep.as_dict()["corners"] is True
    (point,), (bare,) = expand_points(sweep), expand_points(plain)
    assert point.point_id != bare.point_id
    row = run_point(point, None)
    assert row["verdict"] == row["slow_verdict"] == row["costly_verdict"] == "PASS"
    assert row["costly_energy_j"] > row["slow_energy_j"] > row["energy_j"]
    assert row["slow_makespan_s"] > row["makespan_s"]
    assert "slow_verdict" not in run_point(bare, None)
    table = format_table([{**row, **point.inputs(), "wall_s": 0.0}])
    assert "slow/costly" in table and "PASS/PASS" in table
    with pytest.raises(SweepError, match="corners = 'yes': must be true or false"):
        parse_sweep(doc(corners="yes"))
    # an overridden number is the sweep's at every corner: its measured range goes
    faster = apply_overrides(get_board("nrf52840"),
                             (("storage.read_throughput_bytes_per_s", 2e6),))
    assert "storage.read_throughput_bytes_per_s" not in faster.ranges
    assert "storage.write_throughput_bytes_per_s" in faster.ranges


def test_a_physical_sweep_judges_everything_resident():
    sweep = parse_sweep(doc(accounting="physical", boards=["nrf52840", "rpi4"], ram=["board"]))
    assert sweep.accounting.value == "physical"
    mcu, pi = (run_point(p, None) for p in expand_points(sweep)[::2])
    assert mcu["feasible"] is False and "usable RAM" in mcu["reason"]
    assert pi["feasible"] is True and pi["verdict"] == "PASS" and pi["fits_board_ram"] is True
    assert pi["peak_total_bytes"] <= pi["board_ram_bytes"]
    with pytest.raises(SweepError, match="accounting = 'mu_ram'"):
        parse_sweep(doc(accounting="mu_ram"))


def test_run_point_records_exceptions(monkeypatch):
    import poetsim.sweep.worker as worker

    point = expand_points(parse_sweep(doc()))[0]

    def boom(*_a, **_k):
        raise RuntimeError("solver exploded\nsecond line")

    monkeypatch.setattr(worker, "run_all_and_judge", boom)
    result = run_point(point, None)
    assert result["status"] == "error"
    assert result["error"] == "RuntimeError: solver exploded"
    assert result["wall_s"] >= 0 and result["worker"]


# ----------------------------------------------------------------------------- store

def test_a_store_of_another_sweep_is_refused_and_left_as_it_was(tmp_path):
    """#32: a --results store of another sweep was resumed silently, its points reported
    as this sweep's."""
    from poetsim.sweep.execute import run_sweep

    path = tmp_path / "r.sqlite"
    with ResultsStore(path) as store:
        store.begin_session(sweep={"name": "other", "source": "o.toml"}, points=0, skipped=0,
                            scheduler="local")
    before = path.read_bytes()
    sweep = parse_sweep(doc(name="mine"), origin="m.toml")
    with pytest.raises(SweepError, match=r"r\.sqlite: holds the results of sweep 'other', "
                                         r"not of 'mine' \(m\.toml\); use another --results"):
        run_sweep(sweep, path)
    assert path.read_bytes() == before


def test_store_resume_skips_finished_points(tmp_path):
    points = expand_points(parse_sweep(doc(ram=["70%", "80%"])))
    path = tmp_path / "r.sqlite"
    assert cache_dir_for(path) == tmp_path / "r.cache"
    with ResultsStore(path) as store:
        session = store.begin_session(sweep={"source": "x"}, points=4, skipped=0,
                                      scheduler="local")
        store.record({**points[0].inputs(), "status": "done", "session": session,
                      "energy_j": 1.0, "feasible": True})
        store.record({**points[1].inputs(), "status": "error", "session": session,
                      "error": "RuntimeError: x"})
    with ResultsStore(path) as store:
        statuses = store.statuses()
        assert statuses == {points[0].point_id: "done", points[1].point_id: "error"}
        assert pending_points(points, statuses) == points[2:]
        assert pending_points(points, statuses, retry_failed=True) == points[1:]
        # a retried point replaces its error row: still one row per point
        store.record({**points[1].inputs(), "status": "done", "session": session})
        assert len(store.rows()) == 2
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    conn.close()


def test_store_rejects_other_files(tmp_path):
    other = tmp_path / "other.sqlite"
    conn = sqlite3.connect(other)
    conn.execute("CREATE TABLE x (a)")
    conn.commit()
    conn.close()
    with pytest.raises(SweepError, match="not a poetsim results store: no such table: meta"):
        ResultsStore(other, create=False)
    with pytest.raises(SweepError, match="no such results store"):
        ResultsStore(tmp_path / "missing.sqlite", create=False)
    (tmp_path / "text.sqlite").write_text("hello, not a database " * 100)
    with pytest.raises(SweepError, match="not a poetsim results store"):
        ResultsStore(tmp_path / "text.sqlite", create=False)


# ----------------------------------------------------------------------------- report

@pytest.fixture
def finished_store(tmp_path):
    sweep = parse_sweep(doc(ram=["70%", "80%", "1"], deadlines=["1.5x", "3x"],
                            overrides={"storage.read_throughput_bytes_per_s": [3.64e5, 7.28e5]}))
    path = tmp_path / "r.sqlite"
    with ResultsStore(path) as store:
        session = store.begin_session(sweep=sweep.as_dict(), points=0, skipped=0,
                                      scheduler="local")
        for point in expand_points(sweep):
            store.record({**point.inputs(), "sweep": sweep.name, "session": session,
                          **run_point(point, None)})
    return path


def test_report_table_csv_json_plots(finished_store, tmp_path, capsys):
    rows = read_results(finished_store)
    assert len(rows) == 24 and rows[0]["model_options"] == {"layers": 4, "width": 64}
    table = format_table(rows)
    assert table.splitlines()[-1].startswith("24 points: 24 done (")
    assert 0 < sum(r["feasible"] for r in rows) < 24
    write_csv(rows, tmp_path / "r.csv")
    lines = (tmp_path / "r.csv").read_text().splitlines()
    assert len(lines) == 25 and lines[0].startswith("id,idx,sweep,model")
    written = write_plots(rows, tmp_path / "plots")
    assert [p.name for p in written] == ["energy_vs_ram.png", "energy_vs_deadline.png"]
    assert all(p.stat().st_size > 10_000 for p in written)

    assert main(["sweep", "report", str(finished_store), "--json", "--no-plots"]) == 0
    doc_out = json.loads(capsys.readouterr().out)
    assert len(doc_out["points"]) == 24 and doc_out["files"] == []
    assert main(["sweep", "report", str(finished_store), "--csv", str(tmp_path / "c.csv"),
                 "--plots", str(tmp_path / "p2")]) == 0
    out = capsys.readouterr().out
    assert " energy " in out.splitlines()[0] and " mJ " in out and "wrote" in out
    assert (tmp_path / "p2" / "energy_vs_ram.png").is_file()
    assert main(["sweep", "report", str(tmp_path / "missing.sqlite")]) == 2


@pytest.mark.parametrize(("sql", "words"), [
    ("UPDATE points SET energy_j = 1e999 WHERE idx = 3", "energy_j = inf: not a finite number"),
    ("UPDATE points SET energy_j = -1e999 WHERE idx = 3", "energy_j = -inf: not a finite"),
    ("UPDATE points SET makespan_s = 'fast' WHERE idx = 3", "makespan_s = 'fast': not a finite"),
    ("UPDATE points SET model_options = '{layers' WHERE idx = 3",
     "model_options = '{layers': not JSON"),
    ("UPDATE points SET energy_j = -1 WHERE idx = 3", "energy_j = -1.0: must be >= 0"),
    ("UPDATE points SET budget_bytes = -5 WHERE idx = 3", "budget_bytes = -5: must be >= 0"),
    ("UPDATE points SET status = 'weird' WHERE idx = 3", "status = 'weird': must be one of"),
    ("UPDATE points SET energy_j = NULL, verdict = 'PASS' WHERE idx = 3",
     "energy_j is NULL, but the point has a verdict"),
    ("UPDATE points SET verdict = 'MAYBE' WHERE idx = 3", "verdict = 'MAYBE': must be PASS or"),
    ("UPDATE points SET slow_verdict = 'maybe' WHERE idx = 3", "slow_verdict = 'maybe': must"),
    # a table rebuilt without its key, one point stored twice
    ("CREATE TABLE copy AS SELECT * FROM points; DROP TABLE points; "
     "ALTER TABLE copy RENAME TO points; INSERT INTO points SELECT * FROM points WHERE idx = 3",
     "stored twice"),
])
def test_a_damaged_store_is_one_line_and_writes_nothing(finished_store, tmp_path, capsys, sql,
                                                        words):
    """#32: a damaged row is named (point and column), exit 2, no CSV left behind."""
    conn = sqlite3.connect(finished_store)
    conn.executescript(sql)
    conn.commit()
    conn.close()
    out = tmp_path / "out.csv"
    status = main(["sweep", "report", str(finished_store), "--csv", str(out), "--no-plots"])
    err = capsys.readouterr().err
    assert status == 2 and err.count("\n") == 1 and not out.exists()
    assert "point 3 (" in err and words in err and "damaged results store" in err


def test_a_store_without_its_points_table_is_one_line(finished_store, tmp_path, capsys):
    damaged = tmp_path / "d.sqlite"
    damaged.write_bytes(finished_store.read_bytes())
    conn = sqlite3.connect(damaged)
    conn.execute("DROP TABLE points")
    conn.commit()
    conn.close()
    assert main(["sweep", "report", str(damaged), "--no-plots"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "table points is missing: a damaged results store" in err


def test_a_second_writer_on_one_store_refuses_with_one_line(tmp_path):
    path = tmp_path / "r.sqlite"
    with ResultsStore(path, writer=True):
        with pytest.raises(SweepError, match=r"another sweep is writing to this results store "
                                             r"\(pid \d+ on "):
            ResultsStore(path, writer=True)
        with ResultsStore(path, create=False) as reader:  # reading needs no lock
            assert reader.statuses() == {}
    with ResultsStore(path, writer=True):  # released when the first one closed
        pass


def test_sweep_progress_reads_off_a_terminal_too(capsys):
    """#31 item 5: in a log or a pipe a line per finished point; on a terminal one line
    rewritten in place, ended once the sweep is done."""
    from types import SimpleNamespace

    from poetsim.cli.commands.sweep import _progress_line

    def progress(done, total):
        return SimpleNamespace(skipped=0, done=done, failed=0, total=total, running=0,
                               eta_s=0.0, remaining=total - done)

    assert _progress_line(False, terminal=False) is None
    show = _progress_line(True, terminal=False)
    for done in (1, 2, 3):
        show(progress(done, 3))
    lines = capsys.readouterr().err.splitlines()
    assert [line.split()[1] for line in lines] == ["1/3", "2/3", "3/3"]
    show = _progress_line(True, terminal=True)
    for done in (1, 2):
        show(progress(done, 2))
    err = capsys.readouterr().err
    assert err.count("\r") == 2 and err.endswith("\n") and err.count("\n") == 1


def test_tied_methods_stay_visible_in_the_sweep_plots():
    """#31 item 5: each later method is drawn wider and beneath the one before, so two
    methods with the same figures show as a line outlined by the other's."""
    from poetsim.sweep.report import _tie_visible

    styles = [_tie_visible(rank) for rank in range(4)]
    for top, below in zip(styles, styles[1:]):
        assert below["linewidth"] > top["linewidth"] and below["markersize"] > top["markersize"]
        assert below["zorder"] < top["zorder"]


@pytest.mark.parametrize(("workers", "results", "message"), [
    (0, "r.sqlite", "workers = 0: must be at least 1"),
    (-2, "r.sqlite", "workers = -2: must be at least 1"),
    (1, "f/r.sqlite", "cannot write a results store there: "),  # f is a file
])
def test_a_sweep_that_cannot_run_is_one_line_and_writes_nothing(tmp_path, capsys, workers,
                                                                  results, message):
    path = tmp_path / "s.toml"
    path.write_text('models = ["mlp"]\nboards = ["nrf52840"]\nram = ["80%"]\n'
                    'methods = ["dtr"]\naccounting = "paper"\n')
    (tmp_path / "f").write_text("a file, not a folder")
    status = main(["sweep", str(path), "--results", str(tmp_path / results), "--workers",
                   str(workers)])
    err = capsys.readouterr().err
    assert status == 2 and err.count("\n") == 1 and message in err, err
    assert not (tmp_path / "r.sqlite").exists()
