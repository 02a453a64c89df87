"""The peak of the bytes held by live torch tensors, and the largest of them at that peak (a benchmark helper).

PyTorch's allocator statistics (``torch.cuda.max_memory_allocated``, memory snapshots) exist on CUDA only. On a
CPU the same figure is read here with a ``TorchDispatchMode``: every storage an op returns (forward, backward and
optimizer ops alike: the autograd engine keeps the mode) is counted until Python's last reference to it goes, and
at each new peak the live storages are grouped by the op that made them, their shape and dtype. Storages made
before the mode was entered (the weights, the data) are counted from ``track``; temporaries inside a single kernel
are not seen, so the figure is a lower bound of what the allocator held.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

MIB = 1024 * 1024
SNAPSHOT_EVERY = 4 * MIB  # a new peak is grouped again once it passed the last grouped one by this much


@dataclass(frozen=True)
class TensorGroup:
    """Live storages made by one op with one shape and dtype."""

    label: str
    shape: tuple[int, ...]
    dtype: str
    count: int
    nbytes: int

    def describe(self) -> str:
        shape = "x".join(str(n) for n in self.shape) or "scalar"
        times = f"{self.count} x " if self.count > 1 else ""
        return f"{self.nbytes / MIB:,.0f} MiB: {times}{self.label} [{shape}] {self.dtype}"


class LiveTensorPeak(TorchDispatchMode):
    """``with LiveTensorPeak() as peak: ...``; then ``peak.peak_bytes`` and ``peak.largest()``."""

    def __init__(self) -> None:
        super().__init__()
        self._live: dict[int, tuple[int, str, tuple[int, ...], str]] = {}  # storage address -> bytes, label, ...
        self.current_bytes = 0
        self.peak_bytes = 0
        self._grouped_at = -1
        self._at_peak: list[TensorGroup] = []

    def track(self, tensors: Any, label: str) -> None:
        """Count tensors made before the mode was entered (model weights, inputs) under ``label``."""
        for tensor in tensors:
            self._add(tensor, label)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        label = str(func.overloadpacket.__name__)
        for tensor in tree_flatten(out)[0]:
            if isinstance(tensor, torch.Tensor):
                self._add(tensor, label)
        return out

    def largest(self, n: int = 6) -> list[TensorGroup]:
        """The ``n`` largest groups of live storages at the (grouped) peak."""
        return self._at_peak[:n]

    def _add(self, tensor: torch.Tensor, label: str) -> None:
        storage = tensor.untyped_storage()
        address, nbytes = storage.data_ptr(), storage.nbytes()
        if nbytes == 0 or address in self._live or tensor.device.type == "meta":
            return
        self._live[address] = (nbytes, label, tuple(tensor.shape), str(tensor.dtype).removeprefix("torch."))
        weakref.finalize(storage, self._free, address)
        self.current_bytes += nbytes
        if self.current_bytes > self.peak_bytes:
            self.peak_bytes = self.current_bytes
            if self.peak_bytes >= self._grouped_at + SNAPSHOT_EVERY:
                self._group()

    def _free(self, address: int) -> None:
        entry = self._live.pop(address, None)
        if entry is not None:
            self.current_bytes -= entry[0]

    def _group(self) -> None:
        self._grouped_at = self.peak_bytes
        groups: dict[tuple[str, tuple[int, ...], str], list[int]] = {}
        for nbytes, label, shape, dtype in self._live.values():
            groups.setdefault((label, shape, dtype), []).append(nbytes)
        ranked = sorted(groups.items(), key=lambda kv: -sum(kv[1]))
        self._at_peak = [TensorGroup(k[0], k[1], k[2], len(v), sum(v)) for k, v in ranked[:20]]
