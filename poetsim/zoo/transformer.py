"""Transformer encoders: BERT and a single small encoder block.

The input is the already-embedded sequence (``seq_len x hidden``): token, position and
segment embeddings are not modelled and their parameters are not counted. Each encoder
block ``block{i}`` (post-LayerNorm, as BERT) is

* ``block{i}.attn.query`` / ``.key`` / ``.value`` (linear hidden -> hidden each),
  ``block{i}.attn.scores`` (Q K^T per head, the 1/sqrt(d) scale folded in),
  ``block{i}.attn.softmax``, ``block{i}.attn.context`` (probabilities x V),
  ``block{i}.attn.output`` (linear), ``block{i}.attn.add`` (residual),
  ``block{i}.attn.layernorm``;
* ``block{i}.ffn.fc1`` (hidden -> intermediate), ``block{i}.ffn.gelu``, ``block{i}.ffn.fc2``
  (intermediate -> hidden), ``block{i}.ffn.add`` (residual), ``block{i}.ffn.layernorm``.

Head: ``classifier``, a linear layer hidden -> ``classes`` on the first ([CLS]) token of
the last block's output. BERT's pooler (a linear hidden -> hidden followed by tanh) is
left out: poetsim has no tanh op, and leaving it out keeps the parameter count equal to
the encoder's plus the small classifier. Selecting the [CLS] token is a view, so the
classifier reads (and its backward keeps) the whole last-block output tensor.
Dropout is omitted.
"""

from __future__ import annotations

from poetsim.graph.autograd import ForwardGraph
from poetsim.graph.graph import TrainingGraph
from poetsim.graph.precision import Precision
from poetsim.graph.training import Training
from poetsim.zoo import layers as L

__all__ = ["bert", "encoder_block", "transformer_block"]


def encoder_block(fg: ForwardGraph, prefix: str, x: L.Tensor, heads: int,
                  intermediate: int) -> L.Tensor:
    """One post-LayerNorm encoder block on ``(seq_len, hidden)``."""
    a = L.attention(fg, f"{prefix}.attn", x, heads)
    x = L.layernorm(fg, f"{prefix}.attn.layernorm", L.add(fg, f"{prefix}.attn.add", a, x))
    h = L.linear(fg, f"{prefix}.ffn.fc1", x, intermediate)
    h = L.linear(fg, f"{prefix}.ffn.fc2", L.gelu(fg, f"{prefix}.ffn.gelu", h), x.shape[-1])
    return L.layernorm(fg, f"{prefix}.ffn.layernorm", L.add(fg, f"{prefix}.ffn.add", h, x))


def _encoder(name: str, *, batch_size: int, blocks: int, seq_len: int, hidden: int,
             heads: int, intermediate: int | None, classes: int,
             blocks_option: bool = True, training: Training | None = None,
             precision: Precision | None = None) -> TrainingGraph:
    L.check_option(hidden % heads == 0, "heads", heads, f"must divide hidden = {hidden}")
    if intermediate is None:
        intermediate = 4 * hidden
    options = {"blocks": blocks} if blocks_option else {}
    fg = L.new_graph(name, batch_size, training=training,
                     precision=precision, **options, seq_len=seq_len, hidden=hidden,
                     heads=heads, intermediate=intermediate, classes=classes)
    x = L.Tensor(fg.input("input", seq_len * hidden), (seq_len, hidden))
    for i in range(1, blocks + 1):
        x = encoder_block(fg, f"block{i}", x, heads, intermediate)
    logits = L.linear(fg, "classifier", x, classes, tokens=1)
    fg.loss("loss", logits.name)
    return fg.build()


def bert(*, batch_size: int = 1, blocks: int = 12, seq_len: int = 128, hidden: int = 768,
         heads: int = 12, intermediate: int | None = None, classes: int = 2,
         training: Training | None = None,
         precision: Precision | None = None) -> TrainingGraph:
    """A BERT encoder (BERT-base by default) with a sequence classifier.

    ``intermediate`` defaults to ``4 * hidden``. BERT-base's 12 blocks have 85.05 M
    parameters (7.09 M each); the classifier adds ``hidden * classes + classes``.
    """
    return _encoder("bert", batch_size=batch_size, blocks=blocks, seq_len=seq_len,
                    hidden=hidden, heads=heads, intermediate=intermediate, classes=classes,
                    training=training, precision=precision)


def transformer_block(*, batch_size: int = 1, seq_len: int = 64, hidden: int = 128,
                      heads: int = 4, intermediate: int | None = None,
                      classes: int = 10, training: Training | None = None,
                      precision: Precision | None = None) -> TrainingGraph:
    """One small encoder block (the BERT block) with a classifier on the first token.

    ``intermediate`` defaults to ``4 * hidden``.
    """
    return _encoder("transformer_block", batch_size=batch_size, blocks=1, seq_len=seq_len,
                    hidden=hidden, heads=heads, intermediate=intermediate, classes=classes,
                    blocks_option=False, training=training, precision=precision)
