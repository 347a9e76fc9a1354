"""The Muon fine-tuning reproduction: bad inputs, the stable-rank and delta helpers on known matrices, and that
each fine-tuning cell wires the trainer as described. The SMOKE experiment itself runs in the experiment contract
(tests/repro/test_experiments.py: the notebook at SMOKE, one-line errors, outputs, resume through the command
line)."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from icml26zoo.repro import muon_lora
from icml26zoo.repro import muon_lora_parts as parts


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"optimizers": ("muon", "sgd")}, "optimizers: unknown name 'sgd'"),
    ({"optimizers": ()}, "optimizers must name at least one"),
    ({"ranks": (0, -4)}, r"ranks\[i\] \(0 = full fine-tuning\) must be an integer >= 0, got -4"),
    ({"ranks": (4, 4)}, "ranks must not repeat"),
    ({"ranks": (128,)}, r"ranks: lora_rank must be at most .* 128 > 64"),
    ({"d_model": 60}, r"d_model must be a multiple of 8 \(4 heads of an even width\), got 60"),
    ({"ablation": "yes"}, "ablation must be True or False, got 'yes'"),
    # muon_lr is checked even without muon among the optimizers: the ablation needs it
    ({"optimizers": ("adamw",), "muon_lr": 0.0}, r"muon_lr must be a finite positive number, got 0.0"),
    ({"muon_lr": -1.0}, r"muon_lr must be a finite positive number, got -1.0"),
    ({"muon_lr": math.inf}, r"muon_lr must be a finite positive number, got inf"),
    ({"adamw_lr": True}, r"adamw_lr must be a finite positive number, got True"),
    ({"fast_compile": 1}, "fast_compile must be True or False, got 1"),
])
def test_bad_arguments_are_value_errors_naming_them(tmp_path, kwargs, match):
    with pytest.raises(ValueError, match=match):
        muon_lora.run(tmp_path / "run", budget=muon_lora.QUICK, **kwargs)
    assert not (tmp_path / "run").exists()  # rejected before the run directory is made


def test_stable_rank_of_known_matrices():
    assert parts.stable_rank(np.diag([3.0, 1.0, 1.0, 0.0])[:, [0, 1, 2, 3, 3, 3]]) == pytest.approx(11 / 9, rel=1e-6)
    assert parts.stable_rank(np.eye(4, 6)) == pytest.approx(4.0, rel=1e-6)
    rank_one = np.outer(np.arange(1.0, 5.0), np.ones(6))
    assert parts.stable_rank(rank_one) == pytest.approx(1.0, rel=1e-5)
    assert math.isnan(parts.stable_rank(np.zeros((4, 6))))
    stats = parts.spectral_stats(np.diag([2.0, 2.0, 0.0]))  # two equal singular values out of three
    assert stats["spectral_entropy"] == pytest.approx(np.log(2) / np.log(3), rel=1e-9)
    assert (stats["frobenius_norm"], stats["spectral_norm"]) == pytest.approx((np.sqrt(8), 2.0), rel=1e-9)


def test_matrix_deltas_take_linear_kernels_per_layer_and_skip_embeddings_and_norms():
    before = {"embed": {"embedding": np.zeros((10, 4))},
              "layers": {"mixer": {"q_proj": {"kernel": np.zeros((2, 4, 6))}}, "norm": {"scale": np.zeros((2, 4))}}}
    after = {"embed": {"embedding": np.ones((10, 4))},
             "layers": {"mixer": {"q_proj": {"kernel": np.stack([np.eye(4, 6), 2 * np.eye(4, 6)])}},
                        "norm": {"scale": np.ones((2, 4))}}}
    deltas = parts.matrix_deltas(before, after)
    assert [d.shape for d in deltas] == [(4, 6), (4, 6)]
    np.testing.assert_array_equal(deltas[1], 2 * np.eye(4, 6))
    strength = parts.mean_update_strength(before, after)
    assert strength["stable_rank"] == pytest.approx(4.0, rel=1e-6)
    assert strength["frobenius_norm"] == pytest.approx((2 + 4) / 2, rel=1e-6)


def test_finetune_cell_config_wires_init_from_lora_and_the_task(tmp_path):
    pre = parts.pretrain_config(tmp_path / "data")
    assert pre.data.name == "pystdlib" and pre.optim.name == "adamw"
    config = parts.finetune_config(pre, tmp_path / "pre", parts.finetune_data(tmp_path / "data"), optimizer="muon",
                                   rank=16, learning_rate=1e-2)
    assert (config.init_from, config.lora_rank, config.lora_alpha) == (str(tmp_path / "pre"), 16, None)
    assert config.data.name == "mqar" and config.optim.name == "muon" and config.optim.weight_decay == 0.0
    assert dataclasses.replace(config, data=pre.data, optim=pre.optim, init_from=None, lora_rank=0,
                               eval_batches=pre.eval_batches) == pre  # only the fine-tuning fields differ
    assert muon_lora.cell_name("muon", 0, 1) == "muon_full_s1" and muon_lora.cell_name("adamw", 4, 0) == "adamw_r4_s0"
    assert muon_lora.cell_name("muon", 0, 1, ("polar_express", "bfloat16")) == "muon_full_polar_express_bfloat16_s1"


def test_ns_variants_set_the_muon_options_only_when_they_differ_from_the_default(tmp_path):
    pre = parts.pretrain_config(tmp_path / "data", d_model=128)
    assert pre.model.d_model == 128 and pre.model.num_kv_heads == 2  # K/V width 64: r = 64 fits
    data = parts.finetune_data(tmp_path / "data")
    ablated = parts.finetune_config(pre, tmp_path / "pre", data, optimizer="muon", rank=0, learning_rate=1e-2,
                                    ns=("polar_express", "bfloat16"))
    assert dict(ablated.optim.options) == {"ns_coeffs": "polar_express", "ns_dtype": "bfloat16"}
    default = parts.finetune_config(pre, tmp_path / "pre", data, optimizer="muon", rank=0, learning_rate=1e-2)
    assert default.optim.options == ()
    with pytest.raises(ValueError, match="applies to optimizer 'muon' only"):
        parts.finetune_config(pre, tmp_path / "pre", data, optimizer="adamw", rank=0, learning_rate=1e-3,
                              ns=("polar_express", "float32"))


def test_orthogonality_error_of_the_newton_schulz_variants():
    matrix = parts.conditioned_matrix((48, 16), condition=100.0)
    sigma = np.linalg.svd(matrix, compute_uv=False)
    np.testing.assert_allclose(sigma[[0, -1]], [1.0, 0.01], rtol=1e-6)
    # Standard quintic on a well-conditioned matrix: the spec's measured band, about [0.68, 1.13].
    standard = parts.orthogonality_error(("standard", "float32"), shape=(48, 16), condition=10.0)
    assert 0.6 < standard["sigma_min"] and standard["sigma_max"] < 1.2
    assert standard["orth_error"] == pytest.approx(max(1 - standard["sigma_min"], standard["sigma_max"] - 1))
    # Polar Express is built to orthogonalise singular values down to 1e-3 of the largest better.
    polar = parts.orthogonality_error(("polar_express", "float32"), shape=(48, 16), condition=10.0)
    assert polar["orth_error"] < standard["orth_error"]
    with pytest.raises(ValueError, match=r"gradient must be a matrix \[in, out\] with in >= out"):
        parts.newton_schulz_singular_values(np.zeros((4, 8)), ("standard", "float32"))
