"""Training FLOPs per token (MaxText convention) and the matmul peak used for CPU "MFU".

MaxText counts 6 FLOPs per weight per token (forward + backward) for every matmul weight, the output
head included and the embedding lookup excluded, plus causal attention's two T×T matmuls halved:
6 · L · T · H · Dh per token (forward 2 · 2 · T · H · Dh / 2, times 3 for forward + backward).
"""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp

from icml26zoo.models.config import ModelConfig


def matmul_params(cfg: ModelConfig) -> int:
    """Weights that multiply activations per token in the Llama-style LM (norm scales excluded)."""
    d, h, hkv, dh, f = cfg.d_model, cfg.num_heads, cfg.num_kv_heads, cfg.resolved_head_dim, cfg.resolved_mlp_dim
    attention = d * h * dh + 2 * d * hkv * dh + h * dh * d
    mlp = 3 * d * f
    return cfg.num_layers * (attention + mlp) + d * cfg.vocab_size


def train_flops_per_token(cfg: ModelConfig, seq_len: int) -> float:
    """Forward + backward FLOPs per trained token for a causal softmax-attention LM of `cfg`."""
    attention = 6 * cfg.num_layers * seq_len * cfg.num_heads * cfg.resolved_head_dim
    return 6.0 * matmul_params(cfg) + attention


def measure_matmul_flops(dtype: str = "float32", size: int = 1024, repeats: int = 5) -> float:
    """FLOP/s of a jitted [size, size] @ [size, size] matmul on the default device (best of `repeats`)."""
    a = jnp.ones((size, size), dtype)
    b = jnp.ones((size, size), dtype)
    matmul = jax.jit(lambda x, y: x @ y)
    matmul(a, b).block_until_ready()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        matmul(a, b).block_until_ready()
        best = min(best, time.perf_counter() - start)
    return 2.0 * size**3 / best


def mesh_peak_flops(devices, dtype: str = "float32") -> float:
    """Measured matmul FLOP/s of the whole mesh: one device's rate times the device count.

    Simulated CPU devices share the same cores, so on CPU the mesh peak is one device's rate.
    """
    devices = list(devices)
    rate = measure_matmul_flops(dtype)
    return rate if devices[0].platform == "cpu" else rate * len(devices)
