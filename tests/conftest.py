"""Test-session setup: 8 simulated CPU devices and strict dtype promotion, before JAX initializes.

No persistent compilation cache: a worker once aborted (Fatal Python error: Aborted) while running an
executable that an earlier train() call in the same test had written to the cache, so every test
compiles its own programs.
"""

import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import jax  # noqa: E402
import pytest  # noqa: E402

jax.config.update("jax_num_cpu_devices", 8)
jax.config.update("jax_numpy_dtype_promotion", "strict")


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


@pytest.fixture(autouse=True)
def no_leaked_compilation_cache():
    """A test must not leave JAX's persistent compilation cache switched on (e.g. a script's `main` pointing it
    at a temporary directory): later compilations in the same worker would write there, and serializing some
    executables has crashed the worker. Fails the leaking test and switches the cache back off."""
    before = jax.config.jax_compilation_cache_dir
    yield
    after = jax.config.jax_compilation_cache_dir
    if after != before:
        jax.config.update("jax_compilation_cache_dir", before)
        pytest.fail(f"the test left jax_compilation_cache_dir set to {after!r} (was {before!r})")
