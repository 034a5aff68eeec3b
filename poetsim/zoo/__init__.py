"""The model zoo: analytic training graphs of common networks.

Each model is built by hand from its layer hyper-parameters (shapes, FLOPs, parameters
and workspace; see :mod:`poetsim.zoo.layers` for the cost conventions) as a
:class:`~poetsim.graph.autograd.ForwardGraph`, whose backward ops are derived the way
autograd does. Every model takes integer keyword options, ``batch_size`` among them.

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
from poetsim.zoo.mlp import mlp
from poetsim.zoo.mobilenet import mobilenet_v2
from poetsim.zoo.resnet import resnet18, resnet18_cifar, resnet50
from poetsim.zoo.transformer import bert, transformer_block
from poetsim.zoo.vgg import vgg16, vgg16_cifar

__all__ = ["DEFAULT_MODEL", "build_model", "model_description", "model_names",
           "model_options"]

#: The model the quick start and the demo use.
DEFAULT_MODEL = "resnet18_cifar"


@attrs.frozen
class _Model:
    builder: Callable[..., TrainingGraph]
    description: str
    #: Defaults of options whose builder default is ``None`` (derived from other options).
    derived_defaults: Mapping[str, int] = attrs.field(factory=dict)


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
    """The model's keyword options and their defaults (``batch_size`` included).

    An option whose default derives from others (a transformer's ``intermediate`` is
    4 x ``hidden`` unless given) is reported with its value at the other defaults.
    """
    model = _model(name)
    options: dict[str, int] = {}
    for param in inspect.signature(model.builder).parameters.values():
        default = param.default
        options[param.name] = model.derived_defaults[param.name] if default is None else default
    return options


def _as_positive_int(name: str, option: str, value: Any) -> int:
    """``value`` as a positive int; integral floats and decimal strings are accepted."""
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
    if number is None or number < 1:
        raise InputError(f"model {name}: option {option} = {value!r}: "
                         "must be a positive integer")
    return number


def build_model(name: str, **options: Any) -> TrainingGraph:
    """Build the training graph of model ``name``; options not given take their defaults.

    Raises :class:`~poetsim.errors.UnknownNameError` for an unknown model and
    :class:`~poetsim.errors.InputError` for an unknown option, a value that is not a
    positive integer, or inconsistent values (e.g. ``hidden`` not divisible by ``heads``).
    The graph is named ``name`` and its metadata records the model and all its options.
    """
    model = _model(name)
    known = model_options(name)
    checked: dict[str, int] = {}
    for option, value in options.items():
        if option not in known:
            raise InputError(f"model {name}: unknown option {option!r} = {value!r}; "
                             f"options: {', '.join(known)}")
        checked[option] = _as_positive_int(name, option, value)
    try:
        return model.builder(**checked)
    except InputError as error:  # inconsistent options: say which model
        raise type(error)(f"model {name}: {error}") from None
