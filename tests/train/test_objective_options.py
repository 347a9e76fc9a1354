"""TrainConfig.objective_options: typed options an objective declares, validated when the config is built, set
from the command line, round-tripped through config.json and bound by `configured_objective`."""

from __future__ import annotations

import functools

import pytest

from icml26zoo.losses.boolean_chain import BooleanChainOptions, boolean_chain_objective
from icml26zoo.losses.objectives import lm_objective
from icml26zoo.train.config import TrainConfig, apply_overrides, objective_options
from icml26zoo.train.config_checks import configured_objective


def test_options_are_typed_defaulted_and_bound_to_the_objective():
    config = TrainConfig(objective="boolean_chain", objective_options=(("mode", "rl"), ("reward", "outcome")))
    assert objective_options(config.objective, config.objective_options) == BooleanChainOptions(
        mode="rl", reward="outcome")
    bound = configured_objective(config)
    assert isinstance(bound, functools.partial) and bound.func is boolean_chain_objective
    assert bound.keywords == {"options": BooleanChainOptions(mode="rl", reward="outcome")}
    assert configured_objective(TrainConfig()) is lm_objective


def test_options_from_the_command_line_and_through_json():
    config = apply_overrides(TrainConfig(), ["objective=boolean_chain", 'objective_options=(("mode","rl"),)'])
    assert config.objective_options == (("mode", "rl"),)
    assert TrainConfig.from_json(config.to_json()) == config


@pytest.mark.parametrize(("objective", "pairs", "match"), [
    ("boolean_chain", (("mood", "rl"),), r"objective_options: unknown boolean_chain objective option 'mood'; "
                                         r"valid options: \['baseline', 'mode', 'reward', 'rollout'\]"),
    ("boolean_chain", (("mode", "sft"),), r"objective_options: .*'mode' must be one of \['teacher_forcing'"),
    ("boolean_chain", (("mode",),), r"objective_options must be a tuple of \(name, value\) pairs"),
    ("lm", (("mode", "rl"),), r"objective_options: objective 'lm' takes no options"),
])
def test_bad_options_raise_naming_the_field(objective, pairs, match):
    with pytest.raises(ValueError, match=match):
        TrainConfig(objective=objective, objective_options=pairs)
