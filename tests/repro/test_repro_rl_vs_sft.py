"""The RL-vs-SFT reproduction's bad inputs and its onset measure (the experiment trains the objective tested in
tests/zoo/test_boolean_chain.py; its SMOKE run is checked by the experiment contract, tests/repro/test_experiments.py,
and its results are on docs/papers/rl_vs_sft_boolean.md)."""

from __future__ import annotations

import pytest

from icml26zoo.repro import rl_vs_sft
from icml26zoo.repro.common import Budget

TINY = Budget(steps=1, batch_size=8, seq_len=4)


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"modes": ("rl", "ppo")}, "modes: unknown name 'ppo'"),
    ({"modes": ()}, "modes must name at least one"),
    ({"eval_every": 0}, "eval_every"),
    ({"num_bits": 1}, "'num_bits' must be an integer in"),
    ({"sparsity": 17}, "'sparsity' must be an integer in"),
    ({"d_model": 0}, "d_model must be an integer >= 1"),
    ({"learning_rates": (0.0,)}, "learning_rates must be a positive number"),
    ({"learning_rates": ()}, "learning_rates must hold at least one rate"),
    ({"learning_rates": (1e-3, 1e-3)}, "learning_rates must not repeat a rate"),
])
def test_bad_arguments_raise_naming_them(tmp_path, kwargs, match):
    with pytest.raises(ValueError, match=match):
        rl_vs_sft.run(tmp_path / "run", budget=TINY, **kwargs)
    assert not (tmp_path / "run").exists()  # rejected before anything is written


def test_onset_is_the_first_step_reaching_the_threshold():
    assert rl_vs_sft.onset([0, 25, 50], [0.5, 0.95, 0.99]) == 25
    assert rl_vs_sft.onset([0, 25], [0.5, 0.6]) is None
