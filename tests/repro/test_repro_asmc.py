"""The ASMC reproduction: bad inputs, the addition task and its verifier, the trainer batches, how each method's
particles are read, the ancestry walk and the collapse split. The SMOKE experiment itself runs in the experiment
contract (tests/repro/test_experiments.py: the notebook at SMOKE, outputs, resume through the command line)."""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np
import pytest

from icml26zoo.decode.asmc import ASMCResult
from icml26zoo.repro import asmc
from icml26zoo.repro import asmc_parts as task
from icml26zoo.train.batch_source import check_batch


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"particles": (2,)}, r"particles\[i\] must be"),
        ({"particles": ()}, "particles must hold at least one"),
        ({"particles": (8, 8)}, "no repeats"),
        ({"alphas": (1.0,)}, r"alphas\[i\] \(the power of the target\) must be a number in \(1, inf\), got 1.0"),
        ({"alphas": (math.inf,)}, "alphas"),
        ({"schemes": ("stratified",)}, "schemes: unknown name 'stratified'"),
        ({"proposals": ("greedy",)}, "proposals: unknown name 'greedy'"),
        ({"num_problems": 0}, "num_problems"),
        ({"block_size": 0}, "block_size"),
        ({"collapse_threshold": 0.0}, r"collapse_threshold must be a number in \(0, 1\], got 0.0"),
        ({"budget": asmc.Budget(steps=2, batch_size=2, seq_len=8)}, "budget.seq_len must be 12"),
    ],
)
def test_bad_arguments_raise_before_anything_is_written(tmp_path, kwargs, match):
    with pytest.raises(ValueError, match=match):
        asmc.run(tmp_path / "run", **{"budget": asmc.QUICK, **kwargs})
    assert not (tmp_path / "run").exists()


def test_problems_spell_every_number_backwards_and_the_verifier_checks_the_sum():
    rows, sums = task.problems(np.random.default_rng(0), 50, 3)
    assert rows.shape == (50, 13) and rows.dtype == np.int32
    a = rows[:, 0:3] @ np.asarray([1, 10, 100])
    b = rows[:, 4:7] @ np.asarray([1, 10, 100])
    answer = rows[:, 8:12] @ np.asarray([1, 10, 100, 1000])
    np.testing.assert_array_equal(a + b, sums)
    np.testing.assert_array_equal(answer, sums)
    assert (rows[:, 3] == 10).all() and (rows[:, 7] == 11).all() and (rows[:, 12] == task.END).all()
    answers = np.stack([rows[0, 8:], rows[1, 8:], np.r_[rows[0, 8:12], 0]])
    np.testing.assert_array_equal(task.answer_correct(answers, int(sums[0]), 3), [True, sums[1] == sums[0], False])


def test_training_batches_are_valid_trainer_batches_weighting_the_answer_only():
    batch = next(task.training_batches(0, 4, 3))
    check_batch(batch, 0, rows=4, seq_len=12, vocab_size=task.VOCAB)
    np.testing.assert_array_equal(batch["targets"][:, :-1], batch["inputs"][:, 1:])
    # Weighted targets are the 4 answer digits and the end marker; the first of them follows "=".
    np.testing.assert_array_equal(batch["weights"][0], [0] * 7 + [1] * 5)
    assert (batch["inputs"][:, 7] == 11).all()
    replay = next(task.training_batches(0, 4, 3))
    np.testing.assert_array_equal(replay["inputs"], batch["inputs"])


def _result(tokens, log_weights, cum_log_p, active, ess, num_active):
    return ASMCResult(tokens=np.asarray(tokens), log_weights=jnp.asarray(log_weights, jnp.float32),
                      active=np.asarray(active), cum_log_p=np.asarray(cum_log_p, np.float32), cum_log_q=None,
                      sample=None, ess=np.asarray(ess), num_active=np.asarray(num_active), resampled=None,
                      ancestors=None)


def test_particles_are_read_as_mean_best_or_weighted():
    right = [3, 2, 1, 0, task.END]  # 123 reversed, 4 digits
    wrong = [3, 2, 1, 1, task.END]
    result = _result([right, wrong, wrong, right], [0.0, np.log(3.0), 0.0, -np.inf], [-1.0, -5.0, -5.0, -0.5],
                     [True, True, True, False], ess=[3.0, 1.5], num_active=[3, 3])
    mean = asmc._problem_stats(result, 123, "mean")
    assert mean["accuracy"] == pytest.approx(1 / 3) and mean["pass"] == 1.0 and mean["distinct"] == 2
    assert mean["ess_min_fraction"] == pytest.approx(0.5) and mean["particles"] == 3
    assert asmc._problem_stats(result, 123, "best")["accuracy"] == 1.0  # log p -1 beats -5
    assert asmc._problem_stats(result, 123, "weighted")["accuracy"] == pytest.approx(1 / 5)


def test_surviving_slots_walk_the_ancestry_back_from_the_final_particles():
    # After token 1 slots 0, 1 copy slot 2; after token 2 (the last) every slot copies slot 1.
    ancestors = np.asarray([[2, 2, 2], [1, 1, 1]])
    survived = task.surviving_slots(ancestors, np.asarray([True, True, False]))
    np.testing.assert_array_equal(survived, [[False, False, True], [False, True, False]])


def test_collapse_split_averages_ess_min_over_solved_and_failed_problems():
    problems = [{"accuracy": 0.9, "ess_min_fraction": 0.8}, {"accuracy": 0.1, "ess_min_fraction": 0.2},
                {"accuracy": 0.0, "ess_min_fraction": 0.4}]
    rows = [{"method": "ASMC a=4 T=1 systematic", "particles": 8, "per_problem": problems},
            {"method": "sampling T=1", "particles": 8, "per_problem": problems}]
    split = asmc._collapse_split([rows])
    assert list(split) == ["ASMC a=4 T=1 systematic N=8"]
    entry = split["ASMC a=4 T=1 systematic N=8"]
    assert entry["ess_min_solved"] == pytest.approx(0.8) and entry["ess_min_failed"] == pytest.approx(0.3)
    assert entry["num_solved"] == 1 and entry["num_failed"] == 2
