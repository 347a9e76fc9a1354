"""Quantising a decoder LM: every mixer / MLP linear layer rounded by one method, and the output KL it costs.

    moments = input_moments(model, calibration)                 # GPTQ / LDLQ: layer proxy E[x xᵀ]
    sketch = kl_sketch_b(model, calibration, jax.random.key(0))  # YAQA: Kronecker factors of the KL Hessian
    quantized = quantize_model(model, "yaqa", bits=2, hessians=sketch)
    kl = output_kl(model, quantized, held_out)                   # mean KL(p_orig ‖ p_quantized) per token

`quantize_model` returns a copy; embeddings, norms and the head keep their float32 values. Every method rounds
onto the same per-row grid (`grid.row_steps` of the original weights), so the methods differ only in how they
round.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from icml26zoo.quant.grid import check_bits, row_steps
from icml26zoo.quant.hessians import _batch_parts
from icml26zoo.quant.rounding import DAMPING, gptq_round, ldlq_round, rtn_round, yaqa_round
from icml26zoo.quant.sites import linear_sites, read_kernel, write_kernel

__all__ = ["METHODS", "output_kl", "quantize_model", "quantize_weight"]

METHODS = ("rtn", "gptq", "ldlq", "yaqa")


def quantize_weight(w: np.ndarray, method: str, bits: int, hessian: Any = None, *, scale: str = "mse",
                    damping: float = DAMPING) -> np.ndarray:
    """One layer: w [m, n] (rows = outputs) -> Ŵ [m, n] by `method` at `bits`.

    hessian: None for "rtn"; H_in [n, n] for "gptq" / "ldlq"; (H_in [n, n], H_out [m, m]) for "yaqa".
    """
    _check_method(method)
    bits = check_bits(bits)
    steps = row_steps(w, bits, scale)
    if method == "rtn":
        return rtn_round(w, steps, bits)
    if method == "yaqa":
        if not isinstance(hessian, tuple) or len(hessian) != 2:
            raise ValueError(f"hessian must be (H_in, H_out) for method 'yaqa', got {type(hessian).__name__}")
        return yaqa_round(w, hessian[0], hessian[1], steps, bits, damping=damping)
    if hessian is None or isinstance(hessian, tuple):
        raise ValueError(f"hessian must be one matrix H_in [n, n] for method {method!r}, got {type(hessian).__name__}")
    rounder = gptq_round if method == "gptq" else ldlq_round
    return rounder(w, hessian, steps, bits, damping=damping)


def quantize_model(model: nnx.Module, method: str, bits: int, hessians: Mapping[str, Any] | None = None, *,
                   scale: str = "mse", damping: float = DAMPING) -> nnx.Module:
    """A copy of `model` with every site's kernel rounded by `method` at `bits` (ValueError otherwise).

    hessians: {site name: hessian} as `quantize_weight` takes it (`input_moments` for gptq / ldlq,
    `kl_sketch_b` for yaqa); None for rtn. A site missing from it raises ValueError naming the site.
    """
    _check_method(method)
    bits = check_bits(bits)
    sites = linear_sites(model)
    if method != "rtn":
        if hessians is None:
            raise ValueError(f"hessians must be given for method {method!r} (input_moments / kl_sketch_b), got None")
        missing = [site.name for site in sites if site.name not in hessians]
        if missing:
            raise ValueError(f"hessians has no entry for site {missing[0]!r} ({len(missing)} missing)")
    copy = nnx.clone(model)
    params = nnx.to_pure_dict(nnx.state(copy, nnx.Param))
    for site in sites:
        kernel = np.asarray(read_kernel(params, site), np.float64)  # [n, m] = Wᵀ
        hessian = None if method == "rtn" else hessians[site.name]
        w_hat = quantize_weight(kernel.T, method, bits, hessian, scale=scale, damping=damping)
        write_kernel(params, site, jnp.asarray(w_hat.T, jnp.float32))
    state = nnx.state(copy, nnx.Param)
    nnx.replace_by_pure_dict(state, params)
    nnx.update(copy, state)
    return copy


def output_kl(reference: nnx.Module, quantized: nnx.Module, batches: Iterable[dict[str, Any]]) -> float:
    """Mean over tokens with weight > 0 of KL(p_reference ‖ p_quantized) of the next-token distributions, nats."""

    @nnx.jit
    def kl_sum(ref: nnx.Module, quant: nnx.Module, tokens: jax.Array, segments: jax.Array | None,
               weights: jax.Array) -> tuple[jax.Array, jax.Array]:
        log_p = jax.nn.log_softmax(ref(tokens, segment_ids=segments), axis=-1)
        log_q = jax.nn.log_softmax(quant(tokens, segment_ids=segments), axis=-1)
        kl = jnp.sum(jnp.exp(log_p) * (log_p - log_q), axis=-1)
        return jnp.sum(kl * weights), jnp.sum(weights)

    total, count = 0.0, 0.0
    for batch in batches:
        tokens, segments, weights = _batch_parts(batch)
        value, weight = kl_sum(reference, quantized, tokens, segments, weights)
        total, count = total + float(value), count + float(weight)
    if count == 0:
        raise ValueError("batches must hold at least one token with weight > 0, got none")
    return total / count


def _check_method(method: object) -> None:
    if method not in METHODS:
        raise ValueError(f"method must be one of {list(METHODS)}, got {method!r}")
