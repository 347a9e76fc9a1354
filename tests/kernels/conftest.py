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
    """One `xdist_group` per kernel test module.

    xdist's loadgroup scheduler reads a test's group from a "@group" suffix of its node id, which xdist 3.8
    writes to `item._nodeid`; pytest 9 keeps the id in `item._id` (a NodeId) and never reads `_nodeid`, so the
    suffix never lands and every test is dealt out alone (tests/test_install.py's group included). Under
    loadgroup this hook writes the suffix where pytest 9 reads it; if a later xdist appends its own, the
    scheduler still takes the last "@" part."""
    if not config.pluginmanager.hasplugin("xdist"):
        return
    regroup = getattr(config.option, "loadgroup", False)  # set by xdist in its workers
    for item in items:
        if item.path.parent != _HERE:
            continue
        group = f"kernels-{item.path.stem}"
        item.add_marker(pytest.mark.xdist_group(group))
        node_id = getattr(item, "_id", None)
        if regroup and "@" not in item.nodeid and hasattr(node_id, "parse"):
            item._id = type(node_id).parse(f"{item.nodeid}@{group}")


@pytest.fixture(scope="module", autouse=True)
def _kernel_tests_compile_cheaply(fast_compile):
    yield
