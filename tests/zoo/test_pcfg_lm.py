"""The `pcfg_lm` objective: the exact distribution it builds from token rows (packed segments, cut pieces,
padding), KL 0 for a model that outputs the grammar's own distribution, the KL of a uniform model in closed
form, its loss equal to `lm`'s, gradients under jit, and bad input."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from icml26zoo.configs import load_preset
from icml26zoo.losses import lm_objective
from icml26zoo.losses.pcfg_lm import exact_distributions, kl_sums, make_pcfg_objective
from icml26zoo.models import ModelConfig, build_model
from icml26zoo.pcfg import BOS, EOS, FIRST_TERMINAL, RandomGrammarSpec, exact_rows_of_sentence, sample_sentences
from icml26zoo.registry import OBJECTIVES
from icml26zoo.train.config import objective_options
from icml26zoo.train.data.pcfg import PCFGDataset

pytestmark = pytest.mark.usefixtures("fast_compile")

SPEC = RandomGrammarSpec(num_nonterminals=5, num_terminals=6, binary_rules=3, terminal_rules=3)
GRAMMAR = SPEC.grammar()
MODEL_VOCAB = 12


def _batch() -> dict[str, np.ndarray]:
    """Row 0: two sentences packed; row 1: a piece cut from a sentence (no <bos>), then padding."""
    first, second = (s.words + FIRST_TERMINAL for s in sample_sentences(GRAMMAR, 2, 5, 5))
    row0 = [BOS, *first, EOS, BOS, *second, EOS]
    row1 = [*first[1:], EOS]
    length = 16
    inputs, targets = np.zeros((2, length), np.int32), np.zeros((2, length), np.int32)
    segment_ids, positions = np.zeros((2, length), np.int32), np.zeros((2, length), np.int32)
    weights = np.zeros((2, length), np.float32)
    for row, pieces in enumerate([[row0[: first.size + 2], row0[first.size + 2 :]], [row1]]):
        offset = 0
        for segment, piece in enumerate(pieces, start=1):
            pairs = len(piece) - 1
            span = slice(offset, offset + pairs)
            inputs[row, span], targets[row, span] = piece[:-1], piece[1:]
            segment_ids[row, span], positions[row, span], weights[row, span] = segment, np.arange(pairs), 1.0
            offset += pairs
    return {"inputs": inputs, "targets": targets, "segment_ids": segment_ids, "positions": positions,
            "weights": weights, "words": (first - FIRST_TERMINAL, second - FIRST_TERMINAL)}


BATCH = _batch()
MODEL_BATCH = {k: jnp.asarray(v) for k, v in BATCH.items() if k != "words"}


class LogitsModel:
    """A stand-in model whose logits [B, T, MODEL_VOCAB] are given."""

    def __init__(self, logits: np.ndarray) -> None:
        self.logits = jnp.asarray(logits, jnp.float32)

    def __call__(self, inputs, segment_ids=None, positions=None):
        return self.logits


def test_exact_rows_of_packed_segments_cut_pieces_and_padding():
    exact, mask = exact_distributions(SPEC).rows(BATCH["inputs"], BATCH["segment_ids"])
    first, second = BATCH["words"]
    np.testing.assert_allclose(exact[0, : first.size + 1], exact_rows_of_sentence(GRAMMAR, first), rtol=1e-6)
    start = first.size + 1
    np.testing.assert_allclose(exact[0, start : start + second.size + 1], exact_rows_of_sentence(GRAMMAR, second),
                               rtol=1e-6)
    assert mask[0].sum() == first.size + second.size + 2 and mask[1].sum() == 0 and not exact[1].any()
    np.testing.assert_allclose(exact[mask > 0].sum(axis=-1), 1.0, rtol=1e-6)
    assert (exact[..., EOS][0, 0] == 0) and not exact[..., :EOS].any()


def test_kl_is_zero_for_the_grammar_and_closed_form_for_a_uniform_model():
    exact, mask = exact_distributions(SPEC).rows(BATCH["inputs"], BATCH["segment_ids"])
    padded = np.zeros((*exact.shape[:2], MODEL_VOCAB), np.float64)
    padded[..., : exact.shape[-1]] = exact
    objective = make_pcfg_objective(SPEC)
    _, metrics = objective(LogitsModel(np.log(padded + 1e-30)), MODEL_BATCH, jax.random.key(0))
    entropy = -np.sum(np.where(exact > 0, exact * np.log(np.where(exact > 0, exact, 1.0)), 0.0), axis=-1)
    assert float(metrics["kl_weight"]) == mask.sum()
    np.testing.assert_allclose(float(metrics["entropy_sum"]), entropy[mask > 0].sum(), rtol=1e-5)
    assert abs(float(metrics["kl_sum"])) < 1e-4
    # Uniform q over the model's vocabulary: KL(p ‖ q) = log V - H(p) at every position.
    _, uniform = objective(LogitsModel(np.zeros(padded.shape)), MODEL_BATCH, jax.random.key(0))
    np.testing.assert_allclose(float(uniform["kl_sum"]), np.sum((np.log(MODEL_VOCAB) - entropy)[mask > 0]), rtol=1e-5)


def test_kl_sums_match_a_direct_computation_and_the_loss_is_lm():
    rng = np.random.default_rng(2)
    logits = rng.normal(size=(2, 16, MODEL_VOCAB))
    exact, mask = exact_distributions(SPEC).rows(BATCH["inputs"], BATCH["segment_ids"])
    sums = kl_sums(jnp.asarray(logits, jnp.float32), jnp.asarray(exact), jnp.asarray(mask))
    log_q = logits - np.log(np.exp(logits).sum(axis=-1, keepdims=True))
    p = exact.astype(np.float64)
    per_position = np.sum(np.where(p > 0, p * (np.log(np.where(p > 0, p, 1.0)) - log_q[..., : p.shape[-1]]), 0.0), -1)
    np.testing.assert_allclose(float(sums["kl_sum"]), np.sum(per_position * mask), rtol=1e-5)
    assert OBJECTIVES.get("pcfg_lm").options_class is RandomGrammarSpec
    loss, metrics = make_pcfg_objective(SPEC)(LogitsModel(logits), MODEL_BATCH, jax.random.key(0))
    lm_loss, lm_metrics = lm_objective(LogitsModel(logits), MODEL_BATCH, jax.random.key(0))
    assert float(loss) == float(lm_loss) and float(metrics["loss_sum"]) == float(lm_metrics["loss_sum"])


def test_gradients_flow_under_jit_and_a_small_vocabulary_is_rejected():
    model = build_model(ModelConfig(vocab_size=MODEL_VOCAB, d_model=16, num_layers=1, num_heads=2, num_kv_heads=1,
                                    max_seq_len=16), rngs=nnx.Rngs(0))
    graphdef, params = nnx.split(model)
    objective = make_pcfg_objective(SPEC)

    @jax.jit
    def loss_and_grad(params, batch):
        return jax.value_and_grad(lambda p: objective(nnx.merge(graphdef, p), batch, jax.random.key(0))[0])(params)

    loss, grads = loss_and_grad(params, MODEL_BATCH)
    assert np.isfinite(float(loss)) and any(float(jnp.abs(g).sum()) > 0 for g in jax.tree.leaves(grads))
    with pytest.raises(ValueError, match="objective 'pcfg_lm' needs model.vocab_size >= 9"):
        objective(LogitsModel(np.zeros((2, 16, 8))), MODEL_BATCH, jax.random.key(0))


def test_the_grammar_is_the_objective_options_and_the_preset_matches_its_data():
    assert objective_options("pcfg_lm", (("num_nonterminals", 5), ("num_terminals", 6), ("binary_rules", 3),
                                         ("terminal_rules", 3))) == SPEC
    with pytest.raises(ValueError, match="objective_options: binary_probability = 0.6 gives an impossible grammar"):
        objective_options("pcfg_lm", (("binary_probability", 0.6),))
    config = load_preset("pcfg_tiny")
    dataset_grammar = PCFGDataset().options(config.data).grammar_spec()
    assert objective_options(config.objective, config.objective_options) == dataset_grammar
