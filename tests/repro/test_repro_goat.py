"""The GOAT reproduction's inputs and its measuring pieces: the length evaluator (same targets at every context
length, exact against separately cut rows, bounded by max_seq_len) and the sink statistic (closed forms on
hand-built attention matrices). The SMOKE experiment itself runs in the experiment contract
(tests/repro/test_experiments.py: command line, one-line errors, outputs, resume) and the notebook test."""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from tolerances import tolerance

from icml26zoo.configs import load_preset
from icml26zoo.models import build_model
from icml26zoo.models.lm import positions_from_segments
from icml26zoo.repro import goat
from icml26zoo.repro.goat_parts import (
    chunked_segments,
    length_losses,
    model_config,
    single_segment_rows,
    sink_profile,
)

B, N = 2, 16


pytestmark = pytest.mark.usefixtures("fast_compile")  # tests/conftest.py: tiny models, compile time dominates


@pytest.fixture(scope="module")
def tiny_goat():
    """A random 1-layer GOAT LM (head_dim 8, R = 2) trained at 4 tokens and able to run 16."""
    base = load_preset("goat_tiny").model
    cfg = model_config(base, "goat", train_len=4, max_len=N, head_dim=8, pos_rank=2)
    cfg = dataclasses.replace(cfg, d_model=16, num_layers=1, vocab_size=32, num_heads=2, num_kv_heads=1)
    return build_model(cfg, rngs=nnx.Rngs(0))


def _batch(seed=0):
    """Rows [B, N] as the pipeline packs them: row 0 is one document, row 1 two pieces and padding."""
    rng = np.random.default_rng(seed)
    segment_ids = np.array([[1] * N, [1] * 6 + [2] * 7 + [0] * 3], np.int32)
    weights = (segment_ids > 0).astype(np.float32)
    return {"inputs": rng.integers(0, 32, (B, N)).astype(np.int32),
            "targets": (rng.integers(0, 32, (B, N)) * weights).astype(np.int32),
            "segment_ids": segment_ids, "weights": weights}


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"models": ("goat", "nope")}, r"models: unknown name 'nope'; expected one of \['goat', 'rope', 'alibi'\]"),
    ({"models": ()}, r"models must name at least one"),
    ({"pos_rank": -1}, r"pos_rank must be an integer >= 0, got -1"),
    ({"head_dim": 8, "pos_rank": 4}, r"head_dim must be even .* exceed GOAT's 2·pos_rank \+ 1 = 9 .* head_dim=8"),
    ({"head_dim": 15, "pos_rank": 1}, r"head_dim must be even"),
    ({"eval_rows": 0}, r"eval_rows must be an integer >= 1, got 0"),
    ({"sink_i0": 32}, r"sink_i0 must be below the training length T = 32, got 32"),
    ({"position_bins": 129}, r"position_bins must be at most 4T = 128, got 129"),
    ({"fast_compile": 1}, r"fast_compile must be True or False, got 1"),
])
def test_run_rejects_bad_arguments_before_training(tmp_path, kwargs, message):
    with pytest.raises(ValueError, match=message):
        goat.run(tmp_path / "run", budget=goat.QUICK, **kwargs)
    assert not (tmp_path / "run").exists()


def test_chunked_segments_cut_rows_into_independent_chunks():
    ids, positions = chunked_segments(np.array([[1, 1, 1, 2, 2, 2, 0, 0]]), 4)
    np.testing.assert_array_equal(ids, [[1, 1, 1, 2, 5, 5, 0, 0]])
    np.testing.assert_array_equal(positions[:, :6], [[0, 1, 2, 0, 0, 1]])
    with pytest.raises(ValueError, match=r"length 3 must divide the row length 8"):
        chunked_segments(np.ones((1, 8), np.int32), 3)


def test_length_evaluator_equals_separately_cut_rows(tiny_goat):
    batch = _batch()
    losses, captured = length_losses(tiny_goat, batch, (4, 8, 16), capture_rows=[0])
    assert sorted(losses) == [4, 8, 16] and captured["probs"].shape == (1, 1, 2, N, N)
    weights = batch["weights"]
    for length, result in losses.items():
        assert result.tokens == int(weights.sum()) and np.isfinite(result.bits) and result.bits > 0
        assert result.position_bits.shape == (length,) and result.position_tokens.sum() == result.tokens
        # The same targets, cut into rows of `length` that each start a fresh context.
        ids, inputs, targets, w = (jnp.asarray(batch[k].reshape(-1, length))
                                   for k in ("segment_ids", "inputs", "targets", "weights"))
        logits = tiny_goat(inputs, segment_ids=ids, positions=positions_from_segments(ids))
        nll = -jnp.take_along_axis(jax.nn.log_softmax(logits, -1), targets[..., None], -1)[..., 0]
        want = float(jnp.sum(nll * w) / weights.sum()) / math.log(2)
        np.testing.assert_allclose(result.bits, want, rtol=tolerance("default").fwd)
    # More context changes the loss of a random model (the lengths do see different contexts).
    assert losses[4].bits != losses[16].bits


def test_length_evaluator_rejects_bad_lengths(tiny_goat):
    batch = _batch()
    with pytest.raises(ValueError, match=r"length 32 exceeds the model's max_seq_len \(16\)"):
        length_losses(tiny_goat, {k: np.tile(v, (1, 2)) for k, v in batch.items()}, (8, 32))
    with pytest.raises(ValueError, match=r"lengths: 6 must divide the batch's row length 16"):
        length_losses(tiny_goat, batch, (6,))
    with pytest.raises(ValueError, match=r"lengths must be strictly increasing"):
        length_losses(tiny_goat, batch, (8, 4))
    with pytest.raises(ValueError, match=r"lengths\[i\] must be an integer >= 2"):
        length_losses(tiny_goat, batch, (1,))
    with pytest.raises(ValueError, match=r"capture_rows must index the batch's 2 rows"):
        length_losses(tiny_goat, batch, (16,), capture_rows=[2])


def _uniform_causal(n):
    """P[i, j] = 1 / (i + 1) for j <= i: every query spreads evenly over what it sees."""
    i, j = np.arange(n)[:, None], np.arange(n)[None, :]
    return np.where(j <= i, 1.0 / (i + 1), 0.0)


def _fixed_sink(n, a):
    """P[i, 0] = a and the rest 1 - a spread evenly over keys 1 .. i (query 0 sees only key 0)."""
    i, j = np.arange(n)[:, None], np.arange(n)[None, :]
    p = np.where((j >= 1) & (j <= i), (1 - a) / np.maximum(i, 1), 0.0)
    p[:, 0] = a
    p[0, 0] = 1.0
    return p


def test_sink_statistic_matches_its_closed_form():
    n, i0, a = 12, 3, 0.7
    heads = np.stack([_uniform_causal(n), _fixed_sink(n, a)])  # [H=2, n, n]
    probs = np.broadcast_to(heads, (1, 2, 2, n, n)).copy()  # [L=1, b=2, H, n, n]
    hidden = np.random.default_rng(0).normal(size=(2, 2, n, 4))
    tokens = np.zeros((2, n), np.int32)
    profile = sink_profile(probs, hidden, tokens, i0=i0, lengths=(6, n))
    for length in (6, n):
        uniform = np.mean([1.0 / (i + 1) for i in range(i0, length)])  # (H_length - H_i0) / (length - i0)
        np.testing.assert_allclose(profile[length]["first_token_mass"], [[uniform, a]], rtol=1e-12)
        np.testing.assert_allclose(profile[length]["layer_mass"], [(uniform + a) / 2], rtol=1e-12)
        want_ratio = np.abs(hidden[:, :, :length]).reshape(2, -1).max(1) / np.median(
            np.abs(hidden[:, :, :length]).reshape(2, -1), axis=1)
        np.testing.assert_allclose(profile[length]["max_ratio"], want_ratio, rtol=1e-6)
    with pytest.raises(ValueError, match=r"lengths: 3 must be an integer in \(3, 12\]"):
        sink_profile(probs, hidden, tokens, i0=i0, lengths=(3,))
    with pytest.raises(ValueError, match=r"no attention probabilities"):
        sink_profile(None, hidden, tokens, i0=i0, lengths=(n,))


def test_single_segment_rows_skip_mixed_and_padded_rows():
    ids = np.array([[1, 1, 2, 2], [3, 3, 3, 3], [0, 0, 0, 0], [1, 1, 1, 1]])
    np.testing.assert_array_equal(single_segment_rows(ids, 8), [1, 3])
    np.testing.assert_array_equal(single_segment_rows(ids, 1), [1])
    with pytest.raises(ValueError, match=r"no eval row holds a single document"):
        single_segment_rows(ids[:1], 4)


def test_compared_models_differ_only_in_the_prior():
    base = load_preset("goat_tiny").model
    configs = {m: model_config(base, m, train_len=32, max_len=128, head_dim=32, pos_rank=4) for m in goat.MODELS}
    assert dict(configs["goat"].mixer_options) == {"pos_rank": 4, "training_seq_len": 32}
    assert configs["rope"].mixer_options == (("position", "rope"),)
    assert configs["alibi"].mixer_options == (("position", "alibi"),)
    for cfg in configs.values():
        assert (cfg.max_seq_len, cfg.head_dim, cfg.d_model, cfg.num_layers) == (128, 32, 64, 2)
