"""Fixtures shared by the zoo tests (opt-in: nothing here is autouse)."""

import jax
import pytest


@pytest.fixture(scope="module")
def fast_compile():
    """XLA's cheap pipeline for one test module, restored afterwards.

    Opt in with `pytestmark = pytest.mark.usefixtures("fast_compile")`. Compile time dominates tiny
    models on CPU (about 3x less with optimizations off). Only for tests that compare programs compiled
    under the same setting within a tolerance: bit-exact comparisons against separately compiled code
    (e.g. an optax reference) can change, since the unoptimized pipeline skips fusion.
    """
    previous = jax.config.read("jax_disable_most_optimizations")
    jax.config.update("jax_disable_most_optimizations", True)
    yield
    jax.config.update("jax_disable_most_optimizations", previous)
