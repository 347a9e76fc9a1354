"""The leaderboard experiment (repro/leaderboard.py): rows come from the mixer registry, widths match the parameter
budget, bad options fail before anything is written. The SMOKE run (two mixers on one task: a row per mixer with
every column filled) is checked inside the experiment contract (test_experiments.py, smoke_checks.py), with its
command line and resume; the --quick leaderboard itself is run by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from icml26zoo.registry import MIXERS
from icml26zoo.repro import leaderboard
from icml26zoo.repro.common import Budget, parameter_count
from icml26zoo.train.config import DataConfig

TINY = Budget(steps=2, batch_size=8, seq_len=32)


def test_every_registered_mixer_is_a_row_by_default(monkeypatch):
    seen = {}

    def check_mixers(field, names):
        seen["names"] = list(names)
        raise ValueError("stop")

    monkeypatch.setattr(leaderboard, "check_mixers", check_mixers)
    with pytest.raises(ValueError, match="stop"):
        leaderboard.run("unused", budget=Budget(steps=1, batch_size=1, seq_len=8))
    assert seen["names"] == MIXERS.names()


def test_matched_width_is_the_closest_parameter_count():
    target = parameter_count(leaderboard.model_config("attention", 48, 32))
    assert leaderboard.matched_width("attention", target, 32, 32) == (48, target)
    # Widths 32, 48, 64 are tried: a budget nearer 64's count than 48's picks 64.
    above = parameter_count(leaderboard.model_config("attention", 64, 32))
    assert leaderboard.matched_width("attention", (target + 3 * above) // 4, 32, 32) == (64, above)


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"mixers": ("attention", "nope")}, "mixers: unknown name 'nope'"),
    ({"mixers": ()}, "mixers must name at least one"),
    ({"tasks": ("imagenet",)}, "tasks: unknown name 'imagenet'"),
    ({"sweep_tasks": ("mqar", "mqar")}, "sweep_tasks must not repeat a name"),
    ({"sweep_tasks": ("imagenet",)}, "sweep_tasks: unknown name 'imagenet'"),
    ({"reference_width": 40}, "reference_width must be a multiple of 16, got 40"),
    ({"reference_width": 16}, "reference_width must be an integer >= 32, got 16"),
])
def test_bad_options_raise_before_anything_is_written(tmp_path, kwargs, match):
    with pytest.raises(ValueError, match=match):
        leaderboard.run(tmp_path / "board", budget=TINY, **kwargs)
    assert not (tmp_path / "board").exists()



@pytest.mark.parametrize(("kwargs", "match"), [
    ({"learning_rates": ()}, "learning_rates must name at least one"),
    ({"learning_rates": (3e-3, 0.0)}, r"learning_rates\[i\] must be a finite positive number, got 0.0"),
    ({"learning_rates": (1e-3, 1e-3)}, "learning_rates must not repeat a rate"),
    ({"mqar_pairs": (4, 16)}, r"mqar_pairs: 16 pairs need rows of 4 \* 16 - 1 = 63 tokens, more than "
                              "budget.seq_len 32"),
    ({"mqar_pairs": (33,)}, r"mqar_pairs\[i\] must be an integer in \[1, 32\], got 33"),
    ({"mqar_pairs": ()}, "mqar_pairs must name at least one"),
])
def test_bad_sweep_options_name_the_option(tmp_path, kwargs, match):
    with pytest.raises(ValueError, match=match):
        leaderboard.run(tmp_path / "board", budget=TINY, **kwargs)
    assert not (tmp_path / "board").exists()


def test_mqar_pairs_are_not_checked_without_mqar(tmp_path, monkeypatch):
    # Dyck alone runs at any MQAR setting (the pair counts are not used); the run stops at the Experiment.
    monkeypatch.setattr(leaderboard, "Experiment", lambda *a, **k: (_ for _ in ()).throw(ValueError("stop")))
    with pytest.raises(ValueError, match="stop"):
        leaderboard.run(tmp_path / "board", budget=TINY, tasks=("dyck",), mqar_pairs=(16,))


def test_best_rate_picks_the_best_finite_value_first_on_ties():
    assert leaderboard.best_rate({1e-3: 0.5, 3e-3: 0.9, 1e-2: 0.7}, lower_is_better=False) == (3e-3, 0.9)
    assert leaderboard.best_rate({1e-3: 2.5, 3e-3: 2.1, 1e-2: math.nan}, lower_is_better=True) == (3e-3, 2.1)
    assert leaderboard.best_rate({1e-3: 0.5, 3e-3: 0.5}, lower_is_better=False) == (1e-3, 0.5)
    rate, value = leaderboard.best_rate({1e-3: math.nan, 3e-3: math.inf}, lower_is_better=True)
    assert rate == 1e-3 and math.isnan(value)
    with pytest.raises(ValueError, match="results must hold at least one"):
        leaderboard.best_rate({}, lower_is_better=False)


def test_task_columns_expand_mqar_per_pair_count():
    columns = leaderboard.task_columns(("mqar", "dyck"), (4, 16))
    assert list(columns) == ["mqar_p4", "mqar_p16", "dyck"]
    assert [c.column for c in columns.values()] == ["MQAR p4 acc", "MQAR p16 acc", "Dyck-2 accuracy"]
    assert [c.data.mqar_num_pairs for c in list(columns.values())[:2]] == [4, 16]


def test_baselines_read_the_eval_examples(tmp_path):
    from icml26zoo.train import data as data_lib
    from icml26zoo.train.data import mqar

    data = DataConfig(name="mqar", data_dir=str(tmp_path), mqar_num_keys=4, mqar_num_values=3, mqar_num_pairs=2,
                      mqar_train_examples=8, mqar_eval_examples=12)
    data_lib.prepare(data)
    task = leaderboard.TASKS["mqar"]._replace(data=data)
    # 12 eval examples of 2 answers each, whole examples of 7 tokens: 2 per 16-token row, 6 rows, 2 batches of 4.
    shape = {"batch_size": 4, "seq_len": 16, "eval_batches": 8}
    split = mqar.generate(4, 3, 2, 12, mqar.split_seed(mqar.make_config(4, 3, 2, 8, 12), "validation"))
    answers = split[:, mqar.answer_mask(2)].ravel()
    assert leaderboard.constant_baseline(task, **shape) == pytest.approx(np.bincount(answers).max() / answers.size)
    # No recall: the first query is a draw between the two pairs' values, the second is the pair left.
    first = [np.mean(row[[1, 3]] == row[5]) for row in split]
    assert leaderboard.no_recall_baseline(task, **shape) == pytest.approx((sum(first) + 12) / 24)


def test_column_task_and_row_chunk():
    assert [leaderboard.column_task(k) for k in leaderboard.task_columns(("mqar", "bytes", "dyck"), (2, 8))] == [
        "mqar", "mqar", "bytes", "dyck"]
    # The row length rounded up to a power of two, between 16 and the ops' default chunk 64.
    assert [leaderboard.row_chunk(t) for t in (8, 17, 32, 33, 64, 256)] == [16, 32, 32, 64, 64, 64]


def test_row_options_set_the_chunk_only_where_the_mixer_has_one():
    assert leaderboard.row_options("attention", 32) == ()
    assert leaderboard.row_options("deltanet", 32) == (("chunk_size", 32),)
    assert leaderboard.row_options("deltanet", 64) == ()  # the default chunk already fits the row
