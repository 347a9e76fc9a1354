"""ConfSMoE's ablation reproduction: bad inputs (before anything is written), the cells' configs (the imputation
arm's objective options and missing ratio, the collapse router's options and learning rate) and the per-seed
aggregation. The SMOKE experiment runs in the experiment contract (tests/repro/test_experiments.py)."""

from __future__ import annotations

import pytest

from icml26zoo.repro import confsmoe_ablation
from icml26zoo.repro.common import Budget, Experiment, mean_and_spread
from icml26zoo.repro.moe_routing import classifier_config

TINY = Budget(steps=5, batch_size=4, seq_len=4, seeds=(0,))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"arms": ("off", "stage2")}, "arms: unknown name 'stage2'"),
        ({"collapse_routers": ("softmax",)}, "collapse_routers: unknown name 'softmax'"),
        ({"missing_ratios": (0.2, 0.7)}, r"missing_ratios entries .* must be a number in \[0, 0.6\], got 0.7"),
        ({"missing_ratios": ()}, "missing_ratios must name at least one"),
        ({"collapse_top_k": 3, "collapse_experts": 2}, "collapse_top_k must be <= collapse_experts = 2, got 3"),
        ({"collapse_lr": 0.0}, "collapse_lr"),
        ({"dim": 12}, "dim must be a multiple of 8"),
    ],
)
def test_bad_arguments_raise_naming_the_field(tmp_path, kwargs, match):
    with pytest.raises(ValueError, match=match):
        confsmoe_ablation.run(tmp_path / "run", budget=TINY, **kwargs)
    assert not (tmp_path / "run").exists()


def test_cells_carry_the_arm_the_ratio_and_the_collapse_router(tmp_path):
    experiment = Experiment(tmp_path / "run", budget=TINY)
    moe = confsmoe_ablation._collapse_moe("topk_softmax_all_lb", 16, 2)
    assert (moe.router, dict(moe.router_options), moe.load_balance_weight) == ("topk_softmax", {"normalize": "all"},
                                                                               0.01)
    config = classifier_config(experiment, 1, moe, dim=16, train_size=32, test_size=8, task={"missing_ratio": 0.6},
                               learning_rate=1e-2, objective_options={"fill": False, "impute": False})
    assert dict(config.data.task_options)["missing_ratio"] == 0.6 and config.optim.learning_rate == 1e-2
    assert dict(config.objective_options) == {"fill": False, "impute": False}
    assert config.model.moe == moe and config.seed == 1
    assert confsmoe_ablation.ARMS == {"off": (False, False), "stage1": (True, False), "stage1_2": (True, True)}


def test_mean_and_spread():
    assert mean_and_spread([0.5, 0.7, 0.6]) == (0.6, 0.2)
    assert mean_and_spread([0.25]) == (0.25, None)
    with pytest.raises(ValueError, match="at least one value"):
        mean_and_spread([])
