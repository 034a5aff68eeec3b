"""Summaries of a model's training graph and of its costs on a board.

Plain values with units in their names, ready for printing or for ``--json``.
"""

from __future__ import annotations

from typing import Any

import attrs

from poetsim.boards.spec import Board
from poetsim.costs import OpCosts, compute_rate, op_costs
from poetsim.graph.autograd import forward_macs
from poetsim.graph.graph import TrainingGraph, resident_memory
from poetsim.graph.memory import plain_peak
from poetsim.graph.ops import Phase
from poetsim.graph.precision import DTYPE_NAMES, compute_widths, precision_of
from poetsim.request import Request, resolve_request

__all__ = ["CostSummary", "GraphSummary", "cost_summary", "graph_summary"]


@attrs.frozen
class GraphSummary:
    """Size and work of one training iteration of a graph."""

    name: str
    ops: int
    forward_ops: int
    backward_ops: int
    parameters: int
    param_bytes: int
    forward_flops: float
    training_flops: float
    forward_macs: float
    activation_bytes: int
    plain_peak_bytes: int
    plain_peak_op: str
    metadata: dict[str, Any]

    def as_dict(self) -> dict[str, Any]:
        return attrs.asdict(self)


def graph_summary(graph: TrainingGraph) -> GraphSummary:
    """Op counts, parameters, FLOPs, MACs and activation memory of ``graph``.

    ``activation_bytes`` is the sum of the outputs of all forward ops and the loss (what
    keeping every activation for the backward pass costs); ``plain_peak_bytes`` is the
    peak of the plain schedule (:func:`poetsim.graph.memory.plain_peak`).
    """
    forward = [op for op in graph.ops if op.phase is not Phase.BACKWARD]
    weight_bytes = precision_of(graph).weight_bytes
    peak = plain_peak(graph)
    return GraphSummary(
        name=graph.name,
        ops=len(graph),
        forward_ops=len(forward),
        backward_ops=len(graph) - len(forward),
        parameters=graph.param_bytes // weight_bytes,
        param_bytes=graph.param_bytes,
        forward_flops=sum(op.flops for op in forward),
        training_flops=graph.flops,
        forward_macs=forward_macs(graph),
        activation_bytes=sum(op.output_bytes for op in forward),
        plain_peak_bytes=peak.bytes,
        plain_peak_op=peak.op_name,
        metadata=dict(graph.metadata),
    )


@attrs.frozen
class CostSummary:
    """One training iteration of a graph on a board, every op computed once."""

    graph: str
    board: str
    profile: str
    compute_time_s: float
    compute_energy_j: float
    forward_time_s: float
    backward_time_s: float
    page_all_time_s: float
    page_all_energy_j: float
    ram_bytes: int
    ram_usable_bytes: int
    resident_bytes: int
    #: Frozen weights read in place from the board's memory-mapped flash, not in
    #: ``resident_bytes`` (the request's placement, :func:`poetsim.request.resolve_request`).
    flash_weight_bytes: int
    #: Weights on the board's storage, streamed by the ops that read them
    #: (:mod:`poetsim.graph.streaming`), not in ``resident_bytes``.
    streamed_weight_bytes: int
    plain_peak_bytes: int
    plain_total_bytes: int
    fits_without_remat_or_paging: bool
    resident_fits: bool
    storage_capacity_bytes: int
    activation_bytes: int
    measured_ops: int
    top_energy_ops: list[dict[str, Any]]
    #: Byte widths of weights, activations and gradients (:mod:`poetsim.graph.precision`).
    precision_bytes: dict[str, int] = attrs.field(factory=dict)
    #: Per compute width used by some op: its dtype, op count, the throughput, the board
    #: field it comes from and that field's source kind (``datasheet``, ``estimate``, ...),
    #: and whether it is the fp32 figure standing in for the dtype (``estimate``).
    compute_rates: list[dict[str, Any]] = attrs.field(factory=list)
    #: True when some op's throughput is the fp32 figure standing in for a narrower dtype
    #: the board gives none for: the compute time of those ops is an estimate.
    compute_rate_estimated: bool = False

    def as_dict(self) -> dict[str, Any]:
        return attrs.asdict(self)


def cost_summary(graph: TrainingGraph, board: Board, costs: OpCosts | None = None, *,
                 gradients: bool = True, optimizer: str = "sgd", top: int = 5,
                 request: Request | None = None) -> CostSummary:
    """Totals of ``graph`` on ``board``.

    ``page_all_*`` is what paging every forward activation out once and back in once
    would cost (a yardstick for paging versus recomputing). ``resident_bytes`` holds the
    parameters, their gradients (``gradients``) and the optimizer state (of ``optimizer``,
    or of the request's when ``request`` is given) in RAM, less the
    frozen weights the request reads in place from flash (``flash_weight_bytes``): the
    placement of ``request`` when given (it must be for ``graph`` and ``board``), else of
    the physical request :func:`~poetsim.request.resolve_request` makes for them.
    ``compute_rates`` says which CPU throughput each compute width used; on a physical
    board without a figure for a narrow dtype the fp32 one stands in and
    ``compute_rate_estimated`` is set. Paper-profile boards use fp32 figures throughout.
    """
    costs = costs if costs is not None else op_costs(graph, board)
    forward_idx = [i for i, op in enumerate(graph.ops) if op.phase is not Phase.BACKWARD]
    backward_idx = graph.indices(Phase.BACKWARD)
    paged = [i for i in forward_idx if graph.ops[i].phase is Phase.FORWARD]
    if request is None:  # the placement is the request's, decided there and only there
        request = resolve_request(graph, board, costs=costs, optimizer=optimizer)
    optimizer = request.optimizer  # as is the optimizer
    if request.streamed_weight_bytes:  # the request's graph and costs stream the weights
        graph, costs = request.graph, request.costs
    flash_weights = request.flash_weight_bytes
    resident = (resident_memory(graph, gradients=gradients, optimizer=optimizer).total_bytes
                - flash_weights - request.streamed_weight_bytes)
    peak = plain_peak(graph).bytes
    usable = board.ram.usable_bytes
    order = sorted(range(len(graph)), key=lambda i: (-costs.compute_energy_j[i], i))[:top]
    total_energy = float(costs.compute_energy_j.sum())
    widths = compute_widths(graph)
    rates: list[dict[str, Any]] = []
    for width in sorted(set(widths) - {0}):
        rate = compute_rate(board, width)
        paper = board.profile.value == "paper"
        field = "flops_per_s" if paper else rate.field
        source = board.source_of(f"cpu.{field}")
        rates.append({"width_bytes": width, "dtype": DTYPE_NAMES.get(width, f"{width} B"),
                      "ops": widths.count(width),
                      "ops_per_s": board.cpu.flops_per_s if paper else rate.ops_per_s,
                      "field": field, "source": source.kind.value if source else None,
                      "estimate": rate.fallback and not paper})
    return CostSummary(
        graph=graph.name,
        board=board.name,
        profile=board.profile.value,
        compute_time_s=float(costs.compute_time_s.sum()),
        compute_energy_j=total_energy,
        forward_time_s=float(costs.compute_time_s[forward_idx].sum()),
        backward_time_s=float(costs.compute_time_s[backward_idx].sum()),
        page_all_time_s=float(costs.pageout_time_s[paged].sum() + costs.pagein_time_s[paged].sum()),
        page_all_energy_j=float(costs.pageout_energy_j[paged].sum()
                                + costs.pagein_energy_j[paged].sum()),
        ram_bytes=board.ram.bytes,
        ram_usable_bytes=usable,
        resident_bytes=resident,
        flash_weight_bytes=flash_weights,
        streamed_weight_bytes=request.streamed_weight_bytes,
        plain_peak_bytes=peak,
        plain_total_bytes=peak + resident,
        fits_without_remat_or_paging=peak + resident <= usable,
        resident_fits=resident <= usable,
        storage_capacity_bytes=board.storage.capacity_bytes,
        activation_bytes=sum(graph.ops[i].output_bytes for i in forward_idx),
        measured_ops=int(costs.measured.sum()),
        top_energy_ops=[{"op": graph.ops[i].name,
                         "compute_time_s": float(costs.compute_time_s[i]),
                         "compute_energy_j": float(costs.compute_energy_j[i]),
                         "share": float(costs.compute_energy_j[i] / total_energy)
                         if total_energy else 0.0}
                        for i in order],
        precision_bytes=attrs.asdict(precision_of(graph)),
        compute_rates=rates,
        compute_rate_estimated=any(r["estimate"] for r in rates),
    )
