"""Kernel tests compile with XLA's cheap pipeline (see tests/conftest.py `fast_compile`) and run one module per
pytest-xdist worker.

Every kernel test compares a fast path with its reference within a tolerance, or checks a structural property
(exact zeros across segment boundaries, NaN isolation) that does not depend on fusion, so the unoptimized
pipeline checks the same things at a fraction of the compile time.

Compiles dominate these modules, and their tests share compiled programs (the harness caches one jit per path
and shapes: "compile once, check many"). Under `pytest -n 2 --dist loadgroup` (make test) tests are dealt out one
by one, so the two workers would each compile a module's programs; one `xdist_group` per module keeps a module on
one worker, where every program compiles once.
"""

import pathlib

import pytest

_HERE = pathlib.Path(__file__).parent


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.parent == _HERE:
            item.add_marker(pytest.mark.xdist_group(f"kernels-{item.path.stem}"))


@pytest.fixture(scope="module", autouse=True)
def _kernel_tests_compile_cheaply(fast_compile):
    yield
