"""MoE feed-forwards inside the decoder LM: the conformance harness's decoding and packing checks, the
"lm_moe" objective's auxiliary losses, and a short training run on the built-in byte corpus."""

from __future__ import annotations

import functools
import json
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import test_conformance as conformance
from flax import nnx

from icml26zoo.configs import load_preset
from icml26zoo.losses.moe import forward_with_aux, lm_moe_objective
from icml26zoo.losses.objectives import lm_objective
from icml26zoo.models import ModelConfig
from icml26zoo.moe import MoEConfig, MoEFeedForward
from icml26zoo.registry import OBJECTIVES
from icml26zoo.train.config import apply_overrides
from icml26zoo.train.loop import train

pytestmark = pytest.mark.usefixtures("fast_compile")

ROOT = pathlib.Path(__file__).resolve().parents[2]
# Per-token routers (their choice for a token depends on that token only), so causal decoding and packing
# hold exactly as for a dense MLP; dropless (no capacity), where tokens would compete across the batch.
MOE = {"num_experts": 4, "top_k": 2}


@pytest.fixture(scope="module")
def case() -> conformance.Case:
    # Every router chooses per token; the top-k softmax router stands for them (the others' per-token
    # routing is checked against its own references in test_moe_routers).
    return conformance.Case(ModelConfig(mixer="attention", moe=MoEConfig(router="topk_softmax", **MOE),
                                              **conformance.TINY))


def test_blocks_hold_moe_feed_forwards_and_only_params(case):
    assert isinstance(case.model.layers.mlp, MoEFeedForward)
    assert not jax.tree.leaves(nnx.state(case.model, nnx.Not(nnx.Param)))


def test_decode_token_by_token_equals_forward(case):
    conformance.test_decode_token_by_token_equals_forward(case)


def test_packed_equals_separate_padded(case):
    conformance.test_packed_equals_separate_padded(case)


def test_causality_by_perturbing_future_tokens(case):
    conformance.test_causality_by_perturbing_future_tokens(case)


def _batch(tokens: jax.Array) -> dict[str, jax.Array]:
    """Next-token batch of one unpacked sequence per row: tokens [B, T + 1]."""
    rows, length = tokens.shape[0], tokens.shape[1] - 1
    return {
        "inputs": tokens[:, :-1],
        "targets": tokens[:, 1:],
        "segment_ids": jnp.ones((rows, length), jnp.int32),
        "positions": jnp.broadcast_to(jnp.arange(length, dtype=jnp.int32), (rows, length)),
        "weights": jnp.ones((rows, length), jnp.float32),
    }


@functools.partial(jax.jit, static_argnums=0)
def _objectives(graphdef, state, batch):
    """(lm_moe loss, lm loss, lm_moe metrics, lm metrics, aux) of the model (graphdef, state)."""
    model = nnx.merge(graphdef, state)
    loss, metrics = lm_moe_objective(model, batch, jax.random.key(0))
    plain, plain_metrics = lm_objective(model, batch, jax.random.key(0))
    _, aux = forward_with_aux(model, batch["inputs"])
    return loss, plain, metrics, plain_metrics, aux


def _run_objectives(cfg: ModelConfig, seed: int):
    graphdef, state = nnx.split(conformance.build_model(cfg, rngs=nnx.Rngs(seed)))
    batch = _batch(conformance._tokens(seed, (2, 13)))
    return batch, _objectives(graphdef, state, batch)


def test_lm_moe_adds_the_auxiliary_losses_of_every_layer():
    cfg = ModelConfig(mixer="attention", moe=MoEConfig(**MOE, load_balance_weight=0.5, z_loss_weight=0.1),
                      **conformance.TINY)
    assert OBJECTIVES.get("lm_moe") is lm_moe_objective
    _, (loss, plain, metrics, plain_metrics, aux) = _run_objectives(cfg, 1)
    assert aux["loss"].shape == (cfg.num_layers,) and aux["load"].shape == (cfg.num_layers, 4)
    conformance._close(aux["loss"], 0.5 * aux["load_balance"] + 0.1 * aux["router_z"])
    assert float(aux["load_balance"].min()) > 0 and float(aux["router_z"].min()) > 0
    conformance._close(loss, plain + jnp.sum(aux["loss"]))
    # The summed metrics stay the plain cross-entropy's, so evaluations compare with dense models; the rest are
    # train diagnostics (names with a "/", which evaluation ignores).
    sums = {name: value for name, value in metrics.items() if "/" not in name}
    jax.tree.map(np.testing.assert_array_equal, sums, plain_metrics)
    assert set(metrics) - set(sums) and all(name.startswith("moe/") for name in set(metrics) - set(sums))


def test_confidence_router_loss_regresses_on_the_next_token_probability():
    cfg = ModelConfig(mixer="attention", moe=MoEConfig(router="confidence", **MOE), **conformance.TINY)
    batch, (loss, plain, _, _, aux) = _run_objectives(cfg, 2)
    probs = jax.nn.softmax(aux["class_logits"], axis=-1)
    targets = jnp.take_along_axis(probs, batch["targets"][None, :, :, None, None], axis=-1)[..., 0]
    expected = jnp.mean((aux["confidence"] - targets) ** 2)
    conformance._close(loss - plain, expected)
    np.testing.assert_array_equal(aux["loss"], np.zeros(cfg.num_layers))  # no balancing loss (ConfSMoE)


def test_moe_lm_trains_on_the_byte_corpus(tmp_path):
    config = apply_overrides(load_preset(ROOT / "configs" / "moe_tiny.py"), [
        "num_steps=24", "batch_size=8", "seq_len=32", "log_every=4", "eval_batches=1", "eval_every=0",
        "checkpoint_every=0", "sample_length=0", "tensorboard=false", "progress_bar=false",
        "optim.warmup_steps=4",
    ])
    assert config.objective == "lm_moe" and config.model.moe.num_experts == 4
    train(config, tmp_path, devices=jax.devices()[:1])
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    train_records = [r for r in records if "train/loss" in r]
    losses = [r["train/loss"] for r in train_records]
    assert losses[-1] < losses[0] - 0.5, losses
    # The routing diagnostics of every train step reach the run's metrics (the objective's train diagnostics).
    for record in train_records:
        for layer in range(config.model.num_layers):
            loads = [record[f"moe/layer{layer}/load/{e}"] for e in range(4)]
            np.testing.assert_allclose(sum(loads), 1.0, atol=1e-5)
            assert 0.0 <= record[f"moe/layer{layer}/collapse"] <= 1.0
        assert record["moe/dropped"] == 0.0  # dropless preset
    assert not any(key.startswith("moe/") for r in records if "eval/loss" in r for key in r)
    assert (tmp_path / "loss_curve.png").stat().st_size > 0
