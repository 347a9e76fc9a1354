"""Where a decoder LM's quantisable linear layers are: every `nnx.Linear` inside a block's mixer or MLP.

A site names one layer's kernel: the path of the kernel in the model's pure parameter dict and, for scanned
layers (kernels stacked [L, n_in, n_out]), the layer index along the leading axis. Embeddings and the head are
not sites (YAQA and GPTQ quantise the linear layers only).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from flax import nnx

__all__ = ["LinearSite", "linear_sites", "read_kernel", "write_kernel"]

SUBLAYERS = ("mixer", "mlp")


@dataclasses.dataclass(frozen=True)
class LinearSite:
    """One linear layer: `path` of its kernel in `nnx.to_pure_dict(nnx.state(model, nnx.Param))`, `layer` its
    index on a stacked leading axis (None for unrolled layers), `module_path` the Linear's own path in the
    unrolled model (("layers", i, "mixer", "q_proj"))."""

    path: tuple[Any, ...]
    layer: int | None
    module_path: tuple[Any, ...]

    @property
    def name(self) -> str:
        return ".".join(str(part) for part in self.module_path)


def linear_sites(model: nnx.Module) -> list[LinearSite]:
    """Every `nnx.Linear` under `model.layers[*].mixer` or `.mlp`, in graph order (layer by layer)."""
    scanned = bool(getattr(model.cfg, "scan_layers", False))
    num_layers = model.cfg.num_layers
    sites = []
    for path, module in nnx.iter_graph(model):
        if not isinstance(module, nnx.Linear) or len(path) < 2 or path[0] != "layers":
            continue
        inner = path[1:] if scanned else path[2:]
        if not inner or inner[0] not in SUBLAYERS:
            continue
        kernel_path = (*path, "kernel")
        if scanned:
            sites += [LinearSite(kernel_path, i, ("layers", i, *inner)) for i in range(num_layers)]
        else:
            sites.append(LinearSite(kernel_path, None, tuple(path)))
    if not sites:
        raise ValueError(f"model has no nnx.Linear under layers[*].mixer / .mlp to quantise, mixer {model.cfg.mixer!r}")
    return sorted(sites, key=lambda s: (s.module_path[1], [str(p) for p in s.module_path[2:]]))


def _leaf(params: dict, path: tuple[Any, ...]) -> Any:
    node = params
    for part in path:
        node = node[part]
    return node


def read_kernel(params: dict, site: LinearSite) -> Any:
    """The site's kernel [n_in, n_out] from a pure parameter dict."""
    kernel = _leaf(params, site.path)
    return kernel if site.layer is None else kernel[site.layer]


def write_kernel(params: dict, site: LinearSite, kernel: Any) -> None:
    """Stores kernel [n_in, n_out] at the site in the pure parameter dict (in place; stacked leaves updated)."""
    parent = _leaf(params, site.path[:-1])
    if site.layer is None:
        parent[site.path[-1]] = kernel
    else:
        parent[site.path[-1]] = parent[site.path[-1]].at[site.layer].set(kernel)
