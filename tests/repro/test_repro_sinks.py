"""The sinks reproduction: bad inputs, the variants, and the measurements on a tiny untrained model with a planted
spike. The SMOKE experiment runs in the experiment contract (tests/repro/test_experiments.py) and the notebook
test (tests/test_notebooks.py)."""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
import pytest
from flax import nnx

from icml26zoo.mixers.attention import AttentionOptions
from icml26zoo.mixers.base import mixer_options
from icml26zoo.models import ModelConfig, build_model
from icml26zoo.repro import sinks
from icml26zoo.repro.sinks_parts import VARIANTS, _spike_entries, _stream_stats, document_rows, profile, variant_config

pytestmark = pytest.mark.usefixtures("fast_compile")  # tolerance and range checks only (tests/conftest.py)

CFG = ModelConfig(vocab_size=64, d_model=32, num_layers=2, num_heads=4, num_kv_heads=2, mlp_dim=64, scan_layers=False)
SPIKE_TOKEN, SPIKE_CHANNEL = 63, 5


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"variants": ("pre", "postnorm")}, r"variants: unknown name 'postnorm'"),
    ({"variants": ()}, r"variants must name at least one"),
    ({"num_layers": 1}, r"num_layers"),
    ({"i0": 32}, r"i0 must be below the sequence length T = 32, got 32"),
    ({"eps": 1.0}, r"eps must be a number in \(0, 1\), got 1.0"),
    ({"clamp_channels": 65}, r"clamp_channels must be at most d_model = 64, got 65"),
    ({"eval_rows": 0}, r"eval_rows"),
])
def test_bad_arguments_raise(tmp_path, kwargs, message):
    with pytest.raises(ValueError, match=message):
        sinks.run(tmp_path / "run", budget=sinks.QUICK, **kwargs)
    assert not (tmp_path / "run").exists()  # rejected before anything is written


def test_variants_change_only_their_switch():
    assert set(sinks.DEFAULT_VARIANTS) <= set(VARIANTS) and set(sinks.QUICK_VARIANTS) <= set(VARIANTS)
    assert set(sinks.SMOKE_ARGS["variants"]) <= set(VARIANTS)
    assert variant_config(CFG, "pre") == CFG
    assert variant_config(CFG, "post").norm_placement == "post"
    assert variant_config(CFG, "dyt").norm == "dyt" and variant_config(CFG, "dyt").norm_placement == "pre"
    assert mixer_options(variant_config(CFG, "sink"), "attention", AttentionOptions).sink == "learnable"
    assert mixer_options(variant_config(CFG, "gate"), "attention", AttentionOptions).output_gate == "channel"
    changed = {v: {f.name for f in dataclasses.fields(CFG)
                   if getattr(variant_config(CFG, v), f.name) != getattr(CFG, f.name)} for v in VARIANTS}
    assert all(len(fields) == (v != "pre") for v, fields in changed.items())


def test_document_rows_keep_single_document_rows():
    batch = {"inputs": np.arange(12).reshape(3, 4),
             "segment_ids": np.asarray([[1, 1, 1, 1], [2, 2, 3, 3], [4, 4, 4, 4]])}
    np.testing.assert_array_equal(document_rows(batch, 5), [[0, 1, 2, 3], [8, 9, 10, 11]])
    np.testing.assert_array_equal(document_rows(batch, 1), [[0, 1, 2, 3]])
    with pytest.raises(ValueError, match=r"no eval row holds a single document"):
        document_rows({"inputs": batch["inputs"][1:2], "segment_ids": batch["segment_ids"][1:2]}, 2)


def test_stream_stats_and_spike_entries_find_a_planted_spike():
    hidden = np.ones((3, 2, 5, 8), np.float32)
    hidden[1, 1, 3, 6], hidden[1, 1, 3, 2], hidden[1, 0, 0, 4] = -500.0, 40.0, 30.0
    stats = _stream_stats(hidden)
    np.testing.assert_allclose(stats["ratio"], [1.0, 500.0, 1.0])
    np.testing.assert_array_equal(stats["spike_pos"][1], [0, 3])
    assert _spike_entries(hidden[1], 2)[2:] == [(1, 3, 6), (1, 3, 2)]


def _planted(cfg: ModelConfig) -> nnx.Module:
    model = build_model(cfg, rngs=nnx.Rngs(0))
    table = model.embed.embedding[...]
    model.embed.embedding[...] = table.at[SPIKE_TOKEN, SPIKE_CHANNEL].set(1000.0)
    return model


def test_profile_sees_the_planted_spike_on_token_0_and_the_sink_slot():
    tokens = np.array(jax.random.randint(jax.random.key(0), (2, 12), 0, SPIKE_TOKEN))
    tokens[:, 0] = SPIKE_TOKEN
    plain = profile(_planted(CFG), tokens, i0=4, eps=0.3)
    assert plain["ratio"].shape == (3,) and plain["ratio"].min() > 100.0
    np.testing.assert_array_equal(plain["spike_first"], 1.0)
    assert plain["first_mass"].shape == (2,) and np.all((plain["first_mass"] >= 0) & (plain["first_mass"] <= 1))
    np.testing.assert_array_equal(plain["slot_mass"], 0.0)
    with_sink = profile(_planted(variant_config(CFG, "sink")), tokens, i0=4, eps=0.3)
    assert np.all(with_sink["slot_mass"] > 0.0)  # the sink logit starts at 0: the slot takes visible mass
    assert np.all(with_sink["first_mass"] + with_sink["slot_mass"] <= 1.0 + 1e-6)
