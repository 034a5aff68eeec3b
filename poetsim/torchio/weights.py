"""The weights (and optimizer state) an execution keeps in files on storage.

A graph whose request put weights on storage
(:class:`~poetsim.graph.streaming.WeightsOnStorage`: the frozen ones, the trained ones, or
both) has them live in files, one per parameter, under ``weights/`` in the page directory,
each with its SHA-256, and optionally each trained one's optimizer state beside it (one
file per slot, ``WeightsOnStorage.state_copies``). :class:`WeightFiles` is that card: it
writes the files before the first step (:meth:`WeightFiles.move_out`), loads what an op
reads for its run (READ_WEIGHTS, refusing a file whose digest changed), keeps the weights
a HOLD_WEIGHTS asked for until their DROP_WEIGHTS, writes back what an in-place update
changed (WRITE_WEIGHTS) and counts the bytes read, written back and held at once, in the
graph's units.
"""

from __future__ import annotations

import hashlib
import io
from collections.abc import Mapping, MutableMapping
from pathlib import Path
from typing import Any

from poetsim.errors import ExecutionError
from poetsim.graph.graph import TrainingGraph
from poetsim.graph.ops import Phase
from poetsim.graph.precision import precision_of
from poetsim.graph.streaming import WeightsOnStorage
from poetsim.torchio.model import ImportedModel

__all__ = ["WeightFiles"]


class WeightFiles:
    """The weight and optimizer-state files of one execution, and what is loaded from them.

    ``loaded`` are the weights loaded for the running op (only ever there, never in the
    runner's parameters in RAM), ``loaded_state`` the optimizer state loaded for its
    in-place update, ``updated_loaded`` the loaded weights it updated (written back by
    :meth:`drop_weights`), ``holds`` the weights kept for an op from its forward op's load.
    ``current`` names the running op in error messages (the runner sets it).
    """

    def __init__(self, torch: Any, imported: ImportedModel, graph: TrainingGraph,
                 trained: set[str], page_dir: Path) -> None:
        self.torch = torch
        self.im = imported
        self.graph = graph
        self.trained = trained
        self.page_dir = page_dir
        self.on_storage = WeightsOnStorage.of(graph)
        self.weight_width = precision_of(graph).weight_bytes
        self.state_width = precision_of(graph).gradient_bytes
        self.weight_files: dict[str, tuple[Path, str]] = {}
        #: Optimizer-state files per parameter, one per slot.
        self.state_files: dict[str, dict[str, tuple[Path, str]]] = {}
        self.loaded: dict[str, Any] = {}
        #: Optimizer state loaded from storage for the running in-place update.
        self.loaded_state: dict[str, dict[str, Any]] = {}
        self.updated_loaded: list[str] = []
        #: Held weights: op -> the weights it reads, kept from its forward op's load.
        self.holds: dict[int, dict[str, Any]] = {}
        self.pending_holds: list[int] = []  # held by the next READ_WEIGHTS
        self.current: str | None = None
        self.weights_read_bytes = 0
        self.weights_written_bytes = 0
        self.weights_held_peak_bytes = 0

    def move_out(self, params: MutableMapping[str, Any],
                 state: MutableMapping[str, Any]) -> None:
        """Write the weights on storage (and their optimizer state, if it goes beside them)
        to their files, before the iteration (the card as the board boots with it), and
        take them out of ``params`` and ``state`` (RAM)."""
        if not self.on_storage:
            return
        (self.page_dir / "weights").mkdir(parents=True, exist_ok=True)
        for name in [n for n in params if self.lives_on_storage(n)]:
            self.save_weight(name, params.pop(name).detach().clone())
            if name in self.trained and self.on_storage.state_copies:
                self.save_state(name, state.pop(name))

    # ------------------------------------------------------------------ the files

    def lives_on_storage(self, name: str) -> bool:
        """Whether parameter ``name`` lives in a weight file (the graph's
        ``weights_on_storage``: the frozen ones, the trained ones, or both)."""
        return self.on_storage.trained if name in self.trained else self.on_storage.frozen

    def weights_of(self, k: int) -> list[str]:
        """The parameters on storage op ``k`` loads when it runs, as the cost model has it
        (:meth:`~poetsim.graph.streaming.WeightsOnStorage.bytes_read`): those of the op it
        owns, or differentiates; trained ones only for a forward op or an in-place update."""
        op = self.graph.ops[k]
        backward = op.phase is Phase.BACKWARD
        owner = self.im.ops.get(op.forward_of if backward else op.name)  # type: ignore[arg-type]
        if owner is None:
            return []
        return [p for p in owner.params if p in self.weight_files
                and (p not in self.trained or not backward or op.inplace_update)]

    def _store(self, key: str, value: Any) -> tuple[Path, str]:
        """Write ``value`` to the storage file ``key``; its path and digest."""
        path = self.page_dir / "weights" / f"{key}.pt"
        buffer = io.BytesIO()
        self.torch.save(value.detach().clone(), buffer)
        data = buffer.getvalue()
        path.write_bytes(data)
        return path, hashlib.sha256(data).hexdigest()

    def _load(self, file: tuple[Path, str], what: str) -> Any:
        """The tensor a storage file holds, its digest checked; ``what`` names it."""
        path, digest = file
        where = f" (op {self.current!r})" if self.current else ""
        try:
            data = path.read_bytes()
        except OSError as err:
            raise ExecutionError(f"cannot read weight file {path}{where}: "
                                 f"{err.strerror}") from None
        if hashlib.sha256(data).hexdigest() != digest:
            raise ExecutionError(f"weight file {path} of {what} is corrupted (checksum "
                                 f"mismatch){where}")
        return self.torch.load(io.BytesIO(data), weights_only=True)

    def save_weight(self, name: str, value: Any) -> int:
        """Write parameter ``name``'s weight file; its bytes in the graph's units."""
        self.weight_files[name] = self._store(name, value)
        return int(value.numel()) * self.weight_width

    def read_weight_file(self, name: str) -> Any:
        """Parameter ``name`` as its weight file holds it (the digest checked)."""
        return self._load(self.weight_files[name], repr(name))

    def state_on_storage(self, name: str) -> bool:
        """Whether parameter ``name``'s optimizer state lives in files beside its weights
        (``WeightsOnStorage.state_copies``)."""
        return name in self.state_files

    def save_state(self, name: str, state: Mapping[str, Any]) -> int:
        """Write parameter ``name``'s optimizer state, one file per slot; its bytes in the
        graph's units (elements x the gradient width)."""
        self.state_files[name] = {slot: self._store(f"{name}.{slot}", value)
                                  for slot, value in state.items()}
        return sum(int(v.numel()) for v in state.values()) * self.state_width

    def state_from_files(self, name: str) -> dict[str, Any]:
        """Parameter ``name``'s optimizer state as its files hold it (digests checked)."""
        return {slot: self._load(file, f"optimizer state {slot!r} of {name!r}")
                for slot, file in self.state_files[name].items()}

    # ------------------------------------------------------------------ loads and holds

    def load_state(self, name: str) -> None:
        """Load parameter ``name``'s optimizer state for the running in-place update
        (counted as read)."""
        state = self.loaded_state[name] = self.state_from_files(name)
        self.weights_read_bytes += sum(int(v.numel()) for v in state.values()) * self.state_width

    def load_weight(self, name: str) -> int:
        """Load parameter ``name`` from its weight file for the running op; its bytes in
        the graph's units (counted as read)."""
        value = self.read_weight_file(name)
        value.requires_grad_(name in self.trained)
        self.loaded[name] = value
        nbytes = int(value.numel()) * self.weight_width
        self.weights_read_bytes += nbytes
        return nbytes

    def load_weights(self, k: int) -> None:
        """Load the weights on storage op ``k`` reads, whole, for this op only (its
        READ_WEIGHTS step), and keep those of the ops whose HOLD_WEIGHTS came before."""
        for name in self.weights_of(k):
            self.load_weight(name)
            if self.graph.ops[k].inplace_update and self.state_on_storage(name):
                self.load_state(name)
        for b in self.pending_holds:
            missing = [name for name in self.weights_of(b) if name not in self.loaded]
            if missing:
                raise ExecutionError(f"op {self.graph.ops[b].name!r} holds weight "
                                     f"{missing[0]!r}, which op {self.graph.ops[k].name!r} "
                                     "does not load")
            self.holds[b] = {name: self.loaded[name] for name in self.weights_of(b)}
        self.pending_holds.clear()
        tensors = {id(v): v for v in self.loaded.values()}
        for kept in self.holds.values():
            tensors.update((id(v), v) for v in kept.values())
        in_ram = sum(int(v.numel()) for v in tensors.values()) * self.weight_width
        self.weights_held_peak_bytes = max(self.weights_held_peak_bytes, in_ram)

    def hold_weights(self, b: int) -> None:
        """HOLD_WEIGHTS ``b``: the next READ_WEIGHTS keeps the weights ``b`` reads."""
        if b in self.holds or b in self.pending_holds:
            raise ExecutionError(f"the weights of op {self.graph.ops[b].name!r} are "
                                 "already held")
        self.pending_holds.append(b)

    def use_held(self, k: int) -> None:
        """Op ``k`` runs without its READ_WEIGHTS: on its held weights, if any."""
        if k in self.holds:
            self.loaded = dict(self.holds[k])

    def drop_held(self, b: int) -> None:
        """DROP_WEIGHTS ``b``: release the weights held for ``b``."""
        if self.holds.pop(b, None) is None:
            raise ExecutionError(f"the weights of op {self.graph.ops[b].name!r} are not "
                                 "held")

    # ------------------------------------------------------------------ updates

    def mark_updated(self, name: str) -> None:
        """Parameter ``name`` was updated in place: if it was loaded for the op, its
        WRITE_WEIGHTS (:meth:`drop_weights`) writes it back."""
        if name in self.loaded and name not in self.updated_loaded:
            self.updated_loaded.append(name)

    def release(self) -> None:
        """The op's run ended: drop what it loaded, unless it updated some of it (then its
        WRITE_WEIGHTS writes that back first, :meth:`drop_weights`)."""
        if not self.updated_loaded:
            self.loaded.clear()

    def write_back(self, name: str) -> None:
        """Write the loaded, updated parameter ``name`` back to its weight file."""
        self.weights_written_bytes += self.save_weight(name, self.loaded[name])

    def drop_weights(self) -> None:
        """After the op (its WRITE_WEIGHTS step): write back what it updated in place,
        then drop every loaded weight (nothing of them stays in RAM)."""
        for name in self.updated_loaded:
            self.write_back(name)
            if name in self.loaded_state:
                self.weights_written_bytes += self.save_state(name, self.loaded_state[name])
        self.updated_loaded.clear()
        self.loaded.clear()
        self.loaded_state.clear()
