"""Training graphs: ops, validation, autograd-style backward derivation, graph files."""

from poetsim.graph.autograd import (
    KINDS,
    MAC_KINDS,
    ForwardGraph,
    ForwardOp,
    derive_training_graph,
    forward_macs,
    grad_name,
)
from poetsim.graph.graph import (
    CHANNEL_KINDS,
    OPTIMIZER_STATE_COPIES,
    ResidentMemory,
    TrainingGraph,
    check_gradients,
    inplace_gradient_bytes,
    needs_gradient,
    resident_memory,
    topological_order,
)
from poetsim.graph.io import (
    graph_fingerprint,
    graph_from_dict,
    graph_to_dict,
    read_graph,
    write_graph,
)
from poetsim.graph.memory import PeakMemory, plain_peak
from poetsim.graph.ops import MeasuredCosts, Op, Phase
from poetsim.graph.precision import Precision, compute_widths, precision_of
from poetsim.graph.training import TrainedParams, Training, resolve_training

__all__ = [
    "KINDS", "MAC_KINDS", "OPTIMIZER_STATE_COPIES", "ForwardGraph", "ForwardOp",
    "MeasuredCosts", "Op", "PeakMemory", "Phase", "Precision", "ResidentMemory", "plain_peak",
    "TrainedParams",
    "Training", "TrainingGraph", "resolve_training",
    "CHANNEL_KINDS", "check_gradients", "compute_widths", "derive_training_graph", "precision_of",
    "forward_macs", "grad_name", "graph_fingerprint", "graph_from_dict", "graph_to_dict",
    "inplace_gradient_bytes",
    "needs_gradient", "read_graph", "resident_memory", "topological_order", "write_graph",
]
