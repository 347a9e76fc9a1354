"""The reproductions' tests build and compile many tiny models: they run under XLA's cheap pipeline."""

import jax
import pytest


@pytest.fixture(autouse=True)
def cheap_xla_pipeline(request):
    """jax_disable_most_optimizations for each test, restored afterwards (compile time dominates here). A module
    that compares bit-exactly against separately compiled code (e.g. optax) sets `EXACT_COMPILE = True`."""
    if getattr(request.module, "EXACT_COMPILE", False):
        yield
        return
    previous = jax.config.read("jax_disable_most_optimizations")
    jax.config.update("jax_disable_most_optimizations", True)
    yield
    jax.config.update("jax_disable_most_optimizations", previous)
