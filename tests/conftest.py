"""Test-session setup: 8 simulated CPU devices, strict dtype promotion and XLA:CPU's cheaper emitters, before JAX
initializes (ZOO_FUSION_EMITTERS=1 keeps XLA's default emitters).

No persistent compilation cache: a worker once aborted (Fatal Python error: Aborted) while running an
executable that an earlier train() call in the same test had written to the cache, so every test
compiles its own programs.
"""

import gc
import os
import subprocess
import sys

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

# XLA:CPU's elemental emitters instead of its fusion emitters: the suite's tiny programs compile 2-3x cheaper
# (compilation is most of the suite's CPU time), and results move by about 1e-8 relative, far below every
# tolerance; both sides of every comparison compile the same way. An XLA without the flag would abort at start-up
# on an unknown XLA_FLAGS entry, so the flag is probed once in a child interpreter; pytest-xdist's workers inherit
# the result through the environment.
_ELEMENTAL_EMITTERS = "--xla_cpu_use_fusion_emitters=false"


def _xla_accepts(flag: str) -> bool:
    env = dict(os.environ, XLA_FLAGS=f"{os.environ.get('XLA_FLAGS', '')} {flag}".strip())
    probe = subprocess.run([sys.executable, "-c", "import jax; jax.devices()"], env=env, capture_output=True,
                           timeout=300)
    return probe.returncode == 0


if _ELEMENTAL_EMITTERS not in os.environ.get("XLA_FLAGS", "") and "ZOO_XLA_FLAGS_PROBED" not in os.environ:
    os.environ["ZOO_XLA_FLAGS_PROBED"] = "1"
    if os.environ.get("ZOO_FUSION_EMITTERS") != "1" and _xla_accepts(_ELEMENTAL_EMITTERS):
        os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {_ELEMENTAL_EMITTERS}".strip()

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


@pytest.fixture(scope="module", autouse=True)
def release_compiled_programs():
    """Drops every compiled program after each test module.

    Each live XLA:CPU executable holds about three memory mappings of its JIT code, and JAX's jit caches keep
    executables alive for the life of the process. A worker that runs a few thousand tests accumulates tens of
    thousands of them; past the kernel's vm.max_map_count (65,530 by default) LLVM's next code mapping fails
    and the worker dies with a segmentation fault inside `backend_compile_and_load`. Clearing at module
    boundaries keeps a worker near a few thousand mappings at a small recompilation cost.
    """
    yield
    jax.clear_caches()
    gc.collect()


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


# --- Suite profile (scripts/suite_profile.py) -------------------------------------------------------------------
# With ZOO_SUITE_PROFILE=<dir>, every worker appends one JSON line per test to <dir>/<worker>.jsonl: the test's
# CPU seconds in the worker (all threads, setup + call + teardown), the CPU of child processes it waited for
# (subprocess tests, notebooks' kernels), and its wall time. Off by default: the suite itself never reads it.
_PROFILE_DIR = os.environ.get("ZOO_SUITE_PROFILE")


if _PROFILE_DIR:
    import json as _json
    import pathlib as _pathlib
    import resource as _resource
    import time as _time

    def _children_cpu() -> float:
        usage = _resource.getrusage(_resource.RUSAGE_CHILDREN)
        return usage.ru_utime + usage.ru_stime

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(item, nextitem):
        cpu, children, wall = _time.process_time(), _children_cpu(), _time.perf_counter()
        yield
        record = {"test": item.nodeid, "cpu": _time.process_time() - cpu, "children": _children_cpu() - children,
                  "wall": _time.perf_counter() - wall}
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        path = _pathlib.Path(_PROFILE_DIR) / f"{worker}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a") as stream:
            stream.write(_json.dumps(record) + "\n")
