"""Small PyTorch models for the torch import and execution tests (written with torch.nn).

Each factory seeds torch and returns a fresh module in training mode; ``*_inputs()`` give
matching example batches. Module names follow the zoo's op names where a zoo model exists
(``fc1``/``relu1`` for the MLP, ``layer1.0.conv1`` for ResNet-18).
"""

from __future__ import annotations

import math
from collections import OrderedDict

import torch
from torch import nn
from torch.nn import functional as F


class MLP(nn.Module):
    """The zoo's MLP: ``layers`` linear layers with ReLU between them."""

    def __init__(self, input_dim: int = 784, width: int = 256, layers: int = 10,
                 classes: int = 10) -> None:
        super().__init__()
        dims = [input_dim] + [width] * (layers - 1)
        for i in range(1, layers):
            setattr(self, f"fc{i}", nn.Linear(dims[i - 1], width))
            setattr(self, f"relu{i}", nn.ReLU())
        setattr(self, f"fc{layers}", nn.Linear(dims[-1], classes))
        self.layers = layers

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        x = input
        for i in range(1, self.layers):
            x = getattr(self, f"relu{i}")(getattr(self, f"fc{i}")(x))
        return getattr(self, f"fc{self.layers}")(x)


class BasicBlock(nn.Module):
    """conv3x3-bn-relu-conv3x3-bn plus the shortcut, then ReLU (zoo op names)."""

    def __init__(self, cin: int, channels: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, channels, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.relu1 = nn.ReLU()
        self.conv2 = nn.Conv2d(channels, channels, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)
        self.shortcut = None
        if stride != 1 or cin != channels:
            self.shortcut = nn.Sequential(OrderedDict(
                conv=nn.Conv2d(cin, channels, 1, stride, 0, bias=False),
                bn=nn.BatchNorm2d(channels)))
        self.relu2 = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.bn2(self.conv2(self.relu1(self.bn1(self.conv1(x)))))
        h = h + (x if self.shortcut is None else self.shortcut(x))
        return self.relu2(h)


class ResNet18Cifar(nn.Module):
    """ResNet-18 for 32x32 images (Kuang Liu's pytorch-cifar), as ``zoo.resnet18_cifar``."""

    def __init__(self, classes: int = 10, width: int = 64) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, width, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU()
        cin = width
        for s, mult in enumerate((1, 2, 4, 8), start=1):
            blocks = []
            for b in range(2):
                stride = 2 if s > 1 and b == 0 else 1
                blocks.append(BasicBlock(cin, width * mult, stride))
                cin = width * mult
            setattr(self, f"layer{s}", nn.Sequential(*blocks))
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.relu(self.bn1(self.conv1(x)))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


class SmallResCNN(nn.Module):
    """A tiny CNN with one residual connection, max pooling and a classifier."""

    def __init__(self, channels: int = 4, classes: int = 3) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.relu1 = nn.ReLU()
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(channels)
        self.relu2 = nn.ReLU()
        self.pool = nn.MaxPool2d(2)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(channels, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.relu1(self.bn1(self.conv1(x)))
        h = self.relu2(self.bn2(self.conv2(h)) + h)
        h = self.avgpool(self.pool(h))
        return self.fc(h.flatten(1))


class InPlaceResCNN(SmallResCNN):
    """``SmallResCNN`` written as torchvision writes ResNets: ``nn.ReLU(inplace=True)``
    and the residual added in place (``h += x``)."""

    def __init__(self, channels: int = 4, classes: int = 3) -> None:
        super().__init__(channels, classes)
        self.relu1 = nn.ReLU(inplace=True)
        self.relu2 = nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.relu1(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(h))
        out += h
        h = self.relu2(out)
        h = self.avgpool(self.pool(h))
        return self.fc(h.flatten(1))


class TransformerBlock(nn.Module):
    """One post-LayerNorm encoder block with a classifier on the first token."""

    def __init__(self, hidden: int = 8, heads: int = 2, intermediate: int = 16,
                 classes: int = 3) -> None:
        super().__init__()
        self.heads = heads
        self.query = nn.Linear(hidden, hidden)
        self.key = nn.Linear(hidden, hidden)
        self.value = nn.Linear(hidden, hidden)
        self.output = nn.Linear(hidden, hidden)
        self.ln1 = nn.LayerNorm(hidden)
        self.fc1 = nn.Linear(hidden, intermediate)
        self.gelu = nn.GELU()
        self.fc2 = nn.Linear(intermediate, hidden)
        self.ln2 = nn.LayerNorm(hidden)
        self.classifier = nn.Linear(hidden, classes)

    def _split(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        return x.view(b, s, self.heads, d // self.heads).transpose(1, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self._split(self.query(x)), self._split(self.key(x)), self._split(self.value(x))
        scores = q @ k.transpose(-2, -1) / math.sqrt(d // self.heads)
        context = F.softmax(scores, dim=-1) @ v
        a = self.output(context.transpose(1, 2).reshape(b, s, d))
        x = self.ln1(a + x)
        x = self.ln2(self.fc2(self.gelu(self.fc1(x))) + x)
        return self.classifier(x[:, 0])


class BertClassifier(nn.Module):
    """A Hugging Face BERT encoder (random weights) with a linear head on [CLS]."""

    def __init__(self, config) -> None:
        super().__init__()
        from transformers import BertModel

        self.bert = BertModel(config, add_pooling_layer=False)
        self.classifier = nn.Linear(config.hidden_size, 2)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        h = self.bert(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        return self.classifier(h[:, 0])


class Unsupported(nn.Module):
    """Uses an op poetsim has no rule for (an element-wise sine) inside ``body.act``."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.body = nn.Module()
        self.body.act = _Sine()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body.act(self.fc(x))


class _Sine(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sin(x)


# ----------------------------------------------------------------------------- factories


def mlp() -> nn.Module:
    torch.manual_seed(0)
    return MLP(input_dim=32, width=16, layers=3, classes=4).train()


def mlp_inputs() -> tuple[torch.Tensor]:
    return (torch.randn(2, 32, generator=torch.Generator().manual_seed(1)),)


def frozen_mlp() -> nn.Module:
    """The MLP with ``fc1`` frozen and ``fc2``'s weight frozen (its bias trained)."""
    model = mlp()
    for name, param in model.named_parameters():
        if name.startswith("fc1.") or name == "fc2.weight":
            param.requires_grad_(False)
    return model


def resnet18_cifar() -> nn.Module:
    torch.manual_seed(0)
    return ResNet18Cifar().train()


def small_cnn() -> nn.Module:
    torch.manual_seed(0)
    return SmallResCNN().train()


def inplace_cnn() -> nn.Module:
    torch.manual_seed(0)
    return InPlaceResCNN().train()


def small_cnn_inputs() -> tuple[torch.Tensor]:
    return (torch.randn(2, 3, 8, 8, generator=torch.Generator().manual_seed(1)),)


def transformer_block() -> nn.Module:
    torch.manual_seed(0)
    return TransformerBlock().train()


def transformer_inputs() -> tuple[torch.Tensor]:
    return (torch.randn(2, 4, 8, generator=torch.Generator().manual_seed(1)),)


def bert_tiny() -> nn.Module:
    from transformers import BertConfig

    torch.manual_seed(0)
    config = BertConfig(vocab_size=64, hidden_size=16, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=32,
                        max_position_embeddings=16, hidden_dropout_prob=0.0,
                        attention_probs_dropout_prob=0.0, attn_implementation="eager")
    return BertClassifier(config).train()


def bert_inputs() -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(0, 64, (2, 8), generator=gen)
    mask = torch.ones(2, 8, dtype=torch.long)
    mask[1, 6:] = 0
    return ids, mask


def unsupported() -> nn.Module:
    torch.manual_seed(0)
    return Unsupported().train()


# ----------------------------------------------------------------------------- schedules


def remat_and_page_schedule(graph, page: set[str], remat: set[str]):
    """A valid schedule that pages the forward tensors in ``page`` and recomputes those in
    ``remat`` (and whatever their recomputation needs) before the backward pass.

    Ops run in graph order. A tensor is freed as soon as no later op reads it; a tensor of
    ``page`` or ``remat`` already after its last forward reader. Before an op runs, each
    input that is not resident is paged in if it has a copy on storage, else recomputed
    (recursively).
    """
    from poetsim.graph import Phase
    from poetsim.graph.streaming import weight_steps
    from poetsim.schedule import Action, Schedule, Step
    from poetsim.schedule.ops import with_weight_steps

    names = [op.name for op in graph.ops]
    loss = graph.loss_index
    steps: list[Step] = []
    resident: set[int] = set()
    stored: set[int] = set()
    chosen = {names.index(n) for n in page | remat}

    def ensure(p: int, now: int) -> None:
        if p in resident:
            return
        if p in stored:
            steps.append(Step(Action.PAGE_IN, p))
        else:
            for q in graph.predecessors(p):
                ensure(q, now)
            steps.append(Step(Action.COMPUTE, p))
        resident.add(p)

    for i, op in enumerate(graph.ops):
        for p in graph.predecessors(i):
            ensure(p, i)
        steps.append(Step(Action.COMPUTE, i))
        resident.add(i)
        if op.name in page:
            steps.append(Step(Action.PAGE_OUT, i))
            stored.add(i)
        for t in sorted(resident):
            later = [s for s in graph.successors(t) if s > i]
            forward_later = [s for s in later if graph.ops[s].phase is not Phase.BACKWARD]
            if not later or (i < loss and t in chosen and not forward_later and t != i):
                steps.append(Step(Action.FREE, t))
                resident.discard(t)
    # an op that reads or writes weights on storage is bracketed by its weight steps
    return Schedule.for_graph(graph, with_weight_steps(steps, *weight_steps(graph)),
                              {"method": "hand-built remat and paging"})


def with_recomputed(schedule, graph, name: str):
    """``schedule`` with op ``name`` freed and computed again right after its first
    computation (its inputs are still resident there)."""
    from poetsim.schedule import Action, Schedule, Step

    k = graph.index(name)
    i = next(i for i, s in enumerate(schedule.steps) if s.action is Action.COMPUTE and s.op == k)
    steps = [*schedule.steps[:i + 1], Step(Action.FREE, k), Step(Action.COMPUTE, k),
             *schedule.steps[i + 1:]]
    return Schedule.for_graph(graph, steps, {"method": f"hand-built, {name} recomputed"})
