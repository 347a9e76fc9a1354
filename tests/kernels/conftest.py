"""Kernel tests compile with XLA's cheap pipeline (see tests/conftest.py `fast_compile`) and run one module per
pytest-xdist worker.

Every kernel test compares a fast path with its reference within a tolerance, or checks a structural property
(exact zeros across segment boundaries, NaN isolation) that does not depend on fusion, so the unoptimized
pipeline checks the same things at a fraction of the compile time.

Compiles dominate these modules, and their tests share compiled programs (the harness caches one jit per path
and shapes: "compile once, check many"); `make test` runs pytest-xdist with `--dist loadscope`, which keeps a
module on one worker, where every program compiles once.
"""

import pytest


@pytest.fixture(scope="module", autouse=True)
def _kernel_tests_compile_cheaply(fast_compile):
    yield
