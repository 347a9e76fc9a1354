"""The grouped matmul (MoE expert dispatch): the ragged_dot path (xla) and the one-hot reference against a float64
per-row loop, outputs and gradients with random cotangents, dropped rows, empty groups, odd sizes, dtypes,
and bad inputs naming the op and the argument."""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from icml26zoo import kernels
from icml26zoo.kernels import grouped_matmul

# float32 matmuls of K <= 7 terms against a float64 loop; both paths accumulate in float32.
TOLERANCE = {"atol": 1e-5, "rtol": 1e-5}
PATHS = ("reference", "xla")


def _loop(x: np.ndarray, w: np.ndarray, ids: np.ndarray, cotangent: np.ndarray):
    """float64 oracle: (out [M, N], dx [M, K], dw [G, K, N]) by a loop over rows; id G is a dropped row."""
    x, w, cotangent = (np.asarray(a, np.float64) for a in (x, w, cotangent))
    groups = w.shape[0]
    out, dx, dw = np.zeros((x.shape[0], w.shape[2])), np.zeros_like(x), np.zeros_like(w)
    for m, g in enumerate(np.asarray(ids)):
        if g < groups:
            out[m] = x[m] @ w[g]
            dx[m] = w[g] @ cotangent[m]
            dw[g] += np.outer(x[m], cotangent[m])
    return out, dx, dw


@jax.jit
def _paths(x, w, group_ids, cotangent):
    """{path: (out, (dx, dw))} through one VJP per path with the same random cotangent."""
    results = {}
    for path in PATHS:
        out, vjp = jax.vjp(lambda x, w, path=path: grouped_matmul(x, w, group_ids, implementation=path), x, w)
        results[path] = (out, vjp(cotangent))
    return results


def _problem(seed: int, rows: int, k_in: int, n_out: int, groups: int, ids=None):
    keys = jax.random.split(jax.random.key(seed), 4)
    x = jax.random.normal(keys[0], (rows, k_in))
    w = jax.random.normal(keys[1], (groups, k_in, n_out))
    if ids is None:
        ids = jax.random.randint(keys[2], (rows,), 0, groups + 1)
    cotangent = jax.random.normal(keys[3], (rows, n_out))
    return x, w, jnp.asarray(ids, jnp.int32), cotangent


CASES = {
    # Ids in [0, G]: G marks a dropped row; group 2 stays empty.
    "dropped_and_empty": (13, 6, 5, 4, [0, 3, 4, 1, 0, 4, 3, 3, 1, 0, 0, 4, 1]),
    "odd_sizes": (7, 3, 1, 5, None),
    "one_row": (1, 5, 7, 3, [2]),
    "one_group": (9, 4, 3, 1, [0, 1, 0, 0, 1, 0, 0, 0, 1]),
    "all_dropped": (6, 4, 3, 3, [3] * 6),
    "every_group_empty_but_the_last": (5, 2, 4, 6, [5, 5, 6, 5, 6]),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_paths_equal_a_per_row_loop_with_gradients(case):
    rows, k_in, n_out, groups, ids = CASES[case]
    x, w, group_ids, cotangent = _problem(sum(map(ord, case)), rows, k_in, n_out, groups, ids)
    expected_out, expected_dx, expected_dw = _loop(x, w, group_ids, cotangent)
    dropped = np.asarray(group_ids) == groups
    for path, (out, (dx, dw)) in _paths(x, w, group_ids, cotangent).items():
        chex.assert_shape(out, (rows, n_out))
        chex.assert_shape((dx, dw), [x.shape, w.shape])
        np.testing.assert_allclose(out, expected_out, **TOLERANCE, err_msg=path)
        np.testing.assert_allclose(dx, expected_dx, **TOLERANCE, err_msg=path)
        np.testing.assert_allclose(dw, expected_dw, **TOLERANCE, err_msg=path)
        # Dropped rows are exactly zero and get exactly zero gradient.
        assert not np.asarray(out)[dropped].any() and not np.asarray(dx)[dropped].any(), path


def test_output_dtype_follows_x_and_the_default_is_the_xla_path():
    x, w, group_ids, _ = _problem(1, 8, 4, 3, 2)
    low = grouped_matmul(x.astype(jnp.bfloat16), w, group_ids)
    assert low.dtype == jnp.bfloat16
    np.testing.assert_allclose(np.asarray(low, np.float32), _loop(x.astype(jnp.bfloat16), w.astype(jnp.bfloat16),
                                                                  group_ids, np.zeros((8, 3)))[0],
                               atol=3e-2, rtol=3e-2)
    np.testing.assert_array_equal(grouped_matmul(x, w, group_ids),
                                  grouped_matmul(x, w, group_ids, implementation="xla"))
    assert kernels.grouped_matmul is grouped_matmul and "grouped_matmul" in kernels.__all__


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"x": jnp.zeros((3, 4, 1))}, r"grouped_matmul: `x` has shape \(3, 4, 1\), expected \[M, K\]"),
        ({"w": jnp.zeros((2, 5, 3))}, r"grouped_matmul: `w` has shape \(2, 5, 3\), expected \[G, K, N\] with K = 4"),
        ({"group_ids": jnp.zeros((4,), jnp.int32)}, r"grouped_matmul: `group_ids` has shape \(4,\), expected \[M\]"),
        ({"group_ids": jnp.zeros((3,), jnp.float32)}, "grouped_matmul: `group_ids` has dtype float32, expected an "
                                                      "integer dtype"),
        ({"x": jnp.zeros((3, 4), jnp.int32)}, "grouped_matmul: `x` has dtype int32, expected a floating dtype"),
        ({"x": [[0.0] * 4] * 3}, "grouped_matmul: `x` is list"),
        ({"implementation": "dense"}, r"grouped_matmul: unknown implementation\(s\) \['dense'\]; expected one of "
                                      r"\['reference', 'xla'\]"),
    ],
)
def test_bad_inputs_name_the_op_and_the_argument(change, match):
    inputs = {"x": jnp.zeros((3, 4)), "w": jnp.zeros((2, 4, 3)), "group_ids": jnp.zeros((3,), jnp.int32)}
    implementation = change.pop("implementation", None)
    with pytest.raises(ValueError, match=match):
        grouped_matmul(**{**inputs, **change}, implementation=implementation)


def test_a_bad_expert_reaches_only_its_rows_and_an_unused_one_nothing():
    """A NaN in expert 2's weights (used by rows 2, 3) makes those rows NaN and nothing else; an inf in expert 1
    (used by no row) changes nothing: outputs and gradients of the other rows equal the clean run, on both paths
    (both contract rows with experts they do not use, where 0 · NaN is NaN)."""
    x, w, ids, cotangent = _problem(5, 5, 3, 2, 4, [0, 0, 2, 2, 4])
    bad = w.at[2, 0, 0].set(jnp.nan).at[1, 1, 1].set(jnp.inf)
    clean, poisoned = _paths(x, w, ids, cotangent), _paths(x, bad, ids, cotangent)
    others = np.array([0, 1, 4])
    for path in PATHS:
        (out, (dx, dw)), (want, (want_dx, want_dw)) = poisoned[path], clean[path]
        assert np.isnan(np.asarray(out[2:4])).all(), path
        np.testing.assert_array_equal(out[others], want[others], err_msg=path)
        np.testing.assert_array_equal(dx[others], want_dx[others], err_msg=path)
        np.testing.assert_array_equal(dw[np.array([0, 1, 3])], want_dw[np.array([0, 1, 3])], err_msg=path)


def test_an_id_outside_zero_to_g_raises_and_unchecked_both_paths_drop_it():
    """-1 (or G + 1) is rejected: a ValueError on concrete ids, a checkify error under `checked` in jit. Unchecked
    under jit, both paths read it as a dropped row (zero output, no gradient), as the id G."""
    x, w, ids, cotangent = _problem(6, 4, 3, 2, 2, [-1, 0, 3, 1])
    with pytest.raises(ValueError, match=r"grouped_matmul: `group_ids` must be in \[0, G\] = \[0, 2\].*min -1"):
        grouped_matmul(x, w, ids)
    run = jax.jit(kernels.checked(grouped_matmul))
    with pytest.raises(Exception, match=r"grouped_matmul: `group_ids` must be in \[0, G\] = \[0, 2\]"):
        jax.block_until_ready(run(x, w, ids))
    got, want = _paths(x, w, ids, cotangent), _paths(x, w, jnp.asarray([2, 0, 2, 1], jnp.int32), cotangent)
    for path in PATHS:
        chex.assert_trees_all_equal(got[path], want[path])
