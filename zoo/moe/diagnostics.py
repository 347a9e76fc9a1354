"""Routing diagnostics from the MoE layers' aux outputs: expert load, entropies, co-selection and collapse.

`routing_diagnostics(aux)` takes one layer's aux (`MoEFeedForward`) or stacked aux ([L, ...] leaves, e.g.
the LM's from `icml26zoo.losses.moe.forward_with_aux`) and returns arrays; `diagnostics_scalars` flattens them
into named scalars ("moe/collapse", "moe/layer0/load/3"), which the MoE objectives return as train-time
diagnostics (the trainer logs and plots them), and `diagnostics_metrics` into Python floats.

  load_entropy    H(load) = −Σ_e f_e log f_e over the experts' shares f of routed assignments
  collapse        1 − H(load) / log E: 0 when every expert gets the same share, 1 when one takes all
  max_load_ratio  E · max_e f_e: 1 when balanced, E when collapsed
  coselection     mean |phi correlation| of two experts' selection indicators over expert pairs: how
                  predictably experts are chosen together (MP-MoE's target of diversity)
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from icml26zoo.moe.mahalanobis import FREQUENCY_CLIP


def phi_correlation(cooccurrence: jax.Array) -> jax.Array:
    """Phi correlation [..., E, E] of selection indicators from co-occurrence shares [..., E, E] (diag = usage)."""
    f = jnp.clip(jnp.diagonal(cooccurrence, axis1=-2, axis2=-1), FREQUENCY_CLIP, 1 - FREQUENCY_CLIP)
    spread = jnp.sqrt(f * (1 - f))
    return (cooccurrence - f[..., :, None] * f[..., None, :]) / (spread[..., :, None] * spread[..., None, :])


def routing_diagnostics(aux: dict[str, jax.Array]) -> dict[str, jax.Array]:
    """Diagnostics of aux with leaves [..., E] ("load"), [..., E, E] ("cooccurrence") and [...] scalars.

    Returns arrays with the leading axes [...] (e.g. [L] for the LM): load [..., E], load_entropy,
    collapse, max_load_ratio, coselection, router_entropy, dropped.
    """
    load = aux["load"].astype(jnp.float32)
    experts = load.shape[-1]
    load_entropy = -jnp.sum(load * jnp.log(jnp.maximum(load, 1e-30)), axis=-1)
    phi = phi_correlation(aux["cooccurrence"].astype(jnp.float32))
    off_diagonal = 1.0 - jnp.eye(experts, dtype=jnp.float32)
    pairs = max(experts * (experts - 1), 1)
    return {
        "load": load,
        "load_entropy": load_entropy,
        "collapse": 1.0 - load_entropy / math.log(experts) if experts > 1 else jnp.zeros_like(load_entropy),
        "max_load_ratio": experts * jnp.max(load, axis=-1),
        "coselection": jnp.sum(jnp.abs(phi) * off_diagonal, axis=(-2, -1)) / pairs,
        "router_entropy": aux["router_entropy"],
        "dropped": aux["dropped"],
    }


def diagnostics_scalars(diagnostics: dict[str, jax.Array], prefix: str = "moe/") -> dict[str, jax.Array]:
    """Named scalar arrays (traceable): each scalar diagnostic averaged over layers ("moe/collapse") and per
    layer ("moe/layer0/collapse"), and every expert's load per layer ("moe/layer0/load/3")."""
    out: dict[str, jax.Array] = {}
    for name, value in diagnostics.items():
        value = jnp.asarray(value, jnp.float32)
        if name == "load":
            value = value.reshape(-1, value.shape[-1])
            for layer in range(value.shape[0]):
                out.update({f"{prefix}layer{layer}/load/{e}": value[layer, e] for e in range(value.shape[1])})
            continue
        value = value.reshape(-1)
        out[f"{prefix}{name}"] = jnp.mean(value)
        out.update({f"{prefix}layer{layer}/{name}": value[layer] for layer in range(value.shape[0])})
    return out


def diagnostics_metrics(diagnostics: dict[str, jax.Array], prefix: str = "moe/") -> dict[str, float]:
    """`diagnostics_scalars` as Python floats, for a metrics writer."""
    return {name: float(value) for name, value in jax.device_get(diagnostics_scalars(diagnostics, prefix)).items()}
