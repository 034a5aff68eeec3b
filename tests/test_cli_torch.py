"""The ``poetsim import`` and ``poetsim execute`` commands."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from poetsim.cli.main import main

MODELS = str(Path(__file__).with_name("torch_models.py"))


def test_poetsim_imports_without_torch():
    code = ("import sys; import poetsim.cli.main, poetsim.torchio; "
            "sys.exit(1 if 'torch' in sys.modules else 0)")
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def test_missing_torch_is_one_line(monkeypatch, capsys, tmp_path):
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch raises ImportError
    status = main(["import", f"{MODELS}:mlp", "--input-shape", "2,32",
                   "--out", str(tmp_path / "g.json")])
    err = capsys.readouterr().err
    assert status == 2
    assert err.strip() == ("poetsim: error: poetsim import needs PyTorch: "
                           "pip install 'poetsim[torch]'")


def test_import_solve_execute_end_to_end(tmp_path, capsys):
    pytest.importorskip("torch")
    graph = tmp_path / "mlp.json"
    schedule = tmp_path / "s.json"
    factory = f"{MODELS}:mlp"
    assert main(["import", factory, "--input-shape", "2,32", "--out", str(graph),
                 "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["graph"]["parameters"] == 32 * 16 + 16 + 16 * 16 + 16 + 16 * 4 + 4
    # named after the module's class (MLP), not the factory function; --name overrides it
    assert doc["graph"]["name"] == "mlp" and json.loads(graph.read_text())["name"] == "mlp"
    assert main(["import", f"{MODELS}:small_cnn", "--input-shape", "2,3,8,8", "--out",
                 str(tmp_path / "c.json"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["graph"]["name"] == "smallrescnn"
    assert main(["import", factory, "--input-shape", "2,32", "--name", "mine",
                 "--out", str(tmp_path / "n.json"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["graph"]["name"] == "mine"
    assert main(["solve", "--graph", str(graph), "--board", "nrf52840", "--ram", "60%",
                 "--time-limit", "5", "--out", str(schedule), "--json"]) == 0
    capsys.readouterr()
    assert main(["execute", str(schedule), "--model-factory", factory, "--input-shape",
                 "2,32", "--page-dir", str(tmp_path / "pages"), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["passed"] and report["max_rel_grad_error"] <= 1e-6
    assert report["peak_live_bytes"] <= report["budget_bytes"]
    assert main(["execute", str(schedule), "--model-factory", factory, "--input-shape",
                 "2,32"]) == 0
    text = capsys.readouterr().out
    assert "PASS" in text and "max relative gradient error" in text


def test_execute_in_the_arena_of_the_schedule_file(tmp_path, capsys):
    """#28 item 7: ``--arena`` runs in the file's layout; a tampered one is refused."""
    pytest.importorskip("torch")
    graph, schedule = tmp_path / "mlp.json", tmp_path / "s.json"
    model = ["--model-factory", f"{MODELS}:mlp", "--input-shape", "2,32"]
    assert main(["import", f"{MODELS}:mlp", "--input-shape", "2,32", "--out", str(graph)]) == 0
    assert main(["solve", "--graph", str(graph), "--board", "nrf52840", "--ram", "board",
                 "--out", str(schedule)]) == 0
    capsys.readouterr()
    doc = json.loads(schedule.read_text())
    assert doc["version"] == 2 and doc["layout"]["buffers"]
    assert main(["execute", str(schedule), *model, "--arena"]) == 0
    out = capsys.readouterr().out
    assert "PASS" in out and "activations in one arena" in out
    assert f"{doc['layout']['arena_bytes']} B, each at its offset" in out
    tensors = [b for b in doc["layout"]["buffers"] if b[0] == "tensor"]
    first, second = tensors[0], next(b for b in tensors[1:] if b[2] < tensors[0][3])
    second[5] = first[5]  # two live tensors on the same bytes
    schedule.write_text(json.dumps(doc))
    status = main(["execute", str(schedule), *model, "--arena"])
    err = capsys.readouterr().err
    assert status == 2 and "[edited]" in err and err.count("\n") == 1
    status = main(["execute", str(schedule), *model, "--arena", "--accept-edits"])
    err = capsys.readouterr().err
    assert status == 2 and "[layout_overlap]" in err and err.count("\n") == 1


@pytest.mark.parametrize("factory, shape, ram, in_place, frozen, remat", [
    ("small_cnn", "2,3,8,8", "70%", 9, 0, True),  # the solver recomputes conv1 and conv2
    ("frozen_mlp", "2,32", "100%", 3, 3, False),  # fc1 and fc2's weight frozen
])
def test_inplace_update_import_solve_execute(tmp_path, capsys, factory, shape, ram, in_place,
                                             frozen, remat):
    pytest.importorskip("torch")
    graph, schedule = tmp_path / "g.json", tmp_path / "s.json"
    model = ["--model-factory", f"{MODELS}:{factory}", "--input-shape", shape]
    assert main(["import", f"{MODELS}:{factory}", "--input-shape", shape,
                 "--inplace-update", "--out", str(graph)]) == 0
    doc = json.loads(graph.read_text())
    fused = [op["name"] for op in doc["ops"] if op.get("inplace_update")]
    assert fused and all(name.endswith("/grad") for name in fused)
    assert main(["solve", "--graph", str(graph), "--ram", ram, "--time-limit", "5",
                 "--out", str(schedule)]) == 0
    capsys.readouterr()
    assert main(["execute", str(schedule), *model, "--inplace-update", "--lr", "0.05",
                 "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["passed"] and report["lr"] == 0.05
    assert report["max_rel_weight_error"] <= 1e-9 and report["frozen_params"] == frozen
    assert report["params_updated_in_place"] == in_place
    assert report["params_updated_after"] == 0
    assert (report["recomputations"] > 0) is remat
    assert main(["execute", str(schedule), *model, "--inplace-update"]) == 0
    text = capsys.readouterr().out
    assert "max relative weight error (sgd)" in text
    assert f"{in_place} / 0; {frozen} frozen, unchanged" in text
    # without --inplace-update the model imports as another graph
    assert main(["execute", str(schedule), *model]) == 2
    assert "fingerprint" in capsys.readouterr().err


def test_gradient_sums_and_adam_import_solve_execute(tmp_path, capsys):
    """The residual CNN imported with its gradient sums, solved for Adam, executed: the
    summed gradients, the weights and Adam's state match autograd and torch.optim."""
    pytest.importorskip("torch")
    graph, schedule = tmp_path / "g.json", tmp_path / "s.json"
    model = ["--model-factory", f"{MODELS}:small_cnn", "--input-shape", "2,3,8,8"]
    assert main(["import", f"{MODELS}:small_cnn", "--input-shape", "2,3,8,8",
                 "--gradient-sums", "--out", str(graph)]) == 0
    doc = json.loads(graph.read_text())
    assert [op["name"] for op in doc["ops"] if op.get("gradient_sum_of")] == ["relu1/grad_sum"]
    assert main(["solve", "--graph", str(graph), "--ram", "70%", "--time-limit", "5",
                 "--optimizer", "adam", "--out", str(schedule)]) == 0
    capsys.readouterr()
    assert main(["execute", str(schedule), *model, "--gradient-sums"]) == 0
    text = capsys.readouterr().out
    assert "max relative weight error (adam)" in text and "max relative state error" in text
    assert main(["execute", str(schedule), *model]) == 2  # without the sums: another graph
    assert "fingerprint" in capsys.readouterr().err


@pytest.mark.parametrize(("flag", "value", "what"), [
    *(("--lr", v, "the learning rate must be") for v in ("0", "-0.1", "nan", "inf")),
    # a NaN or infinite tolerance would switch the checks off
    *(("--rtol", v, "the relative tolerance must be a finite number > 0")
      for v in ("0", "-1", "nan", "inf")),
])
def test_execute_refuses_a_bad_number_in_one_line(tmp_path, capsys, flag, value, what):
    pytest.importorskip("torch")
    status = main(["execute", str(tmp_path / "missing.json"), "--model-factory",
                   f"{MODELS}:mlp", "--input-shape", "2,32", flag, value])
    err = capsys.readouterr().err
    assert status == 2 and err.count("\n") == 1
    assert err.startswith(f"poetsim: error: {flag} {float(value)!r}: {what}")


@pytest.mark.parametrize(("module", "source", "shape", "words"), [
    ("m_raises", "def make():\n    raise RuntimeError('boom')\n", "2,4",
     "raised RuntimeError: boom"),
    ("m_syntax", "def make(:\n", "2,4",
     "cannot import 'm_syntax': invalid syntax (m_syntax.py, line 1)"),
    ("m_import", "raise ValueError('at import')\n", "2,4",
     "importing 'm_import' raised ValueError: at import"),
    ("m_huge", "import torch\ndef make():\n    return torch.nn.Linear(4, 2)\n",
     "99999999,99999999", "1e+16 elements, over the 2147483648"),
    ("m_tuple", "import torch\ndef make():\n    return (torch.nn.Linear(4, 2),)\n", "2,4",
     "returned a tuple of 1: expected a module, or (module, example inputs)"),
])
def test_the_users_own_mistakes_in_a_factory_are_one_line(tmp_path, capsys, monkeypatch,
                                                          module, source, shape, words):
    """#32: a factory that raises, a module that does not parse or raises on import, an
    input shape no machine holds: exit 2 with one line, not an internal error."""
    pytest.importorskip("torch")
    (tmp_path / f"{module}.py").write_text(source)
    monkeypatch.chdir(tmp_path)
    status = main(["import", f"{module}:make", "--input-shape", shape, "--out",
                   str(tmp_path / "g.json")])
    err = capsys.readouterr().err
    assert status == 2 and err.count("\n") == 1 and words in err, err
    assert not (tmp_path / "g.json").exists()


def test_a_page_dir_that_is_a_file_is_one_line(tmp_path, capsys):
    pytest.importorskip("torch")
    graph, schedule, page = tmp_path / "g.json", tmp_path / "s.json", tmp_path / "afile"
    model = ["--model-factory", f"{MODELS}:mlp", "--input-shape", "2,32"]
    assert main(["import", f"{MODELS}:mlp", "--input-shape", "2,32", "--out", str(graph)]) == 0
    assert main(["solve", "--graph", str(graph), "--board", "rpi4", "--out", str(schedule)]) == 0
    page.write_text("")
    capsys.readouterr()
    status = main(["execute", str(schedule), *model, "--page-dir", str(page)])
    err = capsys.readouterr().err
    assert status == 2 and err.count("\n") == 1
    assert "it is a file, not a directory" in err


def test_execute_refuses_a_schedule_for_another_model(tmp_path, capsys):
    pytest.importorskip("torch")
    graph, schedule = tmp_path / "g.json", tmp_path / "s.json"
    assert main(["import", f"{MODELS}:mlp", "--input-shape", "2,32", "--out",
                 str(graph)]) == 0
    assert main(["solve", "--graph", str(graph), "--ram", "100%", "--time-limit", "2",
                 "--out", str(schedule)]) == 0
    capsys.readouterr()
    status = main(["execute", str(schedule), "--model-factory", f"{MODELS}:small_cnn",
                   "--input-shape", "2,3,8,8"])
    err = capsys.readouterr().err
    assert status == 2 and err.count("\n") == 1 and "fingerprint" in err


def test_unsupported_op_is_a_one_line_error(tmp_path, capsys):
    pytest.importorskip("torch")
    status = main(["import", f"{MODELS}:unsupported", "--input-shape", "2,4", "--out",
                   str(tmp_path / "g.json")])
    err = capsys.readouterr().err
    assert status == 2 and err.count("\n") == 1
    assert "aten.sin" in err and "body.act" in err


@pytest.mark.parametrize("argv, message", [
    (["import", "nonexistent_module_xyz:f", "--out", "g.json"], "cannot import"),
    (["import", "no_colon", "--out", "g.json"], "MODULE:FACTORY"),
    (["import", f"{MODELS}:nope", "--out", "g.json"], "no callable"),
    (["import", f"{MODELS}:mlp", "--out", "g.json"], "--input-shape"),
    (["import", f"{MODELS}:mlp", "--input-shape", "2,x", "--out", "g.json"], "sizes"),
])
def test_bad_arguments(argv, message, capsys):
    pytest.importorskip("torch")
    assert main(argv) == 2
    assert message in capsys.readouterr().err
