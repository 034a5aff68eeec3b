"""Hostile input to the poetsim command (issue #13, item 9).

One table carries the hand-made list of bad inputs of issue #13: every case must exit 2
with exactly one line on stderr, ``poetsim: error: ...``, naming the file or flag, the value
and the rule, print no traceback, and leave no output file behind. Then hypothesis feeds
randomly mutated graph and schedule files to ``costs`` and ``simulate``: the answer is
always 0, 1 or 2 (never 3, an internal error, and never an uncaught exception), and a 2 is
one line.
"""

from __future__ import annotations

import copy
import json
import math
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from poetsim.cli.main import main
from poetsim.graph import graph_to_dict, write_graph
from poetsim.schedule import write_schedule
from poetsim.zoo import build_model

# ----------------------------------------------------------------------------- helpers

SMALL = ("--model", "mlp", "--set", "layers=2")
SOLVE = ("solve", *SMALL, "--board", "rpi4", "--time-limit", "2")
GRAPH_SOLVE = ("solve", "--graph", "{tmp}/g.json", "--board", "rpi4", "--time-limit", "2")
NOT_UTF8 = b'{"name": "caf\xe9 \xff"}\n'
DIR = object()  # setup: an empty folder
READ_ONLY_DIR = object()  # setup: a folder nobody but root may write


def run(capsys, argv: list[str]) -> tuple[int, str, str]:
    """main(argv) as the shell sees it: usage errors raise SystemExit(2) in argparse."""
    try:
        status = main(argv)
    except SystemExit as exit_info:
        status = exit_info.code if isinstance(exit_info.code, int) else 2
    out, err = capsys.readouterr()
    return status, out, err


def assert_one_line_error(status: int, out: str, err: str) -> str:
    assert "Traceback" not in out + err, err
    assert status == 2, (status, out, err)
    assert err.startswith("poetsim: error: "), err
    assert err.endswith("\n") and err.count("\n") == 1, err
    return err


@pytest.fixture(scope="module")
def valid(tmp_path_factory) -> dict[str, Any]:
    """A small valid graph (mlp, 2 layers) and a schedule solved for it, as files and
    parsed documents, written by poetsim's own writers."""
    from poetsim.boards import get_board
    from poetsim.methods import SolverSettings, seeded_solve
    from poetsim.request import resolve_request

    folder = tmp_path_factory.mktemp("valid")
    graph = build_model("mlp", layers=2)
    request = resolve_request(graph, get_board("rpi4"), ram="80%", accounting="paper")
    result = seeded_solve(request, SolverSettings(time_limit_s=10))
    assert result.schedule is not None
    graph_path, schedule_path = folder / "graph.json", folder / "schedule.json"
    write_graph(graph, graph_path)
    write_schedule(result.schedule, graph, schedule_path)
    other_path = folder / "other.json"  # the same model with three layers
    write_graph(build_model("mlp", layers=3), other_path)
    return {"graph": str(graph_path), "schedule": str(schedule_path),
            "other_graph": str(other_path), "graph_doc": graph_to_dict(graph),
            "schedule_doc": json.loads(schedule_path.read_text())}


def _graph_with(change: Callable[[dict[str, Any]], Any]) -> Callable[[dict[str, Any]], Any]:
    def make(valid: dict[str, Any]) -> Any:
        doc = copy.deepcopy(valid["graph_doc"])
        return change(doc) or doc
    return make


def _schedule_with(change: Callable[[dict[str, Any]], Any]) -> Callable[[dict[str, Any]], Any]:
    def make(valid: dict[str, Any]) -> Any:
        doc = copy.deepcopy(valid["schedule_doc"])
        return change(doc) or doc
    return make


def _op(doc: dict[str, Any], name: str) -> dict[str, Any]:
    return next(op for op in doc["ops"] if op["name"] == name)


def _drop_op(doc: dict[str, Any], name: str) -> None:
    doc["ops"] = [op for op in doc["ops"] if op["name"] != name]


def _input_grad(doc: dict[str, Any]) -> None:
    """POET's reading: the input op has a backward op, the loss has none."""
    _drop_op(doc, "loss/grad")
    for op in doc["ops"]:
        op["inputs"] = ["loss" if name == "loss/grad" else name for name in op["inputs"]]
    doc["ops"].append({"name": "input/grad", "kind": "input", "phase": "backward",
                       "forward_of": "input", "inputs": ["fc1/grad"], "flops": 10,
                       "output_bytes": _op(doc, "input")["output_bytes"]})


def _text_of(valid: dict[str, Any], key: str, cut: int) -> str:
    return Path(valid[key]).read_text()[:cut]


def _sweep(extra: str) -> str:
    return ('name = "hostile"\nmodels = [{ name = "mlp", layers = 2 }]\nboards = ["rpi4"]\n'
            'ram = ["80%"]\nmethods = ["poet"]\n' + extra)


_not_linux = not Path("/proc/self").is_dir()
_root = getattr(os, "geteuid", lambda: -1)() == 0

# (id, files to make in tmp_path, argv, substrings of the error, outputs that must not exist)
# In files and argv, "{tmp}" is tmp_path and "{graph}", "{schedule}", "{other_graph}" the
# valid files. A file's content is bytes, text, a JSON document, DIR / READ_ONLY_DIR, or a
# function of the valid documents giving one of these.
CASES: list[Any] = [
    # ---- files that are not UTF-8
    ("board-not-utf8", {"board.toml": b'name = "\xff"\n'},
     ["costs", *SMALL, "--board", "{tmp}/board.toml"],
     ["board.toml", "byte 0xff at offset 8", "must be UTF-8"], []),
    ("graph-not-utf8", {"g.json": NOT_UTF8}, ["costs", "--graph", "{tmp}/g.json"],
     ["g.json", "byte 0xe9", "must be UTF-8"], []),
    ("sweep-not-utf8", {"s.toml": b'name = "\xe9t\xe9"\n'},
     ["sweep", "run", "{tmp}/s.toml", "--results", "{tmp}/r.sqlite", "--quiet"],
     ["s.toml", "byte 0xe9 at offset 8", "must be UTF-8"], ["r.sqlite", "r.cache"]),
    ("schedule-not-utf8", {"s.json": NOT_UTF8},
     ["simulate", "{tmp}/s.json", "--graph", "{graph}", "--trace", "{tmp}/t.json"],
     ["s.json", "not a text file", "[not_json]"], ["t.json"]),
    # ---- outputs that cannot be written: nothing is left behind
    ("export-out-is-folder", {"out": DIR}, ["models", "export", *SMALL[1:], "--out", "{tmp}/out"],
     ["out: cannot write a file there: it is a folder"], []),
    ("solve-out-is-folder", {"out": DIR}, [*SOLVE, "--out", "{tmp}/out"],
     ["out: cannot write a file there: it is a folder"], []),
    ("solve-binary-is-folder", {"out": DIR},
     [*SOLVE, "--out", "{tmp}/ok.json", "--binary", "{tmp}/out"],
     ["out: cannot write a file there: it is a folder"], ["ok.json"]),
    ("solve-out-under-a-file", {"plain.txt": "x"}, [*SOLVE, "--out", "{tmp}/plain.txt/s.json"],
     ["plain.txt/s.json: cannot write", "plain.txt", "plain.txt is a file, not a folder"], []),
    ("solve-binary-under-a-file-keeps-no-out", {"plain.txt": "x"},
     [*SOLVE, "--out", "{tmp}/ok.json", "--binary", "{tmp}/plain.txt/s.bin"],
     ["plain.txt/s.bin: cannot write", "plain.txt is a file, not a folder"], ["ok.json"]),
    pytest.param("solve-binary-in-missing-folder-keeps-no-out", {},
                 [*SOLVE, "--out", "{tmp}/ok.json", "--binary", "/proc/poetsim-none/s.bin"],
                 ["/proc/poetsim-none/s.bin: cannot write"], ["ok.json"],
                 marks=pytest.mark.skipif(_not_linux, reason="needs /proc")),
    pytest.param("solve-binary-in-read-only-folder-keeps-no-out", {"ro": READ_ONLY_DIR},
                 [*SOLVE, "--out", "{tmp}/ok.json", "--binary", "{tmp}/ro/s.bin"],
                 ["ro/s.bin: cannot write", "Permission denied"], ["ok.json", "ro/s.bin"],
                 marks=pytest.mark.skipif(_root or sys.platform == "win32",
                                          reason="root writes into read-only folders")),
    ("simulate-trace-is-folder", {"out": DIR},
     ["simulate", "{schedule}", "--graph", "{graph}", "--trace", "{tmp}/out"],
     ["out: cannot write a file there: it is a folder"], []),
    ("simulate-trace-under-a-file", {"plain.txt": "x"},
     ["simulate", "{schedule}", "--graph", "{graph}", "--trace", "{tmp}/plain.txt/t.json"],
     ["plain.txt/t.json: cannot write", "plain.txt is a file, not a folder"], []),
    ("compare-out-not-empty", {"out/x": "x"}, ["compare", *SMALL, "--out", "{tmp}/out"],
     ["--out", "out", "exists and is not an empty folder"], []),
    # ---- flags out of range or malformed (each with an --out that must stay unwritten)
    ("solve-seed-negative", {}, [*SOLVE, "--seed", "-1", "--out", "{tmp}/s.json"],
     ["--seed -1", "must be a whole number in [0,"], ["s.json"]),
    ("solve-time-limit-nan", {}, [*SOLVE, "--time-limit", "nan", "--out", "{tmp}/s.json"],
     ["--time-limit nan", "must be a number of seconds in (0,"], ["s.json"]),
    ("solve-time-limit-inf", {}, [*SOLVE, "--time-limit", "inf", "--out", "{tmp}/s.json"],
     ["--time-limit inf", "must be a number of seconds in (0,"], ["s.json"]),
    ("solve-time-limit-zero", {}, [*SOLVE, "--time-limit", "0", "--out", "{tmp}/s.json"],
     ["--time-limit 0", "must be a number of seconds in (0,"], ["s.json"]),
    ("solve-time-limit-negative", {}, [*SOLVE, "--time-limit", "-1", "--out", "{tmp}/s.json"],
     ["--time-limit -1", "must be a number of seconds in (0,"], ["s.json"]),
    ("solve-time-limit-not-a-number", {}, [*SOLVE, "--time-limit", "soon"],
     ["--time-limit", "'soon'", "invalid float value"], []),
    ("solve-gap-over-one", {}, [*SOLVE, "--gap", "1.5", "--out", "{tmp}/s.json"],
     ["--gap 1.5", "must be in [0, 1)"], ["s.json"]),
    ("solve-effort-negative", {}, [*SOLVE, "--effort", "-3", "--out", "{tmp}/s.json"],
     ["--effort -3", "must be a whole number in [1,"], ["s.json"]),
    ("solve-threads-zero", {}, [*SOLVE, "--threads", "0", "--out", "{tmp}/s.json"],
     ["--threads 0", "must be a whole number in [1,"], ["s.json"]),
    ("solve-ram-1e30", {}, [*SOLVE, "--ram", "1e30", "--out", "{tmp}/s.json"],
     ["--ram '1e30'", "over the plausible maximum"], ["s.json"]),
    ("solve-ram-unknown-unit", {}, [*SOLVE, "--ram", "12QB", "--out", "{tmp}/s.json"],
     ["--ram '12QB'", "expected a number of bytes"], ["s.json"]),
    ("solve-deadline-unknown-unit", {}, [*SOLVE, "--deadline", "1.5X", "--out", "{tmp}/s.json"],
     ["--deadline '1.5X'", "expected a factor such as 1.5x"], ["s.json"]),
    ("solve-set-not-a-number", {}, ["solve", "--model", "mlp", "--set", "layers=two"],
     ["--set 'layers=two'", "must be a whole number"], []),
    ("solve-set-twice", {}, ["solve", "--model", "mlp", "--set", "layers=2", "--set", "layers=3"],
     ["--set 'layers=3'", "layers is set twice"], []),
    ("models-show-batch-size-set-twice", {},
     ["models", "show", "mlp", "--set", "batch_size=2", "--batch-size", "4"],
     ["--batch-size 4", "batch_size is set by --set too"], []),
    ("solve-unknown-board", {}, [*SOLVE[:-4], "--board", "no_such_board"],
     ["no_such_board"], []),
    ("simulate-seed-negative", {}, ["simulate", "{schedule}", "--graph", "{graph}",
                                    "--seed", "-1", "--trace", "{tmp}/t.json"],
     ["--seed -1", "must be a whole number >= 0"], ["t.json"]),
    ("simulate-runs-zero", {}, ["simulate", "{schedule}", "--graph", "{graph}", "--runs", "0"],
     ["--runs 0", "must be a whole number in [1,"], []),
    # ---- graph files
    ("graph-output-bytes-1e30",
     {"g.json": _graph_with(lambda d: _op(d, "fc1").update(output_bytes=10**30))},
     ["costs", "--graph", "{tmp}/g.json"],
     ["g.json", "op 'fc1'", "output_bytes = 1000000000000000000000000000000",
      "outside the allowed range"], []),
    ("graph-flops-nan", {"g.json": _graph_with(lambda d: _op(d, "fc2").update(flops=math.nan))},
     ["costs", "--graph", "{tmp}/g.json"], ["g.json", "op 'fc2'", "flops = nan"], []),
    ("graph-param-op-without-gradient", {"g.json": _graph_with(lambda d: _drop_op(d, "fc1/grad"))},
     [*GRAPH_SOLVE, "--out", "{tmp}/s.json"],
     ["g.json", "op 'fc1'", "trained parameters but no backward op"], ["s.json"]),
    ("graph-input-with-backward-op", {"g.json": _graph_with(_input_grad)},
     [*GRAPH_SOLVE, "--out", "{tmp}/s.json"],
     ["g.json", "op 'input/grad'", "backward op of 'input', which needs no gradient"],
     ["s.json"]),
    ("graph-gradient-from-the-wrong-op",
     {"g.json": _graph_with(lambda d: _op(d, "fc1/grad").update(inputs=["input", "fc2/grad"]))},
     [*GRAPH_SOLVE, "--out", "{tmp}/s.json"],
     ["g.json", "op 'fc1/grad'", "does not read 'relu1/grad'"], ["s.json"]),
    ("graph-truncated-json", {"g.json": lambda v: _text_of(v, "graph", 200)},
     ["costs", "--graph", "{tmp}/g.json"], ["g.json", "not valid JSON", "line "], []),
    ("graph-not-a-graph", {"g.json": {"format": "poetsim-schedule"}},
     ["costs", "--graph", "{tmp}/g.json"], ["g.json", "format = 'poetsim-schedule'"], []),
    ("graph-missing", {}, ["costs", "--graph", "{tmp}/none.json"],
     ["none.json", "cannot read graph file"], []),
    # ---- schedule files
    ("schedule-budget-not-a-number",
     {"s.json": _schedule_with(lambda d: d["metadata"].update(budget_bytes="lots"))},
     ["simulate", "{tmp}/s.json", "--graph", "{graph}", "--trace", "{tmp}/t.json"],
     ["s.json", "metadata.budget_bytes = 'lots'", "must be a number"], ["t.json"]),
    ("schedule-deadline-word-edited",
     {"s.json": _schedule_with(lambda d: d["metadata"].update(deadline="100x"))},
     ["simulate", "{tmp}/s.json", "--graph", "{graph}", "--trace", "{tmp}/t.json"],
     ["s.json", "metadata.digest", "changed after poetsim wrote it", "--accept-edits",
      "[edited]"], ["t.json"]),
    ("schedule-ram-word-unreadable",
     {"s.json": _schedule_with(lambda d: d["metadata"].update(ram="12QB"))},
     ["simulate", "{tmp}/s.json", "--graph", "{graph}", "--trace", "{tmp}/t.json"],
     ["s.json", "metadata.ram = '12QB'", "expected a number of bytes", "[bad_metadata]"],
     ["t.json"]),
    ("schedule-deadline-word-unreadable",
     {"s.json": _schedule_with(lambda d: d["metadata"].update(deadline="-2x"))},
     ["simulate", "{tmp}/s.json"],
     ["s.json", "metadata.deadline = '-2x'", "expected a factor", "[bad_metadata]"], []),
    ("schedule-for-another-graph", {},
     ["simulate", "{schedule}", "--graph", "{other_graph}", "--trace", "{tmp}/t.json"],
     ["schedule.json", "not for graph 'mlp'", "[fingerprint_mismatch]"], ["t.json"]),
    ("schedule-truncated-json", {"s.json": lambda v: _text_of(v, "schedule", 200)},
     ["simulate", "{tmp}/s.json", "--graph", "{graph}"], ["s.json", "not valid JSON"], []),
    ("schedule-truncated-json-without-graph", {"s.json": lambda v: _text_of(v, "schedule", 200)},
     ["simulate", "{tmp}/s.json"], ["s.json", "not valid JSON"], []),
    ("schedule-unknown-op",
     {"s.json": _schedule_with(lambda d: d["steps"][0].__setitem__(1, "nope"))},
     ["simulate", "{tmp}/s.json", "--graph", "{graph}"],
     ["s.json", "steps[0]", "op \"nope\" is not in the ops list"], []),
    ("schedule-action-not-a-string",
     {"s.json": _schedule_with(lambda d: d["steps"][0].__setitem__(0, ["compute"]))},
     ["simulate", "{tmp}/s.json", "--graph", "{graph}"],
     ["s.json", "steps[0]", 'action ["compute"]', "[unknown_action]"], []),
    ("schedule-huge-integer", {"s.json": lambda v: _text_of(v, "schedule", 10**9).replace(
        '"version": 1', '"version": ' + "9" * 5000)},
     ["simulate", "{tmp}/s.json", "--graph", "{graph}"], ["s.json", "not valid JSON"], []),
    # ---- an output over another output or over an input (#32), refused before any work
    ("solve-binary-over-its-json", {},
     [*SOLVE, "--out", "{tmp}/x", "--binary", "{tmp}/x"],
     ["--binary", "/x'", "the same file as the output --out"], ["x"]),
    ("solve-out-over-its-graph", {"g.json": lambda v: v["graph_doc"]},
     [*GRAPH_SOLVE, "--out", "{tmp}/g.json"],
     ["--out", "g.json", "the same file as the input --graph"], []),
    ("simulate-trace-over-its-schedule", {"s.json": lambda v: v["schedule_doc"]},
     ["simulate", "{tmp}/s.json", "--graph", "{graph}", "--trace", "{tmp}/s.json"],
     ["--trace", "s.json", "the same file as the input SCHEDULE"], []),
    # ---- sweep files
    ("sweep-unknown-key", {"s.toml": _sweep("colour = 3\n")},
     ["sweep", "run", "{tmp}/s.toml", "--results", "{tmp}/r.sqlite", "--quiet"],
     ["s.toml", "unknown key 'colour'", "allowed:"], ["r.sqlite", "r.cache"]),
]


def _make(tmp_path: Path, name: str, content: Any, valid: dict[str, Any]) -> None:
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    if callable(content):
        content = content(valid)
    if content is DIR or content is READ_ONLY_DIR:
        path.mkdir()
        if content is READ_ONLY_DIR:
            path.chmod(0o555)
    elif isinstance(content, bytes):
        path.write_bytes(content)
    elif isinstance(content, str):
        path.write_text(content)
    else:
        path.write_text(json.dumps(content))


def _tree(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


def _param(case: Any) -> Any:
    """A table row as a pytest parameter named by its first field."""
    if not hasattr(case, "marks"):  # a plain tuple, not a pytest.param
        return pytest.param(*case[1:], id=case[0])
    return pytest.param(*case.values[1:], id=case.values[0], marks=case.marks)


@pytest.mark.parametrize(("files", "argv", "needles", "outputs"), [_param(c) for c in CASES])
def test_bad_input_is_one_line_exit_2_and_leaves_no_file(capsys, tmp_path, monkeypatch, valid,
                                                         files, argv, needles, outputs):
    for name, content in files.items():
        _make(tmp_path, name, content, valid)
    before = _tree(tmp_path)
    monkeypatch.chdir(tmp_path)  # a file written to the working folder would show too
    places = {"tmp": str(tmp_path), **{k: valid[k] for k in ("graph", "schedule", "other_graph")}}
    argv = [arg.format(**places) for arg in argv]
    try:
        status, out, err = run(capsys, argv)
    finally:
        for name, content in files.items():
            if content is READ_ONLY_DIR:
                (tmp_path / name).chmod(0o755)
    err = assert_one_line_error(status, out, err)
    for needle in needles:
        assert needle in err, (needle, err)
    for name in outputs:
        assert not (tmp_path / name).exists(), f"{name} left behind: {err}"
    assert _tree(tmp_path) == before, "the failing command left files behind"


def test_the_table_covers_the_issue():
    ids = {_param(c).id for c in CASES}
    assert len(ids) == len(CASES) >= 40


# ----------------------------------------------------------------------------- hypothesis

#: Numbers a corrupt or careless file holds; HUGE becomes a number of 5,000 digits.
HUGE = "\x00huge\x00"
NASTY_NUMBERS = [10**30, -(10**30), -1, -0.5, 2**63, 2**44 + 1, 1e308, math.nan, math.inf,
                 -math.inf, 0, 0.5, True, HUGE]

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8)
    | st.sampled_from(NASTY_NUMBERS),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner,
                                                                max_size=3),
    max_leaves=6)


def _paths(node: Any, prefix: tuple = ()) -> list[tuple]:
    """Every place in a JSON document, as a key path (the root is ())."""
    found = [prefix]
    if isinstance(node, dict):
        for key, value in node.items():
            found += _paths(value, (*prefix, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            found += _paths(value, (*prefix, i))
    return found


def _get(doc: Any, path: tuple) -> Any:
    for key in path:
        doc = doc[key]
    return doc


@st.composite
def mutated(draw, doc: dict[str, Any]) -> bytes:
    """``doc`` with one to three random mutations, as the bytes of a file."""
    doc = copy.deepcopy(doc)
    pick = draw(st.randoms(use_true_random=True))  # uniform over places, not first-biased
    for _ in range(draw(st.integers(1, 3))):
        paths = [p for p in _paths(doc) if p]
        if not paths:
            break
        path = pick.choice(paths)
        parent, key = _get(doc, path[:-1]), path[-1]
        old = parent[key]
        kind = draw(st.sampled_from(["delete", "replace", "number", "duplicate", "drop"]))
        if kind == "delete":
            del parent[key]
        elif kind == "replace":
            parent[key] = draw(json_values.filter(lambda v, old=old: type(v) is not type(old)))
        elif kind == "number":
            parent[key] = draw(st.sampled_from(NASTY_NUMBERS))
        else:
            lists = [p for p in _paths(doc) if isinstance(_get(doc, p), list) and _get(doc, p)]
            if not lists:
                continue
            items = _get(doc, pick.choice(lists))
            at = pick.randrange(len(items))
            if kind == "duplicate":
                items.insert(pick.randrange(len(items) + 1), copy.deepcopy(items[at]))
            else:
                del items[at]
    text = json.dumps(doc, indent=1).replace(json.dumps(HUGE), "9" * 5000).encode()
    damage = draw(st.sampled_from(["none"] * 6 + ["truncate", "bytes"]))
    if damage == "truncate":
        text = text[:draw(st.integers(0, len(text)))]
    elif damage == "bytes":
        at = draw(st.integers(0, len(text)))
        text = text[:at] + draw(st.binary(min_size=1, max_size=8)) + text[at:]
    return text


def _check_answer(capsys, argv: list[str]) -> None:
    status, out, err = run(capsys, argv)
    assert status in (0, 1, 2), (status, err)
    assert "Traceback" not in out + err, err
    if status == 2:
        assert err.startswith("poetsim: error: ") and err.count("\n") == 1, err


FUZZ = settings(max_examples=60, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.function_scoped_fixture])


@FUZZ
@given(data=st.data())
def test_random_graph_files_never_crash(capsys, tmp_path, valid, data):
    path = tmp_path / "g.json"
    path.write_bytes(data.draw(mutated(valid["graph_doc"]), label="graph file"))
    _check_answer(capsys, ["costs", "--graph", str(path), "--board", "rpi4"])
    _check_answer(capsys, ["simulate", valid["schedule"], "--graph", str(path),
                           "--board", "rpi4"])


@FUZZ
@given(data=st.data())
def test_random_schedule_files_never_crash(capsys, tmp_path, valid, data):
    path = tmp_path / "s.json"
    path.write_bytes(data.draw(mutated(valid["schedule_doc"]), label="schedule file"))
    _check_answer(capsys, ["simulate", str(path), "--graph", valid["graph"], "--board", "rpi4"])
    if data.draw(st.booleans(), label="also without --graph"):
        _check_answer(capsys, ["simulate", str(path), "--board", "rpi4", "--set", "layers=2"])


@pytest.mark.parametrize(("change", "needles"), [
    (lambda row: row.__setitem__(4, -3),
     ["steps[", "move of \"t", "to_offset_bytes -3", "[bad_move]"]),
    (lambda row: row.__setitem__(4, row[4] + 64),
     ["step ", "(move 't", "the layout keeps tensor", "[move_mismatch]"]),
])
def test_a_tampered_move_in_a_schedule_file_is_one_line_exit_2(capsys, tmp_path, change,
                                                               needles):
    """#28 item 4: a MOVE step's offset out of form, or moved where the layout does not
    keep the tensor: one line naming the file, the step and the rule, exit 2."""
    from test_sim_support import fragmented_graph, fragmented_schedule

    from poetsim.boards import get_board
    from poetsim.graph.io import write_graph
    from poetsim.request import resolve_request
    from poetsim.schedule.compaction import compact
    from poetsim.schedule.io import schedule_to_dict
    from poetsim.schedule.replay import replay

    graph = fragmented_graph()
    resident = resolve_request(graph, get_board("nrf52840"), ram="board").resident_bytes
    moved = compact(replay(graph, fragmented_schedule(graph)), room_bytes=264,
                    resident_bytes=resident)
    write_graph(graph, tmp_path / "g.json")
    doc = schedule_to_dict(moved, graph)
    assert main(["simulate", _write(tmp_path / "good.json", doc), "--graph",
                 str(tmp_path / "g.json"), "--board", "nrf52840"]) == 0
    capsys.readouterr()
    change(next(row for row in doc["steps"] if row[0] == "move"))
    path = _write(tmp_path / "bad.json", doc)
    err = assert_one_line_error(*run(capsys, ["simulate", path, "--graph",
                                              str(tmp_path / "g.json"), "--board", "nrf52840",
                                              "--accept-edits"]))
    for needle in [path, *needles]:
        assert needle in err, (needle, err)


def _write(path: Path, doc: dict[str, Any]) -> str:
    path.write_text(json.dumps(doc))
    return str(path)
