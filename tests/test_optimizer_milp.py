"""The MILP's decisions (poetsim/optimizer/milp.py): which recomputations it may take."""

from __future__ import annotations

from poetsim.boards import get_board
from poetsim.costs import op_costs
from poetsim.graph import Phase
from poetsim.optimizer.milp import Formulation, MilpModel
from poetsim.zoo import build_model


def test_an_inplace_update_is_never_recomputed():
    """Only ops that may run again get recomputation variables: an in-place update
    (Op.recomputable) has none; other backward ops keep theirs."""
    graph = build_model("ds_cnn_s", inplace_update=1)
    model = MilpModel(graph, op_costs(graph, get_board("nrf52840")), 10**6, None,
                      Formulation(), storage_capacity_bytes=None, energy_reference_j=1.0)
    recomputed = {i for (_, i) in model.R}
    inplace = {i for i, op in enumerate(graph.ops) if op.inplace_update}
    assert inplace and not inplace & recomputed
    assert any(graph.ops[i].phase is Phase.BACKWARD for i in recomputed)
