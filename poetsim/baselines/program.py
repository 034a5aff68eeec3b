"""Building op lists that follow the contract, and the graph facts the baselines share.

* :class:`Program`: appends COMPUTE / PAGE_OUT / PAGE_IN / FREE steps while tracking the
  resident and storage sets exactly as :mod:`poetsim.schedule.ops` defines them, and
  refuses (``AssertionError``) any step the contract forbids. It records the activation
  peak and what was resident at it.
* :func:`run_policy`: executes the graph in its op order under a per-tensor policy
  (keep / offload / drop) and rematerializes or pages in on demand: the common executor of
  Chen, Capuchin and POFO.
* :func:`chain_order`, :func:`checkpoint_candidates`: chain detection and the articulation
  points of the forward graph.
"""

from __future__ import annotations

from collections.abc import Sequence

from poetsim.baselines.base import Ticker
from poetsim.graph.graph import TrainingGraph
from poetsim.graph.ops import Phase
from poetsim.schedule import Action, Step

__all__ = ["DROP", "KEEP", "OFFLOAD", "POLICIES", "Program", "backward_op_of", "chain_order",
           "checkpoint_candidates", "forward_indices", "run_policy", "saved_tensors"]

KEEP = "keep"
OFFLOAD = "offload"
DROP = "drop"
POLICIES = (KEEP, OFFLOAD, DROP)


class Program:
    """An op list under construction, checked step by step against the contract.

    ``stage`` of each step is the *frontier*: the highest op index computed for the first
    time so far, so stages never decrease. With a ``ticker``
    (:class:`~poetsim.baselines.base.Ticker`), every step counts as a unit of work: building
    the program raises :class:`~poetsim.baselines.base.OutOfTime` once its ``stop_at`` has
    passed.
    """

    def __init__(self, graph: TrainingGraph, ticker: Ticker | None = None) -> None:
        self.graph = graph
        n = len(graph)
        self.n = n
        self.size = [op.output_bytes for op in graph.ops]
        self.workspace = [op.workspace_bytes for op in graph.ops]
        self.resident = [False] * n
        self.stored = [False] * n
        self.computed = [False] * n
        self.in_ram: set[int] = set()
        self.live = 0
        self.peak = 0
        self.peak_stage = 0
        self.peak_op = -1
        self.peak_step = -1
        self._peak_resident: frozenset[int] | None = frozenset()
        self.frontier = 0
        # (action, op, stage) of every step; the Step objects are made when ``steps`` is
        # first read: a search that only looks at the peak of most of the programs it
        # builds does not pay for them
        self._raw: list[tuple[Action, int, int]] = []
        self._steps: list[Step] = []
        self._tick = ticker.tick if ticker is not None and ticker.stop_at is not None else None

    # ------------------------------------------------------------------ steps

    def _note(self, amount: int, op: int) -> None:
        if amount > self.peak:
            self.peak = amount
            self.peak_stage = self.frontier
            self.peak_op = op
            self.peak_step = len(self._raw) - 1
            self._peak_resident = None  # rebuilt on demand: a copy per new peak is quadratic

    def compute(self, k: int) -> None:
        for u in self.graph.predecessors(k):
            assert self.resident[u], f"compute {k}: input {u} not resident"
        assert not self.resident[k], f"compute {k}: already resident"
        if self._tick is not None:
            self._tick()
        if not self.computed[k]:
            self.frontier = max(self.frontier, k)
        self._raw.append((Action.COMPUTE, k, self.frontier))
        self._note(self.live + self.size[k] + self.workspace[k], k)
        self.resident[k] = True
        self.in_ram.add(k)
        self.live += self.size[k]
        self.computed[k] = True

    def page_out(self, k: int) -> None:
        assert self.resident[k] and not self.stored[k], f"page_out {k}"
        self._raw.append((Action.PAGE_OUT, k, self.frontier))
        self.stored[k] = True

    def page_in(self, k: int) -> None:
        assert self.stored[k] and not self.resident[k], f"page_in {k}"
        if self._tick is not None:
            self._tick()
        self._raw.append((Action.PAGE_IN, k, self.frontier))
        self.resident[k] = True
        self.in_ram.add(k)
        self.live += self.size[k]
        self._note(self.live, k)

    def free(self, k: int) -> None:
        assert self.resident[k], f"free {k}: not resident"
        self._raw.append((Action.FREE, k, self.frontier))
        self.resident[k] = False
        self.in_ram.discard(k)
        self.live -= self.size[k]

    # ------------------------------------------------------------------ queries

    @property
    def steps(self) -> list[Step]:
        """The op list so far."""
        if len(self._steps) < len(self._raw):
            self._steps.extend(Step(action, k, stage)
                               for action, k, stage in self._raw[len(self._steps):])
        return self._steps

    def __len__(self) -> int:
        """The number of steps so far."""
        return len(self._raw)

    @property
    def peak_resident(self) -> frozenset[int]:
        """The tensors in RAM at the peak (for a COMPUTE step: before its output exists).

        Replayed from the steps when asked for, not copied at every new peak: on a long
        chain the peak grows with every forward op and the copies would cost O(n^2).
        """
        if self._peak_resident is None:
            if self._tick is not None:
                self._tick(self.peak_step // 4)
            in_ram: set[int] = set()
            for action, k, _ in self._raw[:self.peak_step]:
                if action is Action.FREE:
                    in_ram.discard(k)
                elif action is not Action.PAGE_OUT:
                    in_ram.add(k)
            action, k, _ = self._raw[self.peak_step]
            if action is Action.PAGE_IN:
                in_ram.add(k)
            self._peak_resident = frozenset(in_ram)
        return self._peak_resident

    @property
    def recomputations(self) -> int:
        return sum(1 for s in self._raw if s[0] is Action.COMPUTE) - sum(self.computed)

    def compute_sum(self, values: Sequence[float]) -> float:
        """``values[op]`` summed over the COMPUTE steps, in step order (say, their energy)."""
        return float(sum(values[k] for action, k, _ in self._raw if action is Action.COMPUTE))


def forward_indices(graph: TrainingGraph) -> list[int]:
    """Forward ops and the loss (all of them come before every backward op)."""
    return [i for i, op in enumerate(graph.ops) if op.phase is not Phase.BACKWARD]


def saved_tensors(graph: TrainingGraph) -> set[int]:
    """Forward tensors that some backward op reads (the ones worth keeping or paging)."""
    ops = graph.ops
    return {i for i in forward_indices(graph)
            if any(ops[s].phase is Phase.BACKWARD for s in graph.successors(i))}


def backward_op_of(graph: TrainingGraph) -> dict[int, int]:
    """Forward (or loss) op index -> index of its backward op, where it has one."""
    result: dict[int, int] = {}
    for j, op in enumerate(graph.ops):
        if op.forward_of is not None:
            result[graph.index(op.forward_of)] = j
    return result


def chain_order(graph: TrainingGraph) -> tuple[list[int] | None, str]:
    """The forward ops as a chain ``x0 -> x1 -> ... -> loss``, or None and the reason.

    A chain: one source, and every forward op reads at most one forward op and feeds at
    most one (its backward readers aside).
    """
    ops = graph.ops
    fwd = forward_indices(graph)
    is_fwd = set(fwd)
    for i in fwd:
        feeds = [s for s in graph.successors(i) if s in is_fwd]
        if len(feeds) > 1:
            return None, (f"chains only: {graph.name} has residual or branching connections "
                          f"(forward op {ops[i].name!r} feeds {len(feeds)} forward ops)")
        reads = graph.predecessors(i)
        if len(reads) > 1:
            return None, (f"chains only: {graph.name} has residual or merging connections "
                          f"(forward op {ops[i].name!r} reads {len(reads)} forward ops)")
    sources = [i for i in fwd if not graph.predecessors(i)]
    if len(sources) != 1:
        return None, f"chains only: {graph.name} has {len(sources)} inputs"
    order = [sources[0]]
    while True:
        nxt = [s for s in graph.successors(order[-1]) if s in is_fwd]
        if not nxt:
            break
        order.append(nxt[0])
    if len(order) != len(fwd):
        return None, f"chains only: the forward ops of {graph.name} do not form one path"
    return order, ""


def checkpoint_candidates(graph: TrainingGraph) -> list[int]:
    """Articulation points of the forward graph: forward ops no forward edge jumps over.

    Forward ops come first in the (topological) op order, so ``v`` separates the forward
    graph (every input-to-loss path goes through it) exactly when no forward edge
    ``(a, b)`` has ``a < v < b``. This is Checkmate's ``articulation_points`` (the undirected
    cut vertices once a virtual source and sink are added). The loss is excluded (the
    backward pass reads it at once). On a chain every other forward op qualifies.
    """
    fwd = forward_indices(graph)
    if not fwd:
        return []
    last = fwd[-1]
    cover = [0] * (last + 2)
    for a in fwd:
        for b in graph.successors(a):
            if b <= last and b > a + 1:
                cover[a + 1] += 1
                cover[b] -= 1
    spanned, running = set(), 0
    for v in range(last + 1):
        running += cover[v]
        if running > 0:
            spanned.add(v)
    loss = graph.loss_index
    return [v for v in fwd if v not in spanned and v != loss]


def _hold_until(graph: TrainingGraph, policy: Sequence[str], fwd: list[bool],
                last_use: list[int], hold_checkpoints: bool) -> list[int]:
    """The op after which each tensor may go: its last reader, and for a kept tensor (with
    ``hold_checkpoints``) also the last reader of whatever dropped tensors downstream of it
    (through dropped tensors only) may be recomputed from it: a checkpoint that no backward
    op reads (the output of an addition) must still outlive its segment."""
    hold = list(last_use)
    reach = [-1] * len(graph)
    for u in reversed(range(len(graph))):
        if not fwd[u]:
            continue
        for s in graph.successors(u):
            if fwd[s] and policy[s] == DROP:
                reach[u] = max(reach[u], last_use[s], reach[s])
        if policy[u] == KEEP and hold_checkpoints:
            hold[u] = max(hold[u], reach[u])
    return hold


class _PolicyRun:
    """:func:`run_policy`'s executor: the program and the per-tensor facts its steps read
    (shared by the rebuilding and the main loop, hence a class)."""

    def __init__(self, graph: TrainingGraph, policy: Sequence[str], keep_rebuilt_ancestors: bool,
                 hold_checkpoints: bool, ticker: Ticker | None) -> None:
        n = len(graph)
        self.graph = graph
        self.policy = policy
        self.keep_rebuilt_ancestors = keep_rebuilt_ancestors
        self.prog = Program(graph, ticker)
        self.fwd = [op.phase is not Phase.BACKWARD for op in graph.ops]
        last_use = [max(graph.successors(i), default=i) for i in range(n)]
        self.last_fwd_use = [max((s for s in graph.successors(i) if self.fwd[s]), default=i)
                             for i in range(n)]
        self.hold = _hold_until(graph, policy, self.fwd, last_use, hold_checkpoints)
        self.fresh = [False] * n
        # Inputs of the ops being rebuilt right now: never freed under them (in a diamond,
        # rebuilding one input must not free another).
        self.pinned = [0] * n

    def rebuilt(self, u: int, p: int) -> None:
        """After rebuilding ``u`` for op ``p``: unpin its inputs, free those not needed."""
        graph, prog, pinned = self.graph, self.prog, self.pinned
        preds = graph.predecessors(u)
        for w in preds:
            pinned[w] -= 1
        for w in preds:
            if not prog.resident[w] or pinned[w]:
                continue
            if self.hold[w] < p or (not self.keep_rebuilt_ancestors
                                    and self.policy[w] != KEEP
                                    and p not in graph.successors(w)):
                prog.free(w)

    def ensure(self, root: int, p: int) -> None:
        """Make ``root`` resident for op ``p``: page it in, or recompute it after making its
        inputs resident the same way, depth first. An explicit stack (op, next input to
        visit; -1 before the op is looked at) instead of recursion, so chains of any
        length work."""
        graph, prog = self.graph, self.prog
        stack = [(root, -1)]
        while stack:
            u, next_input = stack[-1]
            if next_input < 0:
                if prog.resident[u]:
                    stack.pop()
                    continue
                if prog.stored[u]:
                    prog.page_in(u)
                    stack.pop()
                    continue
                for w in graph.predecessors(u):
                    self.pinned[w] += 1
                next_input = 0
            preds = graph.predecessors(u)
            if next_input < len(preds):
                stack[-1] = (u, next_input + 1)
                stack.append((preds[next_input], -1))
                continue
            stack.pop()
            prog.compute(u)
            self.rebuilt(u, p)

    def step(self, p: int) -> None:
        """Run op ``p``: bring its inputs back, compute it (paging it out if offloaded),
        then free what it was the last to need."""
        graph, prog, pinned = self.graph, self.prog, self.pinned
        preds = graph.predecessors(p)
        for u in preds:
            pinned[u] += 1
        for u in preds:
            self.ensure(u, p)
        for u in preds:
            pinned[u] -= 1
        prog.compute(p)
        self.fresh[p] = True
        if self.fwd[p] and self.policy[p] == OFFLOAD and prog.size[p] > 0:
            prog.page_out(p)
        self.free_after(p)

    def free_after(self, p: int) -> None:
        """Free the inputs of op ``p`` and its output once held long enough; a dropped or
        offloaded forward tensor as soon as its forward readers are done."""
        fwd, fresh, prog = self.fwd, self.fresh, self.prog
        for u in (*self.graph.predecessors(p), p):
            if not prog.resident[u]:
                continue
            if self.hold[u] <= p or (fwd[u] and self.policy[u] != KEEP and fresh[u]
                                     and self.last_fwd_use[u] <= p):
                prog.free(u)
                fresh[u] = False


def run_policy(graph: TrainingGraph, policy: Sequence[str], *,
               keep_rebuilt_ancestors: bool = True, hold_checkpoints: bool = True,
               ticker: Ticker | None = None) -> Program:
    """Run every op once in graph order under a per-tensor policy for forward tensors.

    * ``keep``: the tensor stays in RAM until its last reader (the plain schedule).
    * ``offload``: paged out right after it is computed, freed once its forward readers
      are done, paged in again when a backward op (or a recomputation) needs it.
    * ``drop``: freed once its forward readers are done and recomputed on demand, from
      whatever ancestors are resident (recursively, paging in offloaded ones).

    A tensor brought back (recomputed or paged in) for an op stays until its last reader,
    so each dropped tensor is normally recomputed once. An ancestor brought back only to
    rebuild it is kept too while a later op reads it (Chen's "ladder": the whole segment
    is rebuilt once), unless ``keep_rebuilt_ancestors`` is False: then dropped or
    offloaded ancestors that the current op does not read are freed as soon as they have
    been used (less memory, more recomputation: Capuchin's on-demand recomputation).
    Backward tensors are always kept until their last reader. With ``hold_checkpoints``,
    a kept tensor is a checkpoint: it is also held while a dropped tensor that may be
    recomputed from it is still needed; without, kept tensors live exactly as in the plain
    schedule and a recomputation goes back to whatever is resident. Every tensor is freed
    after its last use. Rebuilding runs from an explicit stack, so chains of any length
    work. With a ``ticker`` (:class:`~poetsim.baselines.base.Ticker`) it raises
    :class:`~poetsim.baselines.base.OutOfTime` once the ticker's ``stop_at`` has passed.
    """
    run = _PolicyRun(graph, policy, keep_rebuilt_ancestors, hold_checkpoints, ticker)
    for p in range(len(graph)):
        run.step(p)
    return run.prog
