"""Lowering cases of the attention ops (tests/kernels/lowering_support.py).

One case per op, through the public entry with implementation="pallas" and the default blocks (Triton 32 /
16, TPU 128): T = 200 is a multiple of neither, so every kernel walks several blocks and a padded tail.
Each case carries every optional input at once (the scalar gate, packed segment ids, GQA with two query
heads per key/value head), so the exported module holds the kernels with all their refs; the shapes are
tiny because export time, not data, is the cost (about 1-3 s per row).
"""

import jax
import jax.numpy as jnp
import numpy as np
from lowering_support import LoweringCase

from icml26zoo.kernels import forgetting_attention, value_forget_attention
from icml26zoo.kernels.block_sparse_attention import block_sparse_attention, random_lists

B, T, H, HKV, D = 1, 200, 2, 1, 16
# Two packed segments; the boundary is inside a block for every default block size.
SEGMENT_IDS = jnp.asarray(np.repeat([[0, 1]], [70, 130], axis=1), jnp.int32)


def _normal(rng: np.random.Generator, shape: tuple[int, ...], dtype: jnp.dtype):
    return jnp.asarray(rng.standard_normal(shape), dtype)


def _gate(rng: np.random.Generator, shape: tuple[int, ...]):
    return jnp.asarray(rng.uniform(-1.0, 0.0, shape), jnp.float32)


def _fox_inputs(dtype: jnp.dtype):
    rng = np.random.default_rng(0)
    return [_normal(rng, (B, T, H, D), dtype), _normal(rng, (B, T, HKV, D), dtype),
            _normal(rng, (B, T, HKV, D), dtype), _gate(rng, (B, T, H))]


def _fox(q, k, v, log_fgate):
    return forgetting_attention(q, k, v, log_fgate, segment_ids=SEGMENT_IDS, implementation="pallas")


def _fix_inputs(dtype: jnp.dtype):
    return _fox_inputs(dtype) + [_gate(np.random.default_rng(1), (B, T, H, D))]


def _fix(q, k, v, log_fgate, log_vgate):
    return value_forget_attention(q, k, v, log_vgate, log_fgate=log_fgate, segment_ids=SEGMENT_IDS,
                                  implementation="pallas")


# Block-sparse attention needs a block that both layouts take as is (GPU: power of two; TPU: multiple of 16).
SPARSE_BLOCK = 32
SPARSE_LISTS = random_lists(jax.random.key(0), B, H, T, SPARSE_BLOCK, 0.5)


def _sparse_inputs(dtype: jnp.dtype):
    return _fox_inputs(dtype)[:3]


def _sparse(q, k, v):
    return block_sparse_attention(q, k, v, SPARSE_LISTS, block_size=SPARSE_BLOCK, segment_ids=SEGMENT_IDS,
                                  implementation="pallas")


CASES: list[LoweringCase] = [
    LoweringCase(name="forgetting_attention_fox_gqa_packed", fn=_fox, make_inputs=_fox_inputs),
    LoweringCase(name="value_forget_attention_fix_gqa_packed", fn=_fix, make_inputs=_fix_inputs),
    LoweringCase(name="block_sparse_attention_gqa_packed", fn=_sparse, make_inputs=_sparse_inputs),
]
