"""SSD reproduction: bad inputs, the three forms agree, softmax's rank explosion against the SSD bound N, and
the note's 1-SS condition checked through the implied mask."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tolerances import tolerance

from icml26zoo.kernels.ssd import kernel_matrix
from icml26zoo.repro import ssd
from icml26zoo.repro import ssd_parts as parts
from icml26zoo.repro.common import Budget

pytestmark = pytest.mark.usefixtures("fast_compile")  # tolerance and range checks only (tests/conftest.py)

TINY = Budget(steps=2, batch_size=1, seq_len=16, seeds=(0,))
RTOL = 1e-5


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"state_size": 1}, r"state_size must be an integer >= 2, got 1"),
    ({"chunk_size": 24}, r"chunk_size must be one of \(16, 32, 64, 128\), got 24"),
    ({"rank_rtol": 1e-9}, r"rank_rtol must be a float in \[1e-6, 1\).*got 1e-09"),
    ({"equality_len": 1}, r"equality_len must be an integer >= 2, got 1"),
    ({"budget": Budget(steps=2, batch_size=1, seq_len=4)}, r"budget.seq_len .* must be >= 8, got 4"),
    ({"budget": Budget(steps=3, batch_size=1, seq_len=9)}, r"budget.steps .* must lie in \[2, 2\] .* got 3"),
])
def test_bad_arguments_raise_naming_them(tmp_path, kwargs, message):
    with pytest.raises(ValueError, match=message):
        ssd.run(tmp_path / "run", **({"budget": TINY} | kwargs))
    assert not (tmp_path / "run").exists()


def test_sweep_lengths_are_distinct_and_end_at_seq_len():
    assert ssd.sweep_lengths(Budget(steps=4, batch_size=1, seq_len=64)) == [8, 16, 32, 64]
    lengths = ssd.sweep_lengths(Budget(steps=5, batch_size=1, seq_len=12))
    assert lengths == sorted(set(lengths)) and lengths[0] == 8 and lengths[-1] == 12


def test_recurrent_chunked_and_attention_forms_agree():
    tol = tolerance("ssd")
    rows, shown = ssd.equality_rows(Budget(steps=2, batch_size=2, seq_len=8), state_size=4, chunk_size=16,
                                    equality_len=37)
    assert {r["decay"] for r in rows} == {"scalar", "diagonal"} and len(rows) == 6
    assert all(r["max_diff_y"] <= tol.fwd and r["max_diff_state"] <= tol.fwd for r in rows), rows
    assert set(shown["forms"]) == {"recurrent", "chunked", "attention"}
    assert np.max(np.abs(shown["forms"]["recurrent"][0])) > 1e-3  # not trivially zero outputs


@pytest.mark.parametrize("length", [16, 32])
def test_softmax_attention_is_full_rank_below_the_diagonal(length):
    # Rank explosion: every lower block of causal softmax has full numerical rank, ceil(T/2) for the middle
    # one, so it grows with T past N = 4 where no N-state recurrence can follow.
    matrix = parts.softmax_matrix(jax.random.PRNGKey(3), length, 4)
    assert parts.semiseparable_rank(matrix, RTOL) == (length + 1) // 2


@pytest.mark.parametrize("diagonal", [False, True])
def test_ssd_kernel_semiseparable_rank_is_at_most_n_and_one_per_component(diagonal):
    n = 4
    inputs = parts.random_ssd_inputs(jax.random.PRNGKey(4), batch=1, length=48, heads=1, head_dim=1,
                                     state_size=n, diagonal=diagonal)
    matrix = parts.ssd_matrix(inputs)
    assert parts.semiseparable_rank(matrix, RTOL) == n  # <= N by duality, and N generically
    a = inputs.a if diagonal else jnp.repeat(inputs.a[..., None], n, axis=-1)
    for dim in range(n):  # each 1-SS component L^(n) o c^(n) b^(n)^T
        component = np.asarray(kernel_matrix(a[..., dim:dim + 1], inputs.b[..., dim:dim + 1],
                                             inputs.c[..., dim:dim + 1])[0, 0], np.float64)
        assert parts.semiseparable_rank(component, RTOL) == 1


@pytest.mark.parametrize(("name", "apart", "unreachable", "unobservable"), parts.CONDITION_CASES)
def test_ssm_is_a_1ss_masked_attention_iff_one_decay_on_reachable_observable_dims(name, apart, unreachable,
                                                                                   unobservable):
    matrix, b, c = parts.condition_case(jax.random.PRNGKey(5), length=40, state_size=3, apart=apart,
                                        unreachable=unreachable, unobservable=unobservable)
    mask = parts.implied_mask(matrix, b, c)
    if apart and not (unreachable or unobservable):
        assert parts.semiseparable_rank(mask, RTOL) > 1 and parts.mask_rank_gap(mask) > 1e-3
    else:
        assert parts.semiseparable_rank(mask, RTOL) == 1 and parts.mask_rank_gap(mask) < 1e-6


def test_implied_mask_needs_nonzero_scores():
    b = np.ones((3, 2))
    c = np.zeros((3, 2))
    with pytest.raises(ValueError, match=r"C B\^T has a zero entry"):
        parts.implied_mask(np.eye(3), b, c)
