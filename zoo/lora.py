"""LoRA adapters on any zoo model's linear layers: add, filter, train-only-LoRA, merge back.

LoRA (Hu et al. 2021, arXiv 2106.09685) as used by "Can Muon Fine-tune Adam-Pretrained Models?" (ICML 2026,
arXiv 2605.10468). Flax layout x @ W with W `[in, out]`:

    y = x W₀ + (α/r) · (x A) B,   A `[in, r]` (Kaiming-uniform, flax's `nnx.LoRA` default), B `[r, out]` = 0

so at initialization the adapted model computes exactly what the base model computes. `nnx.LoRA` holds A
and B as `nnx.LoRAParam` (a subclass of `nnx.Param`) but has no α, so `LoRAAdapter` wraps the original
`nnx.Linear` and an `nnx.LoRA` without base and applies α/r to the LoRA branch itself. `nnx.LoRALinear`
is not used: it initializes a kernel of its own (the pretrained one would have to be copied over field by
field) and has no α either.

Scanned layers (`cfg.scan_layers`: one Block whose Linear kernels are `[L, in, out]`) get stacked
adapters, A `[L, in, r]` and B `[L, r, out]`, built with `nnx.vmap` over split RNG streams exactly as
`zoo.models.block.build_layers` builds the layers: `jax.lax.scan` over the layer state slices the
adapters along axis 0 with everything else, so no layout conversion is needed and each layer gets its own
A. Muon routing (`icml26zoo.optim.muon`) sees them under `layers` like any stacked matrix and
orthogonalizes each layer's A and B separately; unrolled layers give plain 2-D A and B.

The adapted state has new paths (`.../q_proj/base/kernel`, `.../q_proj/lora/lora_a`), so
`convert_layer_layout` and checkpoints of the base model apply to `merge_lora(model)`, not to the adapted
model: choose the layout before `add_lora`.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from icml26zoo.validation import check_int, check_positive

# Every linear layer of the zoo's Llama: attention projections and the SwiGLU MLP ("all linear", the
# paper's Llama setting). The untied head is an nnx.Param, not an nnx.Linear, and is never adapted.
DEFAULT_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate", "up", "down")

lora_filter = nnx.LoRAParam  # the trainable variables of a LoRA fine-tune
base_filter = nnx.All(nnx.Param, nnx.Not(nnx.LoRAParam))  # the frozen ones (LoRAParam is a Param)


class LoRAAdapter(nnx.Module):
    """`base(x) + scale · lora(x)`, scale = α/r: a frozen `nnx.Linear` plus an `nnx.LoRA` branch.

    x `[..., in]` -> `[..., out]`. For scanned layers `base.kernel` is `[L, in, out]` and the LoRA factors
    are `[L, in, r]`, `[L, r, out]`; the module is then only called inside `jax.lax.scan`, on one layer's
    slice, where the shapes are those of the unrolled case.
    """

    def __init__(self, base: nnx.Linear, *, rank: int, alpha: float, rngs: nnx.Rngs) -> None:
        self.base = base
        self.rank = rank
        self.alpha = alpha
        self.scale = float(alpha) / rank
        kernel = base.kernel[...]
        if kernel.ndim not in (2, 3):
            raise ValueError(f"LoRA needs a kernel [in, out] or stacked [L, in, out], got shape {kernel.shape}")

        def make(layer_rngs: nnx.Rngs) -> nnx.LoRA:
            # The branch computes in the base layer's dtype: casting x, A and B explicitly keeps strict
            # dtype promotion happy (bfloat16 activations against float32 factors would otherwise mix).
            return nnx.LoRA(base.in_features, rank, base.out_features, dtype=base.dtype,
                            param_dtype=kernel.dtype, rngs=layer_rngs)

        if kernel.ndim == 2:
            self.lora = make(rngs)
        else:
            stacked = nnx.split_rngs(splits=kernel.shape[0])(nnx.vmap(make, in_axes=(0,), out_axes=0))
            self.lora = stacked(rngs)

    def __call__(self, x: jax.Array, **kwargs: Any) -> jax.Array:
        return self.base(x, **kwargs) + self.scale * self.lora(x)

    def merged_kernel(self) -> jax.Array:
        """W₀ + (α/r) · A B, `[in, out]` or stacked `[L, in, out]`, in the kernel's dtype."""
        kernel = self.base.kernel[...]
        a, b = self.lora.lora_a[...], self.lora.lora_b[...]
        delta = jnp.einsum("...ir,...ro->...io", a, b, precision=jax.lax.Precision.HIGHEST)
        return kernel + (self.scale * delta).astype(kernel.dtype)


def _dotted(path: Sequence[Any]) -> str:
    return ".".join(str(p) for p in path)


def linear_layers(model: nnx.Module) -> dict[str, tuple[nnx.Module | nnx.List, Any, nnx.Linear]]:
    """Every `nnx.Linear` in `model` (adapted ones excluded): dotted path -> (parent, attribute, layer).

    Paths are the graph paths, e.g. `layers.mixer.q_proj` (scanned) or `layers.0.mlp.up` (unrolled).
    """
    found: dict[str, tuple[Any, Any, nnx.Linear]] = {}
    nodes = dict(nnx.iter_graph(model))
    for path, node in nodes.items():
        if not isinstance(node, nnx.Linear) or not path:
            continue
        parent = nodes[path[:-1]]
        if isinstance(parent, LoRAAdapter):  # already the base of an adapter
            continue
        found[_dotted(path)] = (parent, path[-1], node)
    return found


def matches_target(path: str, pattern: str) -> bool:
    """A pattern matches the attribute name (`q_proj`, `*_proj`) or the whole dotted path (`layers.0.*`)."""
    return fnmatch.fnmatchcase(path.rsplit(".", 1)[-1], pattern) or fnmatch.fnmatchcase(path, pattern)


def _set_child(parent: Any, name: Any, child: nnx.Module) -> None:
    if isinstance(name, int):
        parent[name] = child
    else:
        setattr(parent, name, child)


def add_lora(
    model: nnx.Module, *, rank: int, alpha: float, targets: Sequence[str] = DEFAULT_TARGETS,
    rngs: nnx.Rngs, copy: bool = True,
) -> nnx.Module:
    """`model` with every `nnx.Linear` whose name matches a pattern in `targets` wrapped in a LoRAAdapter.

    rank r ≥ 1 and alpha α > 0 set the factors A `[in, r]`, B `[r, out]` and the scale α/r (paper: r 32,
    α 8 for Llama; α = 2r in the paper's sweeps). Patterns are `fnmatch` globs against the attribute name
    or the dotted path; every pattern must match at least one linear layer. With copy (default) the input
    model is left untouched (the adapters wrap a clone); copy=False adapts it in place.
    Raises ValueError naming rank / alpha when they are not positive, or listing the linear layers when a
    pattern matches none.
    """
    check_int("rank", rank)
    check_positive("alpha", alpha)
    if isinstance(targets, str) or not targets:
        raise ValueError(f"targets must be a non-empty sequence of name patterns, got {targets!r}")
    if copy:
        model = nnx.clone(model)
    layers = linear_layers(model)
    for pattern in targets:
        if not any(matches_target(path, pattern) for path in layers):
            raise ValueError(
                f"LoRA target pattern {pattern!r} matches no linear layer; available linear layers: "
                f"{sorted(layers)}"
            )
    for path, (parent, name, linear) in layers.items():
        if any(matches_target(path, pattern) for pattern in targets):
            _set_child(parent, name, LoRAAdapter(linear, rank=rank, alpha=alpha, rngs=rngs))
    return model


def merge_lora(model: nnx.Module, *, copy: bool = True) -> nnx.Module:
    """`model` with each LoRAAdapter replaced by its base Linear holding the kernel W₀ + (α/r)·A B.

    The result has the base model's structure again (no LoRAParam left) and the same outputs as the
    adapted model up to float rounding (x(W₀ + sAB) and xW₀ + s(xA)B round differently).
    """
    if copy:
        model = nnx.clone(model)
    nodes = dict(nnx.iter_graph(model))
    for path, node in nodes.items():
        if isinstance(node, LoRAAdapter) and path:
            node.base.kernel[...] = node.merged_kernel()
            _set_child(nodes[path[:-1]], path[-1], node.base)
    return model


def split_lora(model: nnx.Module) -> tuple[nnx.GraphDef, nnx.State, nnx.State]:
    """(graphdef, LoRA params, everything else): differentiate and update the second, keep the third frozen.

    `nnx.merge(graphdef, lora, rest)` rebuilds the model, e.g. inside a loss function of `lora` only. The
    stateful equivalents take `lora_filter` directly: `nnx.grad(loss, argnums=nnx.DiffState(0, lora_filter))`
    or `nnx.Optimizer(model, tx, wrt=lora_filter)`.
    """
    return nnx.split(model, lora_filter, ...)


def count_lora_params(model: nnx.Module) -> int:
    """Number of trainable scalars: the sizes of all LoRAParam leaves (Σ over adapters of r·(in + out)·L)."""
    return sum(int(leaf.size) for leaf in jax.tree.leaves(nnx.state(model, lora_filter)))


__all__ = [
    "DEFAULT_TARGETS",
    "LoRAAdapter",
    "add_lora",
    "base_filter",
    "count_lora_params",
    "linear_layers",
    "lora_filter",
    "matches_target",
    "merge_lora",
    "split_lora",
]
