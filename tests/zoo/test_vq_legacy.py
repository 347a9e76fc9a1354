"""The legacy-β form of the VQ loss (taming-transformers' VectorQuantizer2, legacy=True, as XR-1 uses it)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from icml26zoo.vq import VectorQuantizer, vector_quantize


def _pair():
    z = jax.random.normal(jax.random.key(0), (3, 5, 4))
    codebook = jax.random.normal(jax.random.key(1), (6, 4))
    return z, codebook


def test_legacy_puts_beta_on_the_codebook_term_and_the_default_on_the_commitment_term():
    z, codebook = _pair()
    chosen = codebook[vector_quantize(z, codebook).indices]
    squared = float(jnp.mean((z - chosen) ** 2))
    legacy = vector_quantize(z, codebook, commitment_cost=0.25, legacy=True)
    modern = vector_quantize(z, codebook, commitment_cost=0.25)
    # Both terms have the same value; only their gradients differ, so the weights show in the gradients.
    np.testing.assert_allclose(float(legacy.loss), 1.25 * squared, rtol=1e-5)
    np.testing.assert_allclose(float(modern.loss), 1.25 * squared, rtol=1e-5)

    def grads(legacy_flag):
        return jax.jit(jax.grad(lambda zz, cb: vector_quantize(zz, cb, commitment_cost=0.25, legacy=legacy_flag).loss,
                                argnums=(0, 1)))(z, codebook)

    (gz_legacy, gc_legacy), (gz_modern, gc_modern) = grads(True), grads(False)
    # legacy: encoder gets weight 1, codebook 0.25; non-legacy the other way round.
    np.testing.assert_allclose(gz_legacy, 4.0 * gz_modern, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(gc_modern, 4.0 * gc_legacy, rtol=1e-5, atol=1e-7)
    direct = 2.0 * (z - chosen) / z.size
    np.testing.assert_allclose(gz_legacy, direct, rtol=1e-5, atol=1e-7)


def test_module_passes_legacy_through_and_rejects_non_bool():
    z, _ = _pair()
    module = VectorQuantizer(6, 4, legacy=True, rngs=nnx.Rngs(0))
    out = module(z)
    expected = vector_quantize(z, module.codebook[...], legacy=True)
    np.testing.assert_allclose(float(out.loss), float(expected.loss), rtol=1e-6)
    with pytest.raises(ValueError, match="legacy must be True or False, got 1"):
        VectorQuantizer(6, 4, legacy=1, rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match="legacy"):
        vector_quantize(z, module.codebook[...], legacy="yes")
