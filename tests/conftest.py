"""Test-session setup: 8 simulated CPU devices and strict dtype promotion, before JAX initializes.

No persistent compilation cache: a worker once aborted (Fatal Python error: Aborted) while running an
executable that an earlier train() call in the same test had written to the cache, so every test
compiles its own programs.
"""

import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import jax  # noqa: E402

jax.config.update("jax_num_cpu_devices", 8)
jax.config.update("jax_numpy_dtype_promotion", "strict")
