"""Test-session setup: 8 simulated CPU devices and strict dtype promotion, before JAX initializes.

Compiled executables go to a persistent cache shared by the pytest-xdist workers, so tests that run the
same program (the same tiny config trained twice, say) compile it once.
"""

import os
import tempfile

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import jax  # noqa: E402

jax.config.update("jax_num_cpu_devices", 8)
jax.config.update("jax_numpy_dtype_promotion", "strict")
jax.config.update("jax_compilation_cache_dir", os.path.join(tempfile.gettempdir(), "zoo-test-jax-cache"))
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)
