"""The public API (poetsim.api, at the package's top level): its docstrings' examples run
as doctests, the README's example gives the bytes the CLI writes, and bad arguments raise
the project's errors with the CLI's messages."""

from __future__ import annotations

import doctest
import re
from pathlib import Path

import pytest

import poetsim
import poetsim.api
from poetsim.api import arguments, checking, planning, studies
from poetsim.cli.main import main
from poetsim.cli.options import FLAGS
from poetsim.errors import ArgumentTypeError, InputError, PoetsimError

ROOT = Path(__file__).parents[1]
DEMO = dict(ram="board", deadline="2x", train_last=3)


@pytest.mark.parametrize("module", [poetsim, poetsim.api, arguments, checking, planning,
                                    studies], ids=lambda m: m.__name__)
def test_docstring_examples_run(module, monkeypatch):
    monkeypatch.chdir(ROOT)  # regress_goldens' example copies a golden of schedules/
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS, verbose=False)
    assert result.failed == 0


def test_the_api_modules_carry_examples():
    """Every public function of the API has an example, so the doctests above test it."""
    for name in ("plan", "simulate", "compare_methods", "run_sweep", "regress_goldens"):
        assert ">>> " in getattr(poetsim, name).__doc__, name


def test_top_level_names_are_the_api_and_unknown_ones_fail():
    for name in poetsim.__all__:
        assert getattr(poetsim, name) is not None
    assert poetsim.plan is poetsim.api.plan and poetsim.InputError is InputError
    with pytest.raises(AttributeError, match="no attribute 'solve'"):
        poetsim.solve  # noqa: B018 - the attribute access is the test


def _readme_example() -> tuple[str, str]:
    """The README's Python example and the CLI command it says is the same."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    code = re.search(r"```python\n(import poetsim\n.*?)```", text, re.S).group(1)
    command = re.search(r"```sh\n(poetsim solve [^\n]*)\n```", text[text.index(code):]
                        ).group(1)
    return code, command


def test_readme_example_is_short_and_writes_the_cli_schedule(tmp_path, monkeypatch, capsys):
    code, command = _readme_example()
    lines = [line for line in code.splitlines() if line.strip()]
    assert len(lines) <= 6 and lines[0] == "import poetsim" and "verdict" in lines[-1]
    monkeypatch.chdir(tmp_path)
    exec(compile(code, "README.md", "exec"), {})  # noqa: S102 - the README's own example
    printed = capsys.readouterr().out
    assert printed.startswith("optimal 0.0173") and "\nPASS [physical accounting]" in printed
    args = command.split()[1:]
    out = args[args.index("--out") + 1]
    args[args.index("--out") + 1] = "cli.json"
    assert main(args) == 0
    assert (tmp_path / out).read_bytes() == (tmp_path / "cli.json").read_bytes()


def test_bytes_and_seconds_are_the_words_they_spell(tmp_path):
    """ram_bytes and deadline_s go to the one parser: the same request, the same file."""
    words = poetsim.plan("ds_cnn_s", "nrf52840", ram="237568", deadline="2.5",
                         train_last=3)
    numbers = poetsim.plan("ds_cnn_s", "nrf52840", ram_bytes=237568, deadline_s=2.5,
                           train_last=3)
    assert words.request == numbers.request
    a, b = words.save(tmp_path / "a.json"), numbers.save(tmp_path / "b.json")
    assert a.read_bytes() == b.read_bytes()
    assert (numbers.request.ram, numbers.request.deadline_s) == ("237568", 2.5)


def test_a_plan_is_checked_saved_plotted_and_traced(tmp_path):
    planned = poetsim.plan("ds_cnn_s", "nrf52840", search=poetsim.Search(gap_limit=0.01),
                           **DEMO)
    check = planned.check()
    assert check.passed and check.energy_j == pytest.approx(planned.energy_j, rel=0.01)
    assert planned.save(tmp_path / "s.bin", binary=True).read_bytes()[:4] != b"{\n  \""
    assert planned.trace(tmp_path / "t.json").stat().st_size > 0
    assert planned.plot(tmp_path / "p.png").read_bytes()[:4] == b"\x89PNG"
    again = poetsim.simulate(tmp_path / "s.bin", "nrf52840", model="ds_cnn_s",
                             train_last=3, ram="board", deadline="2x")
    assert again.passed and again.energy_j == check.energy_j
    assert planned.summary()["status"] == "optimal"


def test_a_graph_and_a_graph_file_plan_as_the_zoo_name(tmp_path):
    from poetsim.graph import write_graph
    from poetsim.zoo import build_model

    graph = build_model("ds_cnn_s", train_last=3)
    write_graph(graph, tmp_path / "g.json")
    by_name = poetsim.plan("ds_cnn_s", "nrf52840", **DEMO)
    options = {k: v for k, v in DEMO.items() if k != "train_last"}
    by_graph = poetsim.plan(graph, "nrf52840", **options)
    by_file = poetsim.plan(tmp_path / "g.json", poetsim.api.arguments.board_of("nrf52840"),
                           **options)
    assert by_name.energy_j == by_graph.energy_j == by_file.energy_j
    assert by_file.request.graph.metadata["graph_file"] == str(tmp_path / "g.json")


def test_a_torch_module_is_traced_on_its_example_inputs():
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(),
                              torch.nn.Linear(32, 4))
    planned = poetsim.plan(net, "nrf52840", ram="board",
                           example_inputs=torch.randn(2, 16))
    assert planned.request.graph.name == "sequential" and planned.check().passed
    with pytest.raises(InputError, match="example_inputs: a torch.nn.Module is traced"):
        poetsim.plan(net, "nrf52840")


def test_compare_methods_is_the_compare_command(capsys):
    table = poetsim.compare_methods("ds_cnn_s", "nrf52840", methods=["dtr"], **DEMO)
    assert [o.method for o in table.outcomes] == ["poet", "dtr"]
    assert table["poet"].energy_j == table["dtr"].energy_j
    assert main(["compare", "--model", "ds_cnn_s", "--set", "train_last=3", "--board",
                 "nrf52840", "--ram", "board", "--deadline", "2x"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[:2] == table.table().splitlines()[:2]
    with pytest.raises(InputError, match="method = 'nope': not compared here"):
        table["nope"]


# ----------------------------------------------------------------------------- bad input

def _cli_error(capsys, argv: list[str]) -> str:
    assert main(argv) == 2
    return capsys.readouterr().err.strip().removeprefix("poetsim: error: ")


@pytest.mark.parametrize(("call", "argv"), [
    (dict(ram="50x"), ["--ram", "50x"]),
    (dict(deadline="soon"), ["--deadline", "soon"]),
    (dict(deadline="-1x"), ["--deadline=-1x"]),
    (dict(accounting="nope"), ["--accounting", "nope"]),
    (dict(model="nope"), ["--model", "nope"]),
    (dict(board="nope"), ["--board", "nope"]),
    (dict(search=planning.Search(deadline_margin="200%"), deadline="2x"),
     ["--deadline", "2x", "--deadline-margin", "200%"]),
    (dict(effort=-1), ["--effort", "-1"]),
    (dict(time_limit_s=0.0), ["--time-limit", "0"]),
])
def test_bad_words_give_the_cli_message(call, argv, capsys):
    """The API's message is the CLI's, but for the name: the API's parameter, the flag."""
    call = {"model": "ds_cnn_s", "board": "nrf52840", **call}
    with pytest.raises(PoetsimError) as raised:
        poetsim.plan(call.pop("model"), call.pop("board"), **call)
    assert isinstance(raised.value, InputError)
    if "--accounting" in argv:  # argparse checks its choices first: its own message
        assert str(raised.value) == "accounting = 'nope': must be 'physical' or 'paper'"
        return
    cli = _cli_error(capsys, ["solve", "--model", "ds_cnn_s", "--board", "nrf52840", *argv])
    name, sep, rest = str(raised.value).partition(" = ")
    assert (f"{FLAGS[name]} {rest}" if sep and name in FLAGS else str(raised.value)) == cli


@pytest.mark.parametrize(("call", "message"), [
    (lambda: poetsim.plan(42), "model = 42: expected a zoo model name (str), a graph file"),
    (lambda: poetsim.plan("ds_cnn_s", 7), "board = 7: expected a board name"),
    (lambda: poetsim.plan("ds_cnn_s", ram=0.5), "ram = 0.5: expected a budget such as "
     "'50%', '256KiB' or 'board' (str), not float"),
    (lambda: poetsim.plan("ds_cnn_s", ram_bytes="256KiB"),
     "ram_bytes = '256KiB': expected a number of bytes (int), not str"),
    (lambda: poetsim.plan("ds_cnn_s", ram_bytes=True),
     "ram_bytes = True: expected a number of bytes (int), not bool"),
    (lambda: poetsim.plan("ds_cnn_s", deadline=2.5),
     "deadline = 2.5: expected a deadline such as '1.5x' or '2.5s' (str), not float"),
    (lambda: poetsim.plan("ds_cnn_s", deadline_s="2.5s"),
     "deadline_s = '2.5s': expected a number of seconds (float), not str"),
    (lambda: poetsim.plan("ds_cnn_s", effort="300"),
     "effort = '300': expected a whole number of nodes (int), not str"),
    (lambda: poetsim.plan("ds_cnn_s", search={"gap_limit": 0.1}),
     "search = {'gap_limit': 0.1}: expected poetsim.Search settings, not dict"),
    (lambda: poetsim.Search(remat="no"), "remat = 'no': expected True or False (bool)"),
    (lambda: poetsim.Search(seed=1.5), "seed = 1.5: expected a whole number (int), not float"),
    (lambda: poetsim.Search(progress="log"),
     "progress = 'log': expected a function of a dict (callable) or None, not str"),
    (lambda: poetsim.simulate(3), "schedule = 3: expected a schedule file (str or Path)"),
    (lambda: poetsim.compare_methods("ds_cnn_s", methods="dtr"),
     "methods = 'dtr': expected a list of method names, not str"),
    (lambda: poetsim.regress_goldens(tolerance=[1]), "tolerance = [1]: expected a share"),
    (lambda: poetsim.run_sweep(3), "sweep = 3: expected a sweep file (str or Path)"),
    # None where a value is needed, model options and list items of the wrong type
    (lambda: poetsim.plan("ds_cnn_s", None), "board = None: expected a board name"),
    (lambda: poetsim.plan("ds_cnn_s", time_limit_s=None),
     "time_limit_s = None: expected a number of seconds (float), not NoneType"),
    (lambda: poetsim.simulate(None), "schedule = None: expected a schedule file"),
    (lambda: poetsim.plan("ds_cnn_s", train_last="3"),
     "train_last = '3': expected a whole number (int), not str"),
    (lambda: poetsim.plan("ds_cnn_s", train_last=True),
     "train_last = True: expected a whole number (int), not bool"),
    (lambda: poetsim.simulate("s.json", model="ds_cnn_s", train_last=3.0),
     "train_last = 3.0: expected a whole number (int), not float"),
    (lambda: poetsim.plan("ds_cnn_s", started="now"),
     "started = 'now': expected a time.perf_counter() instant (float), not str"),
    (lambda: poetsim.compare_methods("ds_cnn_s", methods=["dtr", 3]),
     "methods = 3: expected a list of method names (str), not int"),
    (lambda: poetsim.regress_goldens(say=3),
     "say = 3: expected a function of a line (str) (callable) or None, not int"),
])
def test_wrong_types_name_the_parameter_and_the_type(call, message):
    with pytest.raises(ArgumentTypeError) as raised:
        call()
    assert str(raised.value).startswith(message)
    assert isinstance(raised.value, TypeError) and isinstance(raised.value, InputError)


@pytest.mark.parametrize(("call", "message"), [
    (lambda: poetsim.plan("ds_cnn_s", ram="50%", ram_bytes=1024),
     "ram = '50%' and ram_bytes = 1024: give one of them"),
    (lambda: poetsim.plan("ds_cnn_s", deadline="2x", deadline_s=1.0),
     "deadline = '2x' and deadline_s = 1.0: give one of them"),
    (lambda: poetsim.plan("ds_cnn_s", optimizer="lion"),
     "optimizer = 'lion': must be one of sgd, momentum, adam"),
    (lambda: poetsim.plan("ds_cnn_s", depth=3), "model ds_cnn_s: unknown option 'depth'"),
    (lambda: poetsim.plan(Path("g.json"), train_last=3),
     "model options train_last given for PosixPath('g.json'): they are for a zoo model"),
    (lambda: poetsim.Search(remat=False, paging=False),
     "remat = False and paging = False: one of them must stay on"),
    (lambda: poetsim.Search(plan_for="fast"),
     "plan_for = 'fast': must be one of typical, slow, costly"),
    (lambda: poetsim.regress_goldens(tolerance="5"), "tolerance = '5': must be in [0, 100%)"),
    (lambda: poetsim.compare_methods("ds_cnn_s", methods=["dtr", "dtr"]),
     "methods: dtr given more than once"),
])
def test_bad_values_raise_input_errors(call, message):
    with pytest.raises(InputError) as raised:
        call()
    assert str(raised.value).startswith(message)


def test_regress_tolerance_message_is_the_cli_one(capsys):
    with pytest.raises(InputError) as raised:
        poetsim.regress_goldens(tolerance="5")
    assert _cli_error(capsys, ["regress", "--tolerance", "5"]) == \
        str(raised.value).replace("tolerance = ", "--tolerance ")
