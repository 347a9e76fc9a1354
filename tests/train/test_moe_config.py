"""ModelConfig.moe from the command line and config.json: `model.moe=default|none`, its fields by path, a field
of a None moe refused by name, and the Optional nested config round-tripping through TrainConfig JSON."""

from __future__ import annotations

import pytest

from icml26zoo.moe import MoEConfig
from icml26zoo.train.config import TrainConfig, apply_overrides


def test_moe_is_switched_on_and_set_by_path_and_round_trips():
    config = apply_overrides(TrainConfig(), ["model.moe=default", "model.moe.num_experts=4",
                                             "model.moe.router=mahalanobis", "model.moe.capacity_factor=1.5",
                                             "model.moe.router_options=(('ridge', 0.01),)"])
    assert config.model.moe == MoEConfig(num_experts=4, router="mahalanobis", capacity_factor=1.5,
                                         router_options=(("ridge", 0.01),))
    assert config.model.resolved_moe.router_options == (("statistics", "batch"), ("ridge", 0.01))
    assert TrainConfig.from_json(config.to_json()) == config
    assert TrainConfig.from_json(TrainConfig().to_json()).model.moe is None
    assert apply_overrides(config, ["model.moe=None"]).model.moe is None


@pytest.mark.parametrize(("overrides", "match"), [
    (["model.moe.num_experts=8"], "config field 'model.moe.num_experts': model.moe is None; set model.moe=default "
                                  "first"),
    (["model.moe=on"], "config field 'model.moe' expects default .* or none, got 'on'"),
    (["model.moe=default", "model.moe.top_k=3", "model.moe.num_experts=2"], "top_k must be at most num_experts"),
    (["model.moe=default", "model.moe.router=switch"], "router must be one of"),
    (["model.moe=default", "model.mlp_dim=0"], "mlp_dim must not be 0 when moe is set"),
])
def test_bad_moe_overrides_name_the_field(overrides, match):
    with pytest.raises(ValueError, match=match):
        apply_overrides(TrainConfig(), overrides)
