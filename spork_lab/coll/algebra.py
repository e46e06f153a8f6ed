"""Collective algebra (seed 001). PROVISIONAL: minimal CollUnit for the front end; being replaced."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CollUnit:
    domain: tuple
    box: tuple
    name: str = ""

    def __rmul__(self, k: int) -> "CollUnit":
        if not isinstance(k, int) or k <= 0:
            raise TypeError(f"a collective unit can only be scaled by a positive int, not {k!r}")
        return CollUnit(self.domain, self.box[:-1] + (self.box[-1] * k,), f"{k} * {self}")

    def __str__(self) -> str:
        return self.name or f"CollUnit({self.domain!r}, {self.box!r})"


cuda_thread = CollUnit(("clusterDim * blockDim",), (1,), "cuda_thread")
cuda_warp = CollUnit(("clusterDim * blockDim",), (32,), "cuda_warp")
cuda_warpgroup = CollUnit(("clusterDim * blockDim",), (128,), "cuda_warpgroup")
cuda_cta_in_cluster = CollUnit(("clusterDim * blockDim",), ("blockDim",), "cuda_cta_in_cluster")

blockDim = "blockDim"
clusterDim = "clusterDim"
