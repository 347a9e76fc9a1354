"""Lowering cases of the chunked recurrences (tests/kernels/lowering_support.py): delta rule (DeltaNet, Gated
DeltaNet, KDA), momentum delta rule, SSD (scalar and diagonal decay), all with implementation="pallas".

Tiny shapes keep the export cheap: T = 20 with chunk 16 (a padded last chunk), two packed segments, and
feature sizes that are not powers of two (V = P = 12) so the Triton branch's padding is exercised.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from lowering_support import LoweringCase

from icml26zoo.kernels.delta_rule import gated_delta_rule
from icml26zoo.kernels.momentum_delta_rule import momentum_delta_rule
from icml26zoo.kernels.ssd import ssd

B, T, H, K, V = 1, 20, 2, 16, 12
P, N = 12, 8
CHUNK = 16
SEGMENTS = jnp.asarray([[0] * 9 + [1] * (T - 9)], jnp.int32)


def _draw(shapes: Sequence[tuple[int, ...]], dtypes: Sequence[jnp.dtype]) -> list[jax.Array]:
    """Small random arrays of the given shapes and dtypes."""
    rng = np.random.default_rng(0)
    return [jnp.asarray(rng.uniform(-0.5, 0.5, s), d) for s, d in zip(shapes, dtypes, strict=True)]


def _gates(*shapes: tuple[int, ...], sign: float = -1.0) -> list[jax.Array]:
    """float32 gates with magnitudes in [0.01, 0.5): log-decays (sign -1) or rates such as beta (sign +1)."""
    rng = np.random.default_rng(1)
    return [jnp.asarray(sign * rng.uniform(0.01, 0.5, s), jnp.float32) for s in shapes]


def _delta_case(name: str, g_shape: tuple[int, ...] | None) -> LoweringCase:
    def fn(q: jax.Array, k: jax.Array, v: jax.Array, beta: jax.Array, *g: jax.Array) -> tuple[jax.Array, ...]:
        return gated_delta_rule(q, k, v, beta=beta, g=g[0] if g else None, segment_ids=SEGMENTS, chunk_size=CHUNK,
                                implementation="pallas")

    def make_inputs(dtype: jnp.dtype) -> list[jax.Array]:
        qkv = _draw([(B, T, H, K), (B, T, H, K), (B, T, H, V)], [dtype] * 3)
        beta = jnp.full((B, T, H), 0.5, jnp.float32)
        return qkv + [beta] + (_gates(g_shape) if g_shape else [])

    return LoweringCase(name, fn, make_inputs)


def _mdn(q: jax.Array, k: jax.Array, v: jax.Array, p: jax.Array, g: jax.Array, log_mu: jax.Array, beta: jax.Array,
         eta: jax.Array) -> tuple[jax.Array, tuple[jax.Array, jax.Array]]:
    return momentum_delta_rule(q, k, v, p, g=g, log_mu=log_mu, beta=beta, eta=eta, segment_ids=SEGMENTS,
                               chunk_size=CHUNK, implementation="pallas")


def _mdn_inputs(dtype: jnp.dtype) -> list[jax.Array]:
    qkvp = _draw([(B, T, H, K)] * 2 + [(B, T, H, V), (B, T, H, K)], [dtype] * 4)
    return qkvp + _gates((B, T, H), (B, T, H)) + _gates((B, T, H), (B, T, H), sign=1.0)


def _ssd_case(name: str, a_shape: tuple[int, ...]) -> LoweringCase:
    fn: Callable[..., tuple[jax.Array, jax.Array]] = lambda x, a, b, c: ssd(
        x, a, b, c, segment_ids=SEGMENTS, chunk_size=CHUNK, implementation="pallas")

    def make_inputs(dtype: jnp.dtype) -> list[jax.Array]:
        x, b, c = _draw([(B, T, H, P), (B, T, H, N), (B, T, H, N)], [dtype] * 3)
        return [x] + _gates(a_shape) + [b, c]

    return LoweringCase(name, fn, make_inputs)


CASES: list[LoweringCase] = [
    _delta_case("deltanet", None),
    _delta_case("gdn", (B, T, H)),
    _delta_case("kda", (B, T, H, K)),
    LoweringCase("mdn", _mdn, _mdn_inputs),
    _ssd_case("ssd_scalar", (B, T, H)),
    _ssd_case("ssd_diagonal", (B, T, H, N)),
]
