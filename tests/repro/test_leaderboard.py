"""The leaderboard experiment (repro/leaderboard.py): rows come from the mixer registry, widths match the parameter
budget, bad options fail before anything is written. The SMOKE run (two mixers on one task: a row per mixer with
every column filled) is checked inside the experiment contract (test_experiments.py, smoke_checks.py), with its
command line and resume; the --quick leaderboard itself is run by hand."""

from __future__ import annotations

import pytest

from icml26zoo.registry import MIXERS
from icml26zoo.repro import leaderboard
from icml26zoo.repro.common import Budget, parameter_count

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
    ({"reference_width": 40}, "reference_width must be a multiple of 16, got 40"),
    ({"reference_width": 16}, "reference_width must be an integer >= 32, got 16"),
])
def test_bad_options_raise_before_anything_is_written(tmp_path, kwargs, match):
    with pytest.raises(ValueError, match=match):
        leaderboard.run(tmp_path / "board", budget=TINY, **kwargs)
    assert not (tmp_path / "board").exists()

