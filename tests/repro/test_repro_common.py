"""The reproductions' shared harness: checked budgets and names, run directories, cells, tables and figures
(the command line is tested in test_experiments.py)."""

from __future__ import annotations

import json

import pytest

from icml26zoo.repro.common import (
    Budget,
    Experiment,
    check_mixers,
    line_figure,
    mean_std_text,
    metric_series,
    seed_summary,
    seed_summary_text,
)
from icml26zoo.train.config import TrainConfig

BUDGET = Budget(steps=4, batch_size=2, seq_len=8, seeds=(0, 1))


@pytest.mark.parametrize(("fields", "message"), [
    ({"steps": 0}, r"budget.steps must be an integer >= 1, got 0"),
    ({"batch_size": -1}, r"budget.batch_size must be an integer >= 1, got -1"),
    ({"seeds": ()}, r"budget.seeds must be a non-empty tuple"),
    ({"seeds": (0, 0)}, r"budget.seeds must not repeat a seed"),
    ({"seeds": (-1,)}, r"budget.seeds\[i\] must be an integer >= 0, got -1"),
])
def test_budget_rejects_impossible_values(fields, message):
    values = {"steps": 4, "batch_size": 2, "seq_len": 8} | fields
    with pytest.raises(ValueError, match=message):
        Budget(**values)


def test_unknown_or_repeated_mixer_names_are_errors():
    assert check_mixers("mixers", ["fox", "fix"]) == ("fox", "fix")
    with pytest.raises(ValueError, match=r"mixers: unknown name 'foxx'; expected one of \[.*'fox'"):
        check_mixers("mixers", ["foxx"])
    with pytest.raises(ValueError, match=r"mixers must name at least one"):
        check_mixers("mixers", [])
    with pytest.raises(ValueError, match=r"mixers must not repeat a name"):
        check_mixers("mixers", ["fox", "fox"])
    with pytest.raises(ValueError, match=r"expected one of \['fox'\]"):
        check_mixers("mixers", ["fix"], allowed=["fox"])


def test_resuming_a_missing_run_directory_is_an_error(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"run_dir .*missing.* does not exist: there is nothing to resume"):
        Experiment(tmp_path / "missing", budget=BUDGET, resume=True)
    (tmp_path / "file").write_text("")
    with pytest.raises(ValueError, match=r"exists and is not a directory"):
        Experiment(tmp_path / "file", budget=BUDGET)


def test_a_cell_trained_with_another_config_is_not_reused(tmp_path):
    experiment = Experiment(tmp_path / "run", budget=BUDGET)
    config = experiment.cell_config(TrainConfig(), seed=1, checkpoints=2)
    assert (config.num_steps, config.batch_size, config.seq_len, config.seed) == (4, 2, 8, 1)
    assert config.checkpoint_every == 2 and not config.tensorboard and config.sample_length == 0
    cell = experiment.cell_dir("fox_seed1")
    cell.mkdir(parents=True)
    (cell / "config.json").write_text(config.to_json())
    (cell / "summary.json").write_text(json.dumps({"eval/loss": 1.5}))
    assert experiment.train_cell("fox_seed1", config) == {"eval/loss": 1.5}
    # A config stored before a field existed (here: without `optim.eps`) still matches its default.
    stored = json.loads(config.to_json())
    del stored["optim"]["eps"]
    (cell / "config.json").write_text(json.dumps(stored))
    assert experiment.train_cell("fox_seed1", config) == {"eval/loss": 1.5}
    other = experiment.cell_config(TrainConfig(), seed=2)
    with pytest.raises(ValueError, match=r"cell 'fox_seed1' .* was trained with another config"):
        experiment.train_cell("fox_seed1", other)
    with pytest.raises(ValueError, match=r"cell must be a name"):
        experiment.cell_dir("../escape")


def test_write_produces_the_table_json_and_figures(tmp_path):
    experiment = Experiment(tmp_path / "run", budget=BUDGET)
    figure = line_figure({"fox": ([1, 2], [3.0, 2.5])}, xlabel="step", ylabel="loss", title="t",
                         hlines={"unigram": 4.0})
    rows = [{"mixer": "fox", "bits": 1.23456, "params": 12345, "note": None}]
    results = experiment.write(rows, columns=("mixer", "bits", "params", "note"), title="T", notes=["a note"],
                               figures={"curves": figure}, extra={"k": 1})
    text = (tmp_path / "run" / "results.md").read_text()
    assert "| fox | 1.235 | 12,345 | - |" in text and "Budget: 4 steps x 2 rows x 8 tokens" in text
    record = json.loads((tmp_path / "run" / "results.json").read_text())
    assert record["rows"] == rows and record["budget"]["seeds"] == [0, 1] and record["extra"] == {"k": 1}
    assert (tmp_path / "run" / "curves.png").stat().st_size > 0
    assert results.figure() is figure and results.figure("curves") is figure
    with pytest.raises(ValueError, match=r"columns \['missing'\] are missing"):
        experiment.write(rows, columns=("missing",), title="T")


def test_metric_series_keeps_the_last_record_of_a_step(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1, "train/loss": 3.0}\n{"step": 2, "train/loss": "NaN"}\n'
                    '{"step": 1, "train/loss": 2.0}\n')
    assert metric_series(path, "train/loss") == ([1], [2.0])



def test_seed_summary_is_mean_spread_and_per_seed_text():
    assert seed_summary([0.5, 0.25, 0.75]) == (0.5, 0.5, "0.500, 0.250, 0.750")
    assert seed_summary([0.1234]) == (0.1234, None, "0.123")
    assert seed_summary_text("acc", [0.5, 0.25, 0.75]) == "acc 0.5 (spread 0.5: 0.500, 0.250, 0.750)"
    assert seed_summary_text("acc", [0.1234]) == "acc 0.1234 (spread -: 0.123)"


def test_mean_std_text_is_the_population_standard_deviation_in_the_given_formats():
    assert mean_std_text([1.0, 2.0, 6.0]) == "3 ± 2.2"  # std = sqrt(14 / 3)
    assert mean_std_text([0.5], ".3f", ".3f") == "0.500 ± 0.000"
    with pytest.raises(ValueError, match="at least one value"):
        mean_std_text([])
