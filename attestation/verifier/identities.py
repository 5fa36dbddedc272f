"""Who the evidence must come from: the node and the GPUs enrolled in it, as its callers know them."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GPUIdentity:
    index: int
    uuid: str
    serial: str


@dataclass(frozen=True)
class NodeIdentity:
    name: str
    serial: str
    gpus: tuple[GPUIdentity, ...]
