"""Kernel tests compile with XLA's cheap pipeline (see tests/conftest.py `fast_compile`).

Every kernel test compares a fast path with its reference within a tolerance, or checks a structural property
(exact zeros across segment boundaries, NaN isolation) that does not depend on fusion, so the unoptimized
pipeline checks the same things at a fraction of the compile time."""

import pytest

pytestmark = []


@pytest.fixture(scope="module", autouse=True)
def _kernel_tests_compile_cheaply(fast_compile):
    yield
