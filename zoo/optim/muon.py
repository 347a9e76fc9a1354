"""The Muon fine-tuning recipe: `optax.contrib.muon` with the paper's settings and parameter routing.

Paper: "Can Muon Fine-tune Adam-Pretrained Models?" (ICML 2026, arXiv 2605.10468; code
github.com/XingyuQu/muon-finetune). Muon itself is optax's; this
module only chooses its settings, routes parameters and measures update strength.

Settings (the repository's T5/Llama/CLIP optimizer): Nesterov momentum β = 0.95, 5 Newton–Schulz steps
with (a, b, c) = (3.4445, −4.7750, 2.0315), update scale 0.2·sqrt(max(fan_in, fan_out)) (optax's
`consistent_rms=0.2`), decoupled weight decay λ·η; the AdamW group uses betas (0.9, 0.95) (optax's
default `adam_b2=0.999` is overridden), the same learning rate and weight decay.

Routing (the repository's muon_builder): every parameter with per-layer rank ≥ 2 goes to Muon except
embedding tables and output heads; 1-D parameters, embeddings and heads go to AdamW. optax's default
would put every 2-D array on Muon, embeddings included. Layers stacked for `jax.lax.scan` (zoo models
with `scan_layers`, leaves `[L, ...]` under a `layers` key) keep their leading axis as a batch axis:
a stacked norm scale `[L, D]` is 1-D per layer and goes to AdamW.

Differences from the repository (documented, not bugs): optax keeps a bias-corrected EMA of gradients
where the repository keeps an un-normalised sum B ← μB + G; Newton–Schulz is scale-invariant (up to
eps), so the directions agree once t ≫ 1/(1−μ) and only the first steps differ slightly. Newton–Schulz
runs in the parameter dtype here (the repository runs it in bfloat16).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import optax
from optax.contrib import MuonDimensionNumbers

from icml26zoo.optim._hparams import check_non_negative, check_unit_interval, optimizer_options, with_standard_promotion
from icml26zoo.registry import register_optimizer

EMBEDDING_KEYWORDS = ("embed",)  # a path key containing one of these names an embedding table
HEAD_NAMES = ("head", "lm_head", "unembed", "classifier", "output_head")  # exact path keys of heads
STACKED_KEYS = ("layers",)  # path keys under which zoo models stack scanned layers along axis 0

MUON, ADAMW = "muon", "adamw"


def _key_name(key: Any) -> Any:
    return getattr(key, "key", getattr(key, "name", getattr(key, "idx", key)))


def _stacked_axes(path: Sequence[Any], stacked_keys: Sequence[str]) -> int:
    """1 when the leaf sits under a stacked (scanned) layer key: `layers` followed by a name, not an index."""
    names = [_key_name(k) for k in path]
    for i, name in enumerate(names[:-1]):
        if name in stacked_keys and not isinstance(names[i + 1], int):
            return 1
    return 0


def _is_embedding_or_head(
    path: Sequence[Any], embedding_keywords: Sequence[str], head_names: Sequence[str]
) -> bool:
    names = [str(_key_name(k)).lower() for k in path]
    embedding = any(word in name for name in names for word in embedding_keywords)
    return embedding or any(name in head_names for name in names)


def muon_dimension_numbers(
    params: Any, *, embedding_keywords: Sequence[str] = EMBEDDING_KEYWORDS,
    head_names: Sequence[str] = HEAD_NAMES, stacked_keys: Sequence[str] = STACKED_KEYS,
) -> Any:
    """Per leaf: MuonDimensionNumbers for Muon matrices, None for AdamW (embeddings, heads, rank < 2).

    Flax layout x @ W, W `[..., in, out]`: the output axis is the last, the reduction axes are the
    others, except a stacked layer axis 0, which is a batch axis (orthogonalised per layer by vmap).
    """

    def rule(path, leaf):
        stacked = _stacked_axes(path, stacked_keys)
        if leaf.ndim - stacked < 2 or _is_embedding_or_head(path, embedding_keywords, head_names):
            return None
        reduction = tuple(range(stacked, leaf.ndim - 1))
        return MuonDimensionNumbers(reduction_axis=reduction[0] if len(reduction) == 1 else reduction,
                                    output_axis=leaf.ndim - 1)

    return jax.tree_util.tree_map_with_path(rule, params)


def muon_param_labels(params: Any, **routing: Any) -> Any:
    """The routing as labels, "muon" or "adamw" per leaf (for `optax.multi_transform`, masks, logs)."""
    dims = muon_dimension_numbers(params, **routing)
    return jax.tree.map(lambda d: ADAMW if d is None else MUON, dims, is_leaf=lambda d: d is None
                        or isinstance(d, MuonDimensionNumbers))


def muon_finetune(
    learning_rate: optax.ScalarOrSchedule, beta: float = 0.95, ns_steps: int = 5, eps: float = 1e-8,
    weight_decay: float = 0.0, adam_b1: float = 0.9, adam_b2: float = 0.95,
    consistent_rms: float | None = 0.2, routing: Callable[[Any], Any] | None = None,
) -> optax.GradientTransformationExtraArgs:
    """`optax.contrib.muon` with the paper's settings; `routing(params)` gives the dimension-number tree
    (default `muon_dimension_numbers`). Under `inject_hyperparams` pass `static_args="routing"`.

    optax routes by a `combine.partition` (= `optax.multi_transform`) over the labels this routing
    implies. Runs under standard dtype promotion (see `with_standard_promotion`).
    """
    check_non_negative("learning_rate", learning_rate)
    check_non_negative("weight_decay", weight_decay)
    for name, value in (("beta", beta), ("adam_b1", adam_b1), ("adam_b2", adam_b2)):
        check_unit_interval(name, value)
    if consistent_rms is not None:
        check_non_negative("consistent_rms", consistent_rms)
    return with_standard_promotion(optax.contrib.muon(
        learning_rate, ns_coeffs=(3.4445, -4.775, 2.0315), ns_steps=ns_steps, beta=beta, eps=eps,
        weight_decay=weight_decay, nesterov=True, adam_b1=adam_b1, adam_b2=adam_b2,
        adam_weight_decay=weight_decay, consistent_rms=consistent_rms,
        muon_weight_dimension_numbers=routing or muon_dimension_numbers,
    ))


def update_strength(delta: jax.Array) -> dict[str, jax.Array]:
    """Spectral statistics of an update matrix ΔW `[m, n]` (or a LoRA product A B), float32 scalars.

    stable_rank = ‖ΔW‖_F² / ‖ΔW‖_2²; spectral_entropy = −Σ p_i log p_i / log r with p_i = σ_i / Σσ over the
    r = min(m, n) singular values (the σ-normalised choice of the repository's svd_metrics); also the
    Frobenius and spectral norms. The paper's hypothesis: forgetting grows with these.
    """
    sigma = jnp.linalg.svd(delta.astype(jnp.float32), compute_uv=False)
    frob_sq = jnp.sum(sigma * sigma)
    spectral = sigma[0]
    p = sigma / jnp.maximum(jnp.sum(sigma), 1e-30)
    entropy = -jnp.sum(jnp.where(p > 0, p * jnp.log(jnp.where(p > 0, p, 1.0)), 0.0))
    return {
        "stable_rank": frob_sq / jnp.maximum(spectral * spectral, 1e-30),
        "spectral_entropy": entropy / jnp.log(jnp.asarray(max(sigma.shape[0], 2), jnp.float32)),
        "frobenius_norm": jnp.sqrt(frob_sq),
        "spectral_norm": spectral,
    }


@dataclasses.dataclass(frozen=True)
class MuonOptions:
    """The registered `muon` optimizer's `optim.options` (see `muon_finetune` for their meaning)."""

    muon_beta: float = 0.95
    ns_steps: int = 5
    consistent_rms: float | None = 0.2


@register_optimizer("muon")
def _muon_factory(learning_rate: optax.ScalarOrSchedule, cfg: Any) -> optax.GradientTransformationExtraArgs:
    """Muon fine-tuning recipe: options muon_beta (0.95), consistent_rms (0.2), ns_steps (5); the AdamW
    group uses cfg.b1, cfg.b2, cfg.eps; cfg.weight_decay on both groups (as in the paper's code)."""
    options = optimizer_options(cfg, "muon", MuonOptions)
    return muon_finetune(
        learning_rate, beta=options.muon_beta, ns_steps=options.ns_steps, eps=cfg.eps,
        weight_decay=cfg.weight_decay, adam_b1=cfg.b1, adam_b2=cfg.b2, consistent_rms=options.consistent_rms,
    )
