"""Linen users get the LM through flax.nnx.bridge.to_linen."""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
import pytest
from flax import nnx

from icml26zoo.models import DecoderLM, ModelConfig, count_params

pytestmark = pytest.mark.usefixtures("fast_compile")

CFG = ModelConfig(vocab_size=64, d_model=32, num_layers=2, num_heads=4, num_kv_heads=2, max_seq_len=32)


def test_to_linen_init_apply_and_decode_match_nnx():
    linen_model = nnx.bridge.to_linen(DecoderLM, CFG)
    tokens = jax.random.randint(jax.random.key(1), (2, 10), 0, CFG.vocab_size, dtype=jnp.int32)
    variables = linen_model.init(jax.random.key(0), tokens)
    assert set(variables) == {"params"}
    logits = jax.jit(linen_model.apply)(variables, tokens)
    chex.assert_shape(logits, (2, 10, CFG.vocab_size))

    # The same parameters in an NNX model give the same logits.
    abstract = nnx.eval_shape(lambda: DecoderLM(CFG, rngs=nnx.Rngs(0)))
    graphdef, state = nnx.split(abstract)
    nnx.replace_by_pure_dict(state, variables["params"])
    model = nnx.merge(graphdef, state)
    assert count_params(model) == sum(leaf.size for leaf in jax.tree.leaves(variables["params"]))
    chex.assert_trees_all_close(model(tokens), logits, atol=1e-5, rtol=1e-5)

    # Methods other than __call__ go through nnx_method (decoding from Linen).
    cache = model.init_cache(2, 16)
    step_logits, new_cache = linen_model.apply(variables, tokens[:, :4], cache, nnx_method="decode")
    chex.assert_trees_all_close(step_logits, logits[:, :4], atol=1e-5, rtol=1e-5)
    assert int(new_cache.index) == 4
