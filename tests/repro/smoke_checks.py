"""Experiment-specific checks of the SMOKE run that the contract test (test_experiments.py) makes anyway, so an
experiment's own properties of that run cost no second run: name -> check(out, record), with `out` the run
directory and `record` its parsed results.json."""

from __future__ import annotations

import pathlib
from collections.abc import Callable

import numpy as np

from icml26zoo.repro import leaderboard
from icml26zoo.train.checkpoint import Checkpointer


def apb_rows(out: pathlib.Path, record: dict) -> None:
    """APB's smoke run: every method and the zero-action row on both splits; the frozen backbones came back
    bit-identical; APB trains (d_o + 1)·d_in + (d_out + 1)·d_a = 5·8 + 9·2 = 58 parameters per task."""
    rows = {(row["split"], row["method"]): row for row in record["rows"]}
    assert set(rows) == {(s, m) for s in ("in_dist", "out_dist") for m in ("random", "meta", "mlp", "zero action")}
    assert record["extra"]["backbone_unchanged"] is True
    assert rows[("in_dist", "random")]["task_params"] == 58 and rows[("in_dist", "mlp")]["pct_of_mlp"] == "100 ± 0"
    assert (out / "apb_curves.png").stat().st_size > 0


def acda_rows(out: pathlib.Path, record: dict) -> None:
    """ACDA's smoke run: a row per agent with a negative return (the point mass's reward is −distance − cost);
    the undelayed reference is 100 % of itself and only ACDA reports the share of the gap it closes."""
    rows = {row["agent"]: row for row in record["rows"]}
    assert set(rows) == {"naive", "acda", "undelayed"}, rows
    assert all(float(row["return"].split(" ± ")[0]) < 0 for row in rows.values())
    assert rows["undelayed"]["pct_of_undelayed"] == "100 ± 0" and rows["naive"]["gap_closed"] == "-"
    assert rows["acda"]["gap_closed"] != "-"
    assert (out / "acda_returns.png").stat().st_size > 0


def leaderboard_rows(out: pathlib.Path, record: dict) -> None:
    """The micro leaderboard: a row per SMOKE mixer with every column filled, then the no-recall and the
    constant-predictor rows, its table header and plot."""
    assert leaderboard.SMOKE_ARGS["mixers"] == ("attention", "circulation")
    *rows, guess, baseline = record["rows"]
    assert sorted(row["mixer"] for row in rows) == ["attention", "circulation"]
    for row in rows:
        assert 0 <= row["MQAR p8 acc"] <= 1 and row["tokens/s"] > 0 and row["peak MiB"] > 0
        assert row["best lr"] == "0.003"
    # The constant predictor: the most frequent of 32 values among the eval answers, about 1/32.
    assert baseline["mixer"] == leaderboard.BASELINE and 1 / 32 <= baseline["MQAR p8 acc"] < 0.1
    assert baseline["tokens/s"] is None and baseline["params"] is None
    # Elimination without recall: 8 pairs, about H_8 / 8 = 0.34.
    assert guess["mixer"] == leaderboard.NO_RECALL and 0.3 < guess["MQAR p8 acc"] < 0.4
    text = (out / "results.md").read_text()
    assert "| mixer | d_model | params | MQAR p8 acc | best lr | tokens/s | peak MiB |" in text
    assert "| constant predictor | - | - |" in text
    assert (out / "leaderboard.png").stat().st_size > 0


def surge_rows(out: pathlib.Path, record: dict) -> None:
    """SURGE's smoke run: both systems, their references and both methods at λ = 1; the exact reference scores 0
    and only SURGE reports weight health."""
    rows = {(row["system"], row["method"], row["lambda"]): row for row in record["rows"]}
    assert set(rows) == {("linear_gaussian", "kalman_chain", "-"), ("linear_gaussian", "kalman_system", "-"),
                         ("linear_gaussian", "surge", "1"), ("linear_gaussian", "guidance", "1"),
                         ("lorenz63", "enkf", "-"), ("lorenz63", "surge", "1"), ("lorenz63", "guidance", "1")}, rows
    assert rows[("linear_gaussian", "kalman_chain", "-")]["err_kalman"] == "0 ± 0"
    for system in ("linear_gaussian", "lorenz63"):
        ess_min = float(rows[(system, "surge", "1")]["ess_min"].split(" ± ")[0])
        assert 0 < ess_min <= 1 and rows[(system, "guidance", "1")]["ess_min"] == "-"
    assert (out / "errors.png").stat().st_size > 0


def pmdo_rows(out: pathlib.Path, record: dict) -> None:
    """PMDO's smoke run (synthetic source, two tasks): a row for fine-tuning and for PMDO with every score a
    mean ± spread in range; PMDO's GPM bases hold at most `in` vectors, its free capacity mean(1 − A) lies in
    [0, 1] and falls after the first task; accuracy matrices are lower triangular."""
    rows = {(row["source"], row["method"], row["setting"]): row for row in record["rows"]}
    assert set(rows) == {("synthetic", "finetune", "ce current"), ("synthetic", "pmdo", "ce current")}, rows
    for row in rows.values():
        values = {s: float(row[s].split(" ± ")[0]) for s in ("A_bar", "A_T", "F", "BWT", "newest")}
        assert all(0 <= values[s] <= 1 for s in ("A_bar", "A_T", "F", "newest")) and -1 <= values["BWT"] <= 0.5
    extra = record["extra"]
    (sizes,) = extra["gpm_basis_sizes"]["synthetic | pmdo | ce current"]
    assert 0 < sizes["l1"][0] <= 64 and 0 < sizes["l2"][0] <= 16 and sizes["l1"][1] >= sizes["l1"][0]
    (capacity,) = extra["capacity_mean_1_minus_A"]["synthetic | pmdo | ce current"]
    assert all(0 <= c[1] <= c[0] <= 1 for c in capacity.values()), capacity
    for matrix in extra["mean_accuracy_matrix"].values():
        assert matrix[0][1] == 0 and 0 <= min(matrix[1]) and max(matrix[1]) <= 1
    assert (out / "matrices.png").stat().st_size > 0


def notime_rows(out: pathlib.Path, record: dict) -> None:
    """NOTIME's smoke run: every method on the raw and the x10 data of one 2-node ANM, the direction test's
    squared-error and independence rows, scores in range, the adjacency figure drawn."""
    rows = {(row["setting"], row["d"], row["method"]): row for row in record["rows"]}
    methods = ("notears_mse", "notime", "notime_agl")
    expected = {(s, 2, m) for s in ("raw", "x10") for m in methods}
    expected |= {(s, 2, m) for s in ("pair raw", "pair x10") for m in methods[:2]}
    assert set(rows) == expected, rows
    for (setting, _, _), row in rows.items():
        shd, tpr, fdr = (float(row[k].split(" ± ")[0]) for k in ("shd", "tpr", "fdr"))
        assert 0 <= shd <= 1 and 0 <= tpr <= 1 and 0 <= fdr <= 1, row
        assert (row["direction"] == "-") == (not setting.startswith("pair")), row
    assert (out / "graphs.png").stat().st_size > 0


def gnn_missing_rows(out: pathlib.Path, record: dict) -> None:
    """gnn_missing's smoke run: GNNmim and gcnmi under FDMNAR p = 0.5 and the three selectors; scores in [0, 1];
    "all" keeps all 16 features, "random" as many as ANFS; the kept masks hold that many features."""
    rows = {(row["part"], row["setting"], row["method"]): row for row in record["rows"]}
    assert set(rows) == {("missing", "fdmnar p=0.5", "gnnmim"), ("missing", "fdmnar p=0.5", "gcnmi"),
                         ("selection", "csbm noise features", "all"), ("selection", "csbm noise features", "anfs"),
                         ("selection", "csbm noise features", "random")}, rows
    for row in rows.values():
        scores = [row[k] for k in ("macro_f1", "accuracy") if row[k] != "-"]
        assert scores and all(0 <= float(v.split(" ± ")[0]) <= 1 for v in scores), row
    selection = {key[2]: row for key, row in rows.items() if key[0] == "selection"}
    assert selection["all"]["features_kept"] == "16.0 ± 0.0" and selection["all"]["noise_dropped"] == "0.000 ± 0.000"
    assert selection["random"]["features_kept"] == selection["anfs"]["features_kept"]
    for selector, (mask,) in record["extra"]["selection_active"].items():
        assert len(mask) == 16 and sum(mask) == float(selection[selector]["features_kept"].split(" ± ")[0])
    assert (out / "gnn_missing.png").stat().st_size > 0


def xr1_rows(out: pathlib.Path, record: dict) -> None:
    """XR-1's smoke run: the kl variant's row; MSEs positive, code counts within the 64-code books, agreement in
    [0, 1], KL non-negative; the loss figure is drawn."""
    rows = {row["variant"]: row for row in record["rows"]}
    assert set(rows) == {"kl"}, rows
    for row in rows.values():
        value = {k: float(row[k].split(" ± ")[0]) for k in row if k != "variant"}
        assert all(value[k] > 0 for k in ("image_mse", "copy_mse", "action_mse", "mean_action_mse")), row
        assert 1 <= value["vision_codes"] <= 64 and 1 <= value["action_codes"] <= 64, row
        assert 0 <= value["agreement"] <= 1 and value["kl"] >= 0, row
    assert (out / "losses.png").stat().st_size > 0


def api_rows(out: pathlib.Path, record: dict) -> None:
    """API's smoke run: one row (diam fill, rate 0.5) with scores in range; the scores figure is drawn. The cell's
    final checkpoint holds the SCOPE bank as model variables (`TrainState.variables`), rebuilt by the trainer's
    step after each of the two epochs: every prototype ready, the cache just emptied, the bank non-zero."""
    (row,) = record["rows"]
    assert (row["fill"], row["missing_rate"]) == ("diam", "0.5"), row
    value = {k: float(row[k].split(" ± ")[0]) for k in ("mae", "acc7", "acc2", "class_acc", "imp_err")}
    assert 0 <= value["mae"] <= 6 and value["imp_err"] >= 0, row
    assert all(0 <= value[k] <= 1 for k in ("acc7", "acc2", "class_acc")), row
    assert (out / "scores.png").stat().st_size > 0
    with Checkpointer(out / "cells" / "diam_seed0" / "checkpoints", read_only=True) as checkpointer:
        # Read against the checkpoint's own metadata: no model is built or compiled.
        state, _ = checkpointer.restore(checkpointer.latest_step(), checkpointer.saved_structure())
    bank = state["variables"]["api"]
    assert np.asarray(bank["ready"]).all() and int(bank["cache_count"]) == 0, bank["ready"]
    assert np.abs(np.asarray(bank["prototypes"])).sum() > 0


SMOKE_CHECKS: dict[str, Callable[[pathlib.Path, dict], None]] = {"api": api_rows,
                                                                 "acda": acda_rows,
                                                                 "apb": apb_rows,
                                                                 "gnn_missing": gnn_missing_rows,
                                                                 "leaderboard": leaderboard_rows,
                                                                 "notime": notime_rows,
                                                                 "pmdo": pmdo_rows,
                                                                 "surge": surge_rows,
                                                                 "xr1": xr1_rows}
