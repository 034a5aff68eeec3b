"""The model zoo: analytic training graphs of common networks.

Each model is built by hand from its layer hyper-parameters (shapes, FLOPs, parameters
and workspace; see :mod:`poetsim.zoo.layers` for the cost conventions) as a
:class:`~poetsim.graph.autograd.ForwardGraph`, whose backward ops are derived the way
autograd does. Every model takes integer keyword options, ``batch_size`` among them, and
the training-mode options every model shares (:data:`TRAINING_OPTIONS`):

* ``train_last=k``: train only the last ``k`` layers (a layer is a convolution, linear or
  embedding op with the norm that follows it; the last is the classifier); 0, the
  default, trains every layer;
* ``bias_only=1``: train only biases and norm shifts (of the last ``train_last`` layers,
  or of all), every weight frozen;
* ``sparse_update=1``: the model's published sparse-update scheme (Lin et al., NeurIPS
  2022), for the models that have one (``mcunet_in1``);
* ``inplace_update=1``: with any of the above, each trained parameter's gradient is
  applied by the backward op that computes it (the SGD step fused into it; Lin et al.'s
  in-place update), so no gradient is resident: each such op holds its parameters'
  gradient as workspace while it runs (``Op.inplace_update``). Optimizer state stays
  resident;
* ``gradient_sums=1``: with any of the above, the gradient of each op read by several
  others is summed by an op of its own (``Op.gradient_sum_of``), so that the op's backward
  reads one incoming gradient instead of one per reader: a smaller largest working set
  (ResNet-18's block outputs), at the cost of one more tensor per such op. A request
  turns it on when the largest op would not fit otherwise
  (:func:`poetsim.request.resolve_request`).

Frozen parameters have no gradient, no optimizer state and no weight-gradient work
(:mod:`poetsim.graph.training`).

Every model also takes the precision options (:data:`PRECISION_OPTIONS`,
:mod:`poetsim.graph.precision`):

* ``int8=1``: Lin et al.'s int8 training graph (``mcu-training.md``: "int8 quantized
  graphs", frozen int8 weights read in place; each convolution with its batch norm and
  activation fused into one op, :func:`poetsim.zoo.layers.conv_bn_act`): weights and
  activations 1 byte, while
  gradients and optimizer state stay fp32 (4 bytes). The reference gives no gradient
  width; Quantization-Aware Scaling rescales gradients in floating point before the
  update, so fp32 is the conservative choice (narrow it with ``gradient_bytes``);
* ``weight_bytes``, ``activation_bytes``, ``gradient_bytes``: 1, 2 or 4 (int8, fp16,
  fp32; default 4) for parameters, forward outputs and workspaces, and gradients with
  the optimizer state. With ``int8=1``, ``gradient_bytes`` may still be given;
  ``weight_bytes`` and ``activation_bytes`` other than 1 contradict it and are refused.

The defaults (fp32 throughout) build byte-identical graphs to those before the widths
existed.

>>> from poetsim.zoo import build_model, model_options
>>> model_options("mlp")
{'batch_size': 1, 'input_dim': 784, 'width': 256, 'layers': 10, 'classes': 10}
>>> build_model("mlp", layers=2).name
'mlp'
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from poetsim.errors import InputError, UnknownNameError
from poetsim.graph.graph import TrainingGraph
from poetsim.graph.io import graph_fingerprint
from poetsim.graph.memory import minimum_ram_bytes
from poetsim.graph.precision import Precision
from poetsim.graph.streaming import WeightsOnStorage
from poetsim.graph.training import Training
from poetsim.memo import PerObject
from poetsim.zoo.dscnn import ds_cnn_m, ds_cnn_s
from poetsim.zoo.mcunet import MCUNET_IN1_SPARSE_UPDATE, mcunet_in1
from poetsim.zoo.mlp import mlp
from poetsim.zoo.mobilenet import MOBILENET_V2_W035_SPARSE_UPDATE, mobilenet_v2, mobilenet_v2_w035
from poetsim.zoo.resnet import resnet18, resnet18_cifar, resnet50
from poetsim.zoo.transformer import bert, transformer_block
from poetsim.zoo.vgg import vgg16, vgg16_cifar

__all__ = ["DEFAULT_MODEL", "MAX_ROW_BANDS", "PRECISION_OPTIONS", "TRAINING_OPTIONS",
           "build_model", "model_description", "model_names", "model_options",
           "precision_from_options", "row_bands_to_fit", "training_from_options",
           "zoo_options"]

#: The model the quick start and the demo use.
DEFAULT_MODEL = "resnet18_cifar"


@attrs.frozen
class _Model:
    builder: Callable[..., TrainingGraph]
    description: str
    #: Defaults of options whose builder default is ``None`` (derived from other options).
    derived_defaults: Mapping[str, int] = attrs.field(factory=dict)
    #: The published sparse-update scheme, if the model has one.
    sparse_update: Training | None = None


#: Training-mode options of every model and their defaults (everything trained).
TRAINING_OPTIONS: dict[str, int] = {"train_last": 0, "bias_only": 0, "sparse_update": 0,
                                    "inplace_update": 0, "gradient_sums": 0}

#: Precision options of every model and their defaults (fp32 throughout).
PRECISION_OPTIONS: dict[str, int] = {"int8": 0, "weight_bytes": 4, "activation_bytes": 4,
                                     "gradient_bytes": 4}

#: Byte widths the width options accept: int8, fp16, fp32.
OPTION_WIDTHS = (1, 2, 4)


_MODELS: dict[str, _Model] = {
    "mlp": _Model(mlp, "10-layer MLP of width 256 for MNIST (784 inputs, 10 classes)"),
    "vgg16_cifar": _Model(vgg16_cifar,
                          "VGG-16 without batch norm for CIFAR-10 (32x32x3, 10 classes)"),
    "vgg16": _Model(vgg16, "VGG-16 without batch norm for ImageNet (224x224x3, 1000 classes)"),
    "resnet18_cifar": _Model(resnet18_cifar, "ResNet-18 for CIFAR-10 (32x32x3, 10 classes)"),
    "resnet18": _Model(resnet18, "ResNet-18 for ImageNet (224x224x3, 1000 classes)"),
    "resnet50": _Model(resnet50, "ResNet-50 v1.5 for ImageNet (224x224x3, 1000 classes)"),
    "mobilenet_v2": _Model(mobilenet_v2,
                           "MobileNetV2 1.0 for ImageNet (224x224x3, 1000 classes)"),
    "mobilenet_v2_w035": _Model(mobilenet_v2_w035,
                                "MobileNetV2 0.35 for ImageNet at 128x128x3, 1000 classes "
                                "(MCU class: 1.66 M parameters, 20 M MACs; sparse_update=1 is "
                                "Lin et al.'s scheme)",
                                sparse_update=MOBILENET_V2_W035_SPARSE_UPDATE),
    "mcunet_in1": _Model(mcunet_in1,
                         "MCUNet-in1 (5fps) at 128x128x3, 1000 classes, as Lin et al. train "
                         "it on MCUs (0.64 M parameters; sparse_update=1 is their scheme)",
                         sparse_update=MCUNET_IN1_SPARSE_UPDATE),
    "ds_cnn_s": _Model(ds_cnn_s, "DS-CNN small keyword spotting (Hello Edge) on 49x10 MFCC, "
                                 "12 classes (23 k parameters, 2.7 M MACs)"),
    "ds_cnn_m": _Model(ds_cnn_m, "DS-CNN medium keyword spotting (Hello Edge) on 49x10 MFCC, "
                                 "12 classes (137 k parameters, 9.8 M MACs)"),
    "bert": _Model(bert, "BERT-base encoder, 12 blocks on an embedded 128x768 sequence, "
                         "2 classes (intermediate defaults to 4 x hidden)",
                   derived_defaults={"intermediate": 3072}),
    "transformer_block": _Model(transformer_block,
                                "one Transformer encoder block on a 64x128 sequence, 4 heads, "
                                "10 classes (intermediate defaults to 4 x hidden)",
                                derived_defaults={"intermediate": 512}),
}


def model_names() -> list[str]:
    """Names of the models of the zoo, sorted."""
    return sorted(_MODELS)


def _model(name: str) -> _Model:
    try:
        return _MODELS[name]
    except (KeyError, TypeError):
        raise UnknownNameError(
            f"unknown model {name!r}; known models: {', '.join(model_names())}") from None


def model_description(name: str) -> str:
    """One line describing the model with its default options."""
    return _model(name).description


def model_options(name: str) -> dict[str, int]:
    """The model's keyword options and their defaults (``batch_size`` included), then the
    training-mode options (:data:`TRAINING_OPTIONS`).

    An option whose default derives from others (a transformer's ``intermediate`` is
    4 x ``hidden`` unless given) is reported with its value at the other defaults.
    """
    model = _model(name)
    options: dict[str, int] = {}
    for param in inspect.signature(model.builder).parameters.values():
        if param.name in ("training", "precision"):
            continue
        default = param.default
        options[param.name] = model.derived_defaults[param.name] if default is None else default
    return {**options, **TRAINING_OPTIONS, **PRECISION_OPTIONS}


def training_from_options(name: str, train_last: int = 0, bias_only: int = 0,
                          sparse_update: int = 0, inplace_update: int = 0,
                          gradient_sums: int = 0) -> Training:
    """The training mode the training-mode options of model ``name`` ask for.

    Raises a one-line :class:`InputError` naming the option, its value and the rule.
    """
    for option, value in (("bias_only", bias_only), ("sparse_update", sparse_update),
                          ("inplace_update", inplace_update), ("gradient_sums", gradient_sums)):
        if value not in (0, 1):
            raise InputError(f"model {name}: option {option} = {value!r}: must be 0 or 1")
    training = _training_mode(name, train_last, bias_only, sparse_update)
    return attrs.evolve(training, inplace_update=training.inplace_update or bool(inplace_update),
                        gradient_sums=bool(gradient_sums))


def _training_mode(name: str, train_last: int, bias_only: int, sparse_update: int,
                   ) -> Training:
    if sparse_update:
        scheme = _model(name).sparse_update
        if scheme is None:
            having = [n for n in model_names() if _MODELS[n].sparse_update is not None]
            raise InputError(f"model {name}: option sparse_update = 1: this model has no "
                             f"published sparse-update scheme (models with one: "
                             f"{', '.join(having)})")
        if train_last or bias_only:
            raise InputError(f"model {name}: option sparse_update = 1: cannot be combined with "
                             "train_last or bias_only (the scheme sets both)")
        return scheme
    if bias_only:
        return Training("bias", last=train_last)
    return Training("last", last=train_last) if train_last else Training()


def precision_from_options(name: str, given: dict[str, int]) -> Precision:
    """The byte widths the precision options ``given`` (only those the user set) of model
    ``name`` ask for (see the module docstring).

    Raises a one-line :class:`InputError` naming the option, its value and the rule.
    """
    int8 = given.get("int8", 0)
    if int8 not in (0, 1):
        raise InputError(f"model {name}: option int8 = {int8!r}: must be 0 or 1")
    for option in ("weight_bytes", "activation_bytes", "gradient_bytes"):
        if option in given and given[option] not in OPTION_WIDTHS:
            raise InputError(f"model {name}: option {option} = {given[option]!r}: must be 1, 2 "
                             "or 4 (bytes per element: int8, fp16, fp32)")
    if int8:
        for option in ("weight_bytes", "activation_bytes"):
            if given.get(option, 1) != 1:
                raise InputError(f"model {name}: option {option} = {given[option]!r}: "
                                 "contradicts int8 = 1 (int8 weights and activations); "
                                 "leave it out or set int8 = 0")
        return Precision(1, 1, given.get("gradient_bytes", 4))
    return Precision(given.get("weight_bytes", 4), given.get("activation_bytes", 4),
                     given.get("gradient_bytes", 4))


#: The largest value of any model option (layers, widths, sizes, counts): far beyond every
#: published model, and small enough that a graph built from it fits in memory (100,000
#: MLP layers are 400,001 ops).
_OPTION_MAX = 100_000

#: Model options that may be 0: switches (``head``) and ``row_bands`` (0: no tiling).
_ZERO_OPTIONS = frozenset({"head", "row_bands"})


def _as_int(name: str, option: str, value: Any, minimum: int) -> int:
    """``value`` as an int of at least ``minimum``; integral floats and decimal strings are
    accepted."""
    number: int | None = None
    if isinstance(value, bool):
        number = None
    elif isinstance(value, int):
        number = value
    elif isinstance(value, float) and value.is_integer():
        number = int(value)
    elif isinstance(value, str):
        try:
            number = int(value.strip())
        except ValueError:
            number = None
    if number is None or not (minimum <= number <= _OPTION_MAX):
        rule = (f"must be a positive integer up to {_OPTION_MAX}" if minimum == 1
                else f"must be a whole number in [{minimum}, {_OPTION_MAX}]")
        raise InputError(f"model {name}: option {option} = {value!r}: {rule}")
    return number


def build_model(name: str, **options: Any) -> TrainingGraph:
    """Build the training graph of model ``name``; options not given take their defaults.

    Raises :class:`~poetsim.errors.UnknownNameError` for an unknown model and
    :class:`~poetsim.errors.InputError` for an unknown option, a value that is not a
    positive integer (a whole number >= 0 for the training-mode options), or inconsistent
    values (e.g. ``hidden`` not divisible by ``heads``, ``train_last`` above the model's
    layers). The graph is named ``name`` and its metadata records the model and all its
    options.
    """
    model = _model(name)
    known = model_options(name)
    checked: dict[str, int] = {}
    modes: dict[str, int] = dict(TRAINING_OPTIONS)
    widths: dict[str, int] = {}
    for option, value in options.items():
        if option not in known:
            raise InputError(f"model {name}: unknown option {option!r} = {value!r}; "
                             f"options: {', '.join(known)}")
        if option in TRAINING_OPTIONS:
            modes[option] = _as_int(name, option, value, 0)
        elif option in PRECISION_OPTIONS:
            widths[option] = _as_int(name, option, value, 0)
        else:
            checked[option] = _as_int(name, option, value,
                                      0 if option in _ZERO_OPTIONS else 1)
    training = training_from_options(name, **modes)
    precision = precision_from_options(name, widths)
    try:
        graph = model.builder(**checked, training=None if training.is_default else training,
                              precision=precision)
    except InputError as error:  # inconsistent options: say which model
        raise type(error)(f"model {name}: {error}") from None
    extra: dict[str, Any] = {**modes, "int8": widths.get("int8", 0)}
    if not training.is_full:
        extra["training_mode"] = training.mode
    built = graph.with_metadata(extra)
    _BUILT(built, lambda _graph: True)
    return built


#: The graphs :func:`build_model` made in this process (immutable, so still the zoo's):
#: :func:`zoo_options` need not build them again to know them (seconds on a long chain).
_BUILT: PerObject[bool] = PerObject()


#: The most row bands :func:`row_bands_to_fit` tries.
MAX_ROW_BANDS = 32


def row_bands_to_fit(name: str, options: Mapping[str, Any], activation_bytes: int) -> int:
    """The fewest row bands (``row_bands``, :mod:`poetsim.graph.tiling`) with which no op
    of model ``name`` under ``options`` needs more than ``activation_bytes`` on its own;
    0 when none are needed, or when tiling cannot make it fit (the model has no
    ``row_bands`` option, its front cannot be tiled, or the largest working set is
    outside the tiled front at any band count): the untiled model's refusal then names
    the op.
    """
    if "row_bands" not in model_options(name) or options.get("row_bands"):
        return 0
    if minimum_ram_bytes(build_model(name, **options))[0] <= activation_bytes:
        return 0
    for bands in range(2, MAX_ROW_BANDS + 1):
        try:
            graph = build_model(name, **{**options, "row_bands": bands})
        except InputError:  # nothing to tile at this band count
            return 0
        need, op = minimum_ram_bytes(graph)
        if need <= activation_bytes:
            return bands
        if ".band" not in op:  # more bands cannot shrink an op outside the front
            return 0
    return 0


def zoo_options(graph: TrainingGraph) -> dict[str, int] | None:
    """The options (those that differ from the defaults) with which the zoo builds
    exactly ``graph``, or None when it is no zoo model's graph: its metadata names no
    model of the zoo, or that model built with those options differs (a graph file with
    measured costs, or edited)."""
    name = graph.metadata.get("model")
    if not isinstance(name, str) or name not in _MODELS:
        return None
    defaults = model_options(name)
    options = {k: graph.metadata[k] for k in defaults
               if k in graph.metadata and graph.metadata[k] != defaults[k]}
    if _BUILT.known(graph):
        return options
    try:
        rebuilt = build_model(name, **options)
    except InputError:
        return None
    on_storage = WeightsOnStorage.of(graph)  # the request's placement, not an option
    if on_storage:
        rebuilt = on_storage.graph(rebuilt)
    return options if graph_fingerprint(rebuilt) == graph_fingerprint(graph) else None
