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
eps), so the directions agree once t ≫ 1/(1−μ) and only the first steps differ slightly.

Options of the orthogonalisation: `ns_coeffs="standard"` (the fixed quintic above) or `"polar_express"`
(Amsel et al. 2025, arXiv 2505.16932: one optimal quintic per iteration, as the repository's
polar_express.py composes them on [1e-3, 1] with cushion 0.02 and safety factor 1.01, first `ns_steps`
triples, plus a 1.1 safety factor on the initial normalisation, folded into the first triple as
(a/s, b/s³, c/s⁵) because optax normalises by ‖X‖_F itself). `ns_dtype="float32"` runs Newton–Schulz in
the parameter dtype; `"bfloat16"` (the repository's default) casts the Muon-routed gradients to bfloat16
before optax's Muon, so its momentum buffer is bfloat16 too (the repository keeps the buffer in float32
and casts only inside Newton–Schulz); updates are cast back to the parameter dtype.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from optax.contrib import MuonDimensionNumbers

from icml26zoo.optim.hparams import check_concrete, optimizer_options, with_standard_promotion
from icml26zoo.registry import register_optimizer
from icml26zoo.validation import check_int, check_non_negative, check_unit_interval

EMBEDDING_KEYWORDS = ("embed",)  # a path key containing one of these names an embedding table
HEAD_NAMES = ("head", "lm_head", "unembed", "classifier", "output_head")  # exact path keys of heads
STACKED_KEYS = ("layers",)  # path keys under which zoo models stack scanned layers along axis 0

MUON, ADAMW = "muon", "adamw"
NS_COEFFS = ("standard", "polar_express")
NS_DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}
STANDARD_COEFFS = (3.4445, -4.775, 2.0315)
POLAR_EXPRESS_NORM_SAFETY = 1.1  # the initial normalisation divides by 1.1·‖X‖_F (the design notes)


def _optimal_quintic(low: float, high: float) -> tuple[float, float, float]:
    """(a, b, c) of the quintic a x + b x³ + c x⁵ that equioscillates around 1 on [low, high] (Remez)."""
    if low / high >= 1 - 5e-6:
        return 15 / 8 / high, -10 / 8 / high**3, 3 / 8 / high**5
    q, r = (3 * low + 1) / 4, (low + 3) / 4
    error, previous = math.inf, None
    while previous is None or abs(previous - error) > 1e-15:
        previous = error
        points = np.array([low, q, r, high])
        system = np.stack([points, points**3, points**5, np.array([1.0, -1.0, 1.0, -1.0])], axis=1)
        a, b, c, error = np.linalg.solve(system, np.ones(4))
        q, r = np.sqrt((-3 * b + np.array([-1.0, 1.0]) * math.sqrt(9 * b * b - 20 * a * c)) / (10 * c))
    return float(a), float(b), float(c)


def polar_express_coeffs(ns_steps: int, *, low: float = 1e-3, safety: float = 1e-2,
                         cushion: float = 0.02) -> tuple[tuple[float, float, float], ...]:
    """The first `ns_steps` Polar-Express triples: optimal quintics composed on [low, 1], each one mapping the
    current singular-value interval [l, u] into one centred on 1; all but the last shrunk by 1 + safety."""
    check_int("ns_steps", ns_steps)
    triples, upper = [], 1.0
    for step in range(ns_steps):
        a, b, c = _optimal_quintic(max(low, cushion * upper), upper)
        if cushion * upper > low:  # recentre the cushioned polynomial on [low, upper]
            p_low, p_up = (a * x + b * x**3 + c * x**5 for x in (low, upper))
            a, b, c = (v * 2 / (p_low + p_up) for v in (a, b, c))
        if step < ns_steps - 1:
            f = 1 + safety
            a, b, c = a / f, b / f**3, c / f**5
        triples.append((a, b, c))
        low = a * low + b * low**3 + c * low**5
        upper = 2 - low
    return tuple(triples)


def ns_coefficients(ns_coeffs: str, ns_steps: int) -> tuple[float, float, float] | tuple[tuple[float, ...], ...]:
    """The coefficients optax's Newton–Schulz gets: one triple, or `ns_steps` triples (Polar Express, the
    1.1 normalisation safety folded into the first)."""
    if ns_coeffs not in NS_COEFFS:
        raise ValueError(f"ns_coeffs must be one of {list(NS_COEFFS)}, got {ns_coeffs!r}")
    if ns_coeffs == "standard":
        return STANDARD_COEFFS
    (a, b, c), *rest = polar_express_coeffs(ns_steps)
    s = POLAR_EXPRESS_NORM_SAFETY
    return ((a / s, b / s**3, c / s**5), *rest)


def _cast_muon_leaves(dtype: Any, routing: Callable[[Any], Any], back: bool) -> optax.GradientTransformation:
    """Casts the Muon-routed leaves of the updates to `dtype` (or, with `back`, to the params' dtype)."""

    def update(updates, state, params=None):
        dims = routing(updates)

        def cast(u, d, p):
            if d is None:
                return u
            return u.astype(p.dtype if back else dtype)

        is_leaf = lambda d: d is None or isinstance(d, MuonDimensionNumbers)
        reference = params if params is not None else updates
        return jax.tree.map(cast, updates, dims, reference, is_leaf=is_leaf), state

    return optax.GradientTransformation(lambda params: optax.EmptyState(), update)


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
    ns_coeffs: str = "standard", ns_dtype: str = "float32",
) -> optax.GradientTransformationExtraArgs:
    """`optax.contrib.muon` with the paper's settings; `routing(params)` gives the dimension-number tree
    (default `muon_dimension_numbers`). Under `inject_hyperparams` pass `static_args="routing"`.

    optax routes by a `combine.partition` (= `optax.multi_transform`) over the labels this routing
    implies. Runs under standard dtype promotion (see `with_standard_promotion`). `ns_coeffs` ("standard" or
    "polar_express") and `ns_dtype` ("float32" or "bfloat16") choose the orthogonalisation (module docstring).
    """
    check_concrete(check_non_negative, "learning_rate", learning_rate)
    check_concrete(check_non_negative, "weight_decay", weight_decay)
    for name, value in (("beta", beta), ("adam_b1", adam_b1), ("adam_b2", adam_b2)):
        check_concrete(check_unit_interval, name, value)
    if consistent_rms is not None:
        check_concrete(check_non_negative, "consistent_rms", consistent_rms)
    if ns_dtype not in NS_DTYPES:
        raise ValueError(f"ns_dtype must be one of {list(NS_DTYPES)}, got {ns_dtype!r}")
    # Checked for every ns_coeffs: with the standard triple, 0 or fewer steps would skip orthogonalisation.
    check_int("ns_steps", ns_steps)
    coeffs = ns_coefficients(ns_coeffs, ns_steps)
    routing = routing or muon_dimension_numbers
    muon = optax.contrib.muon(
        learning_rate, ns_coeffs=coeffs, ns_steps=ns_steps, beta=beta, eps=eps,
        weight_decay=weight_decay, nesterov=True, adam_b1=adam_b1, adam_b2=adam_b2,
        adam_weight_decay=weight_decay, consistent_rms=consistent_rms,
        muon_weight_dimension_numbers=routing,
        # The momentum buffer would otherwise take the float32 params' dtype again, and Newton–Schulz (which
        # runs on it) would stay in float32 whatever the gradients' dtype.
        mu_dtype=None if ns_dtype == "float32" else NS_DTYPES[ns_dtype],
    )
    if ns_dtype != "float32":
        muon = optax.chain(_cast_muon_leaves(NS_DTYPES[ns_dtype], routing, back=False), muon,
                           _cast_muon_leaves(None, routing, back=True))
    return with_standard_promotion(muon)


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
    ns_coeffs: str = "standard"
    ns_dtype: str = "float32"


@register_optimizer("muon")
def _muon_factory(learning_rate: optax.ScalarOrSchedule, cfg: Any) -> optax.GradientTransformationExtraArgs:
    """Muon fine-tuning recipe: options muon_beta (0.95), consistent_rms (0.2), ns_steps (5), ns_coeffs
    ("standard" | "polar_express"), ns_dtype ("float32" | "bfloat16"); the AdamW
    group uses cfg.b1, cfg.b2, cfg.eps; cfg.weight_decay on both groups (as in the paper's code)."""
    options = optimizer_options(cfg, "muon", MuonOptions)
    return muon_finetune(
        learning_rate, beta=options.muon_beta, ns_steps=options.ns_steps, eps=cfg.eps,
        weight_decay=cfg.weight_decay, adam_b1=cfg.b1, adam_b2=cfg.b2, consistent_rms=options.consistent_rms,
        ns_coeffs=options.ns_coeffs, ns_dtype=options.ns_dtype,
    )
