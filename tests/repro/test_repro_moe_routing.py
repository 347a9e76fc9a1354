"""The MoE routing reproduction: bad inputs (before anything is written), the script's one-line errors, each
cell's configs (the router and balancing weight it names, the budget's steps/batch/tokens), and the aggregation
of cells into rows. The QUICK experiment itself runs in the notebook test (tests/test_notebooks.py)."""

from __future__ import annotations

import numpy as np
import pytest
from repro_scripts import load_repro_script

from icml26zoo.repro import moe_routing
from icml26zoo.repro.cli import run_main
from icml26zoo.repro.common import Budget

TINY = Budget(steps=5, batch_size=4, seq_len=4, seeds=(0,))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"routers": ("confidence", "softmax")}, "routers: unknown name 'softmax'"),
        ({"routers": ()}, "routers must name at least one"),
        ({"routers": ("confidence", "confidence")}, "must not repeat"),
        ({"experts": 1}, "experts"),
        ({"dim": 18}, "dim must be a multiple of 4"),
        ({"train_size": 0}, "train_size"),
    ],
)
def test_bad_arguments_raise_naming_the_field(tmp_path, kwargs, match):
    with pytest.raises(ValueError, match=match):
        moe_routing.run(tmp_path / "run", budget=TINY, **kwargs)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    ("argv", "match"),
    [
        (["--routers", "confidence,switch"], "unknown name 'switch'"),
        (["--experts", "1"], "experts"),
        (["--resume"], "does not exist"),
    ],
)
def test_script_reports_bad_input_in_one_line_with_status_2(tmp_path, capsys, argv, match):
    status = run_main(load_repro_script("moe_routing").main, ["--quick", "--out", str(tmp_path / "run"), *argv])
    error = capsys.readouterr().err
    assert status == 2 and error.count("\n") == 1 and error.startswith("error: ") and match in error


@pytest.mark.parametrize("router", list(moe_routing.ROUTERS))
def test_cell_configs_name_the_router_balance_and_budget(router):
    task, model, train = moe_routing._configs(router, 3, TINY, experts=6, dim=16, train_size=32, test_size=8)
    name, balance = moe_routing.ROUTERS[router]
    assert (model.moe.router, model.moe.load_balance_weight, model.moe.z_loss_weight) == (name, balance, 0.0)
    assert (model.moe.num_experts, model.moe.top_k, model.dim) == (6, 2, 16)
    assert (train.steps, train.batch_size, train.seed, task.seed, task.tokens) == (5, 4, 3, 3, 4)
    assert (task.setting, task.num_modalities, task.train_size, task.test_size) == ("II", 3, 32, 8)
    assert balance == (0.01 if router == "topk_softmax_lb" else 0.0)


def test_rows_average_the_seeds():
    def cell(accuracy, load):
        metrics = {"accuracy": accuracy, "collapse": accuracy / 2, "max_load_ratio": 1.0 + accuracy,
                   "coselection": 0.1, "load": np.asarray(load)}
        return {"metrics": metrics, "routing": []}

    row = moe_routing._row("mahalanobis", [cell(0.5, [0.5, 0.5]), cell(0.7, [0.25, 0.75])])
    assert row == {"router": "mahalanobis", "balance_loss": 0.0, "accuracy": 0.6, "collapse": 0.3,
                   "max_load_ratio": 1.6, "coselection": 0.1, "load": [0.375, 0.625]}
    figure = moe_routing._load_figure([row, {**row, "router": "confidence"}])
    assert len(figure.axes[0].patches) == 4
