"""Fine-tuning in the shared trainer: `init_from` (another run's newest parameters) and LoRA (`lora_rank`):
exact restore, clear errors, adapters-only training with bit-identical base weights, rank validation."""

from __future__ import annotations

import dataclasses

import flax.traverse_util as traverse
import jax
import numpy as np
import pytest

from icml26zoo.configs import load_preset
from icml26zoo.train import load_run
from icml26zoo.train.config import apply_overrides
from icml26zoo.train.errors import CheckpointError
from icml26zoo.train.loop import train
from icml26zoo.train.runs import build_run

# Every comparison here is between programs compiled under the same setting, so XLA's cheap pipeline is safe.
pytestmark = pytest.mark.usefixtures("fast_compile")


def tiny_config(data_dir, **changes):
    """A 1-layer llama_tiny on a small MQAR, 2 steps, one checkpoint at the end."""
    config = apply_overrides(load_preset("llama_tiny"), [
        "model.num_layers=1", "data.name=mqar", f"data.data_dir={data_dir}", "data.mqar_num_keys=16",
        "data.mqar_num_values=16", "data.mqar_num_pairs=4", "data.mqar_train_examples=256",
        "data.mqar_eval_examples=16", "model.vocab_size=64", "seq_len=32", "batch_size=8", "num_steps=2",
        "log_every=1", "eval_batches=1", "checkpoint_every=2", "tensorboard=false", "progress_bar=false",
        "sample_length=0",
    ])
    return dataclasses.replace(config, **changes)


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory):
    """(root, config, the source run's final params as flat host arrays)."""
    root = tmp_path_factory.mktemp("finetune")
    config = tiny_config(root / "data")
    state = train(config, root / "pre")["state"]
    return root, config, traverse.flatten_dict(jax.device_get(state.params), sep="/")


def flat(params) -> dict[str, np.ndarray]:
    return {k: np.asarray(v) for k, v in traverse.flatten_dict(jax.device_get(params), sep="/").items()}


def test_init_from_restores_the_pretrained_params_exactly(pretrained):
    root, config, source = pretrained
    _, state = build_run(dataclasses.replace(config, init_from=str(root / "pre"), seed=7))
    params = flat(state.params)
    assert params.keys() == source.keys()
    for key, value in source.items():
        np.testing.assert_array_equal(params[key], value, err_msg=key)
    fresh = flat(build_run(dataclasses.replace(config, seed=7))[1].params)
    assert any(not np.array_equal(fresh[k], v) for k, v in source.items())  # the test can fail


def test_init_from_errors_name_the_run_and_the_mismatch(pretrained, tmp_path):
    root, config, _ = pretrained
    with pytest.raises(CheckpointError, match="init_from"):
        build_run(dataclasses.replace(config, init_from=str(tmp_path / "missing")))
    wider = dataclasses.replace(config, model=dataclasses.replace(config.model, vocab_size=80),
                                init_from=str(root / "pre"))
    with pytest.raises(ValueError, match=r"init_from .*shape"):
        build_run(wider)


@pytest.mark.parametrize("optimizer", ["adamw", "muon"])
def test_lora_trains_only_the_adapters(pretrained, optimizer):
    root, config, source = pretrained
    lora = dataclasses.replace(config, init_from=str(root / "pre"), lora_rank=4,
                               optim=dataclasses.replace(config.optim, name=optimizer, learning_rate=1e-2))
    state = train(lora, root / f"lora_{optimizer}")["state"]
    params = flat(state.params)
    adapters = {k: v for k, v in params.items() if k.rsplit("/", 1)[-1] in ("lora_a", "lora_b")}
    assert adapters and all(np.any(v) for k, v in adapters.items() if k.endswith("lora_b"))  # B left zero
    for key, value in params.items():
        if key not in adapters:
            np.testing.assert_array_equal(value, source[key.replace("/base", "")], err_msg=key)
    # The optimizer holds state for the adapters only (AdamW: two moments, Muon: one momentum + none).
    state_size = sum(np.size(leaf) for leaf in jax.tree.leaves(state.opt_state)
                     if np.ndim(leaf) >= 2)  # adapters are [L, in, r] / [L, r, out]; Muon keeps 1-D ns_coeffs
    per_adapter = {"adamw": 2, "muon": 1}[optimizer]
    assert state_size == per_adapter * sum(v.size for v in adapters.values())
    # load_run reopens the LoRA run (without its init_from) as a callable model.
    _, model, loaded = load_run(root / f"lora_{optimizer}")
    for key, value in flat(loaded.params).items():
        np.testing.assert_array_equal(value, params[key], err_msg=key)
    assert model(np.zeros((1, 8), np.int32)).shape == (1, 8, config.model.vocab_size)


@pytest.mark.parametrize(("changes", "field"), [
    ({"lora_rank": -1}, "lora_rank"), ({"lora_rank": 2, "lora_alpha": 0.0}, "lora_alpha"),
    ({"lora_rank": 2, "lora_targets": ()}, "lora_targets"), ({"init_from": ""}, "init_from"),
])
def test_bad_lora_fields_are_value_errors_naming_the_field(tmp_path, changes, field):
    with pytest.raises(ValueError, match=field):
        tiny_config(tmp_path, **changes)


def test_lora_rank_above_a_layer_width_names_lora_rank(tmp_path):
    # k_proj / v_proj of the 64-wide grouped-query model are 64 -> 32: rank 33 does not fit, 32 does.
    with pytest.raises(ValueError, match=r"lora_rank .* 33 > 32"):
        build_run(tiny_config(tmp_path, lora_rank=33))
    build_run(tiny_config(tmp_path, lora_rank=32, optim=dataclasses.replace(tiny_config(tmp_path).optim)))
