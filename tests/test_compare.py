"""poetsim.compare: every method at one request, simulated and judged, in one table."""

from __future__ import annotations

import pytest
from conftest import make_board, paper_request

from poetsim.boards import get_board
from poetsim.compare import compare, format_table
from poetsim.methods import METHODS, MethodStatus, SolverSettings
from poetsim.request import resolve_request
from poetsim.runs import RunCache, reference_energy_j
from poetsim.zoo import build_model

FAST = SolverSettings(time_limit_s=1)


@pytest.fixture(scope="module")
def mlp():
    return build_model("mlp")


def test_compare_on_mlp_returns_an_outcome_per_method(mlp):
    request = paper_request(mlp, get_board("nrf52840"), "70%")
    outcomes = compare(request, settings=FAST)
    assert [o.method for o in outcomes] == list(METHODS)
    by_name = {o.method: o for o in outcomes}
    assert by_name["poet"].feasible
    assert not by_name["checkpoint_all"].feasible
    assert by_name["checkpoint_all"].status is MethodStatus.INFEASIBLE
    assert by_name["checkpoint_all"].why_not
    for o in outcomes:
        if o.feasible:
            assert o.verdict.within_budget and o.verdict.deadline_met is None
            assert o.energy_j > 0 and o.makespan_s > 0 and o.energy_overhead is not None
            assert o.peak_total_bytes <= request.ram_limit_bytes
            # paper accounting: the whole state does not fit the nRF52840, and says so
            assert not o.verdict.fits_board_ram and o.verdict.notes
        else:
            assert o.why_not
    # every remat-only method pays for recomputation over checkpoint-all's energy
    assert by_name["chen_greedy"].energy_overhead > 0
    text = format_table(outcomes)
    assert len(text.splitlines()) == len(outcomes) + 1


def test_compare_under_physical_accounting_on_an_mcu_says_why_for_every_method(mlp):
    outcomes = compare(resolve_request(mlp, get_board("nrf52840"), ram="70%"),
                       settings=FAST, methods=["dtr", "capuchin"])
    assert [o.method for o in outcomes] == ["poet", "dtr", "capuchin"]
    for o in outcomes:
        assert not o.feasible and o.status is MethodStatus.INFEASIBLE
        assert "usable RAM" in o.why_not


def test_compare_marks_chain_only_methods_not_applicable(residual):
    board = make_board()
    request = paper_request(residual, board, "100%")
    heard = []
    outcomes = compare(request, settings=FAST, methods=["checkpoint_all", "revolve", "pofo"],
                       progress=lambda *args: heard.append(args))
    assert [(i, n, o.method) for i, n, o in heard] == \
        [(i, 4, o.method) for i, o in enumerate(outcomes, 1)]
    by_name = {o.method: o for o in outcomes}
    assert by_name["checkpoint_all"].feasible
    assert by_name["checkpoint_all"].energy_overhead == pytest.approx(0.0, abs=1e-9)
    assert by_name["checkpoint_all"].energy_j == pytest.approx(reference_energy_j(request))
    for method in ("revolve", "pofo"):
        assert by_name[method].status is MethodStatus.NOT_APPLICABLE
        assert not by_name[method].feasible


def test_compare_with_a_cache_gives_the_same_outcomes_twice(mlp, tmp_path):
    request = paper_request(mlp, get_board("nrf52840"), "60%")
    cache = RunCache(tmp_path)
    methods = ["dtr", "checkmate"]
    first = compare(request, settings=FAST, methods=methods, cache=cache)
    assert cache.hits == 0 and cache.misses == 3
    second = compare(request, settings=FAST, methods=methods, cache=cache)
    assert cache.hits == 3
    assert [attrs_free(o) for o in first] == [attrs_free(o) for o in second]


def attrs_free(outcome):
    doc = outcome.as_dict()
    doc.pop("cached")
    return doc


def test_compare_out_writes_every_schedule_all_or_nothing(mlp, tmp_path, capsys):
    from poetsim.cli.main import main

    out = tmp_path / "cmp"
    # a 3-layer MLP: every method ends in a second of CPU, well within a limit no load
    # reaches (with --time-limit 1 a loaded machine left POET without its schedule)
    assert main(["compare", "--model", "mlp", "--set", "layers=3", "--board", "rpi4",
                 "--ram", "70%", "--time-limit", "60", "--out", str(out)]) == 0
    names = sorted(p.name for p in out.iterdir())
    assert "poet.json" in names and "dtr.json" in names and "comparison.json" in names
    assert main(["simulate", str(out / "dtr.json"), "--board", "rpi4"]) == 0
    capsys.readouterr()
    assert main(["compare", "--model", "mlp", "--board", "rpi4", "--time-limit", "1",
                 "--out", str(out)]) == 2
    assert "exists and is not an empty folder" in capsys.readouterr().err


def test_a_schedule_the_limit_left_unchecked_is_neither_pass_nor_fail(monkeypatch):
    """#32 item 3: the table's verdict column says "unchecked" and why not says why; the
    comparison's exit status (a PASS somewhere) does not count it."""
    import poetsim.runs as runs
    from poetsim import clock

    def out_of_time(*_args, **_kwargs):
        raise clock.out_of_time()

    monkeypatch.setattr(runs, "check_on_board", out_of_time)
    request = resolve_request(build_model("mlp", layers=3), get_board("rpi4"), ram="80%",
                              deadline="2x")
    (dtr,) = compare(request, methods=["dtr"], settings=SolverSettings(time_limit_s=5))[1:]
    assert dtr.schedule is not None and not dtr.feasible
    row = format_table([dtr]).splitlines()[1]
    assert row.startswith("dtr             unchecked ok ")
    assert row.endswith("not checked on the board: the 5 s time limit ran out while "
                        "checking dtr's schedule on the board; a longer time limit checks it")
