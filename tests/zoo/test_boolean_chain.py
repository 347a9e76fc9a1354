"""Objective `boolean_chain` (RL vs SFT on sparse Boolean chains, arXiv 2511.17852): verifiers on hand-built
chains, teacher forcing against the
`lm` objective, free-running context against closed forms, the RL gradient against REINFORCE by hand, and
its mean against the exact policy gradient of a tabular policy; plus the `one_layer` model."""

from __future__ import annotations

import dataclasses

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from icml26zoo.losses.boolean_chain import BooleanChainOptions, boolean_chain_objective, rl_loss
from icml26zoo.losses.boolean_chain_verifier import consistency_rewards, outcome_rewards, process_rewards
from icml26zoo.losses.objectives import lm_objective
from icml26zoo.models import ModelConfig, build_model
from icml26zoo.train.data.sparse_boolean import SparseBoolean, SparseBooleanOptions, chain_parents, support

pytestmark = pytest.mark.usefixtures("fast_compile")

OPTIONS = SparseBooleanOptions(num_bits=6, sparsity=3, seed=1)
D, K = OPTIONS.num_bits, OPTIONS.sparsity
VOCAB = 3


def _batch(num_rows: int, seed: int = 0, options: SparseBooleanOptions = OPTIONS) -> dict[str, jax.Array]:
    """Trainer-style next-token rows, one example per row: inputs/targets [B, d + k - 2]."""
    tokens, _ = SparseBoolean.generate(options, num_rows, np.random.SeedSequence(seed))
    weights = np.broadcast_to(SparseBoolean.loss_weights(OPTIONS)[1:], (num_rows, tokens.shape[1] - 1))
    length = tokens.shape[1] - 1
    return {"inputs": jnp.asarray(tokens[:, :-1]), "targets": jnp.asarray(tokens[:, 1:]),
            "weights": jnp.asarray(weights, jnp.float32), "segment_ids": jnp.ones((num_rows, length), jnp.int32),
            "positions": jnp.broadcast_to(jnp.arange(length, dtype=jnp.int32), (num_rows, length))}


@nnx.jit(static_argnames="options")
def _objective(model, batch, key, options):
    return boolean_chain_objective(model, batch, key, options=options)


_rl_terms = nnx.jit(rl_loss, static_argnames="options")


def _bit_probs(table: jax.Array) -> np.ndarray:
    """The chain policy of a logit table [T, V]: softmax over the bit tokens 1, 2; padding (0) has probability 0."""
    return np.asarray(jax.nn.softmax(table.at[:, 0].set(-np.inf), axis=-1))


@nnx.jit(static_argnames="options")
def _objective_grad(model, batch, key, options):
    return nnx.grad(lambda m: boolean_chain_objective(m, batch, key, options=options)[0])(model)


class ChainOracle(nnx.Module):
    """Logits `scale` on g(context[a(j)], context[b(j)]) at each chain target, 0 elsewhere; `flip_first`
    makes the first chain step wrong. Reads its parents from the context it is given."""

    def __init__(self, scale: float, flip_first: bool = False) -> None:
        self.scale, self.flip_first = scale, flip_first
        self.parents = tuple(map(tuple, chain_parents(support(OPTIONS), D).tolist()))

    def __call__(self, inputs, *, segment_ids=None, positions=None):
        del segment_ids, positions
        logits = jnp.zeros((*inputs.shape, VOCAB))
        for j, (a, b) in enumerate(self.parents):
            bit = jnp.bitwise_xor(inputs[:, a] - 1, inputs[:, b] - 1)
            if j == 0 and self.flip_first:
                bit = 1 - bit
            logits = logits.at[:, D + j - 1].set(self.scale * jax.nn.one_hot(1 + bit, VOCAB))
        return logits


class BitsOnly(nnx.Module):
    """`model` with the padding token's logit at -1e9: a distribution over the two bit tokens."""

    def __init__(self, model: nnx.Module) -> None:
        self.model = model

    def __call__(self, inputs, *, segment_ids=None, positions=None):
        return self.model(inputs, segment_ids=segment_ids, positions=positions).at[..., 0].set(-1e9)


class TablePolicy(nnx.Module):
    """A tabular policy: logits θ [T, V] at every row, whatever the context."""

    def __init__(self, table: jax.Array) -> None:
        self.table = nnx.Param(table)

    def __call__(self, inputs, *, segment_ids=None, positions=None):
        return jnp.broadcast_to(self.table[...], (*inputs.shape, self.table.shape[-1]))


def test_process_and_outcome_rewards_on_a_hand_built_packed_row():
    # Two examples in one row: steps at t = 1, 2 (segment 1) and t = 4, 5 (segment 2).
    targets = jnp.array([[0, 2, 1, 0, 1, 2]])
    choices = jnp.array([[0, 2, 2, 0, 2, 2]])
    weights = jnp.array([[0, 1, 1, 0, 1, 1]], jnp.float32)
    segments = jnp.array([[1, 1, 1, 2, 2, 2]])
    chex.assert_trees_all_equal(process_rewards(choices, targets, weights), jnp.array([[0, 1, 0, 0, 0, 1.0]]))
    # Segment 1's answer (t = 2) is wrong, segment 2's (t = 5) right: credited to each example's steps.
    chex.assert_trees_all_equal(outcome_rewards(choices, targets, weights, segments),
                                jnp.array([[0, 0, 0, 0, 1, 1.0]]))


def test_consistency_rewards_check_each_step_against_its_own_parents():
    parents = np.array([[0, 1], [2, 3], [4, 5]])  # 4-parity: z4 = x0^x1, z5 = x2^x3, z6 = z4^z5
    # Bits 1,0,1,1 -> chain 1,0,1 (tokens = bits + 1); then z4 wrong but z6 consistent with the wrong z4.
    right = jnp.array([[2, 1, 2, 2, 2, 1, 2]])
    wrong_then_consistent = jnp.array([[2, 1, 2, 2, 1, 1, 1]])
    chex.assert_trees_all_equal(consistency_rewards(right, parents, "parity"), jnp.array([[1, 1, 1.0]]))
    chex.assert_trees_all_equal(consistency_rewards(wrong_then_consistent, parents, "parity"),
                                jnp.array([[0, 1, 1.0]]))
    # Under AND the parity chain is wrong at every step; the AND chain of the same bits is 0, 1, 0.
    chex.assert_trees_all_equal(consistency_rewards(right, parents, "and"), jnp.array([[0, 0, 0.0]]))
    chex.assert_trees_all_equal(consistency_rewards(jnp.array([[2, 1, 2, 2, 1, 2, 1]]), parents, "and"),
                                jnp.array([[1, 1, 1.0]]))
    with pytest.raises(ValueError, match="function must be one of"):
        consistency_rewards(right, parents, "xor")


def test_teacher_forcing_equals_lm_cross_entropy_on_the_chain_tokens():
    cfg = ModelConfig(name="one_layer", mixer="attention", mixer_options=(("position", "none"),), vocab_size=VOCAB,
                      d_model=16, num_layers=1, num_heads=1, num_kv_heads=1, mlp_dim=32, max_seq_len=D + K - 2,
                      model_options=(("max_positions", D + K - 2),))
    model, batch = build_model(cfg, rngs=nnx.Rngs(0)), _batch(8)
    options = BooleanChainOptions(mode="teacher_forcing")
    # Losses only: the free-running metrics are not compiled. `lm` of a model whose padding logit is -inf
    # is the cross-entropy over the two bits, the chain policy's.
    loss, expected = nnx.jit(lambda m, b: (boolean_chain_objective(m, b, jax.random.key(0), options=options)[0],
                                           lm_objective(BitsOnly(m), b, jax.random.key(0))[0]))(model, batch)
    np.testing.assert_allclose(loss, expected, rtol=1e-6)


def test_free_running_context_is_the_models_own_chain():
    batch, scale = _batch(16), 4.0
    # Over the two bits: logits (scale, 0) on (right, wrong); the padding logit 0 does not count.
    right, wrong = -scale + np.log(np.exp(scale) + 1), np.log(np.exp(scale) + 1)
    free, teacher = BooleanChainOptions(mode="free_running"), BooleanChainOptions(mode="teacher_forcing")
    # A perfect model: both contexts hold the true chain, so the losses coincide (spec test 2).
    for options in (free, teacher):
        loss, metrics = _objective(ChainOracle(scale), batch, jax.random.key(0), options)
        np.testing.assert_allclose(loss, right, rtol=1e-5)
        assert float(metrics["correct"]) == float(metrics["weight"]) == 16 * (K - 1)
        assert float(metrics["answer_accuracy_sum"]) == float(metrics["answer_accuracy_weight"]) == 16
    # Step 1 wrong: teacher forcing still sees the true z1 at step 2, free running its own wrong z1.
    tf_loss, _ = _objective(ChainOracle(scale, True), batch, jax.random.key(0), teacher)
    fr_loss, metrics = _objective(ChainOracle(scale, True), batch, jax.random.key(0), free)
    np.testing.assert_allclose(tf_loss, (wrong + right) / 2, rtol=1e-5)
    np.testing.assert_allclose(fr_loss, wrong, rtol=1e-5)
    assert float(metrics["correct"]) == float(metrics["answer_accuracy_sum"]) == 0.0


def test_rl_gradient_is_the_reinforce_estimator_computed_by_hand():
    batch = _batch(6)
    # The model all but insists on padding (token 0): the chain policy is over the two bits all the same (the
    # spec's two-token readout), so the rollout writes bits and padding's logit gets no gradient.
    table = jax.random.normal(jax.random.key(3), (D + K - 2, VOCAB)).at[:, 0].set(20.0)
    policy, key = TablePolicy(table), jax.random.key(7)
    options = BooleanChainOptions(mode="rl")
    grads = _objective_grad(policy, batch, key, options)
    _, terms = _rl_terms(policy, batch, key, options=options)
    choices, weights = np.asarray(terms["choices"]), np.asarray(batch["weights"])
    rewards = (choices == np.asarray(batch["targets"])) * weights
    assert set(choices[weights > 0].tolist()) <= {1, 2}
    baseline = (rewards * weights).sum(0) / np.maximum(weights.sum(0), 1)
    probs = _bit_probs(table)
    score = np.eye(VOCAB)[choices] - probs[None]  # ∇_θ log π(ẑ_t) for a softmax table, [B, T, V]
    expected = -np.einsum("bt,btv->tv", weights * (rewards - baseline), score) / weights.sum()
    np.testing.assert_allclose(grads.table[...], expected, rtol=1e-5, atol=1e-6)


def test_rl_gradient_is_unbiased_for_a_tabular_policy():
    rows, steps = 4096, K - 1
    # Skewed bits (ρ = 0.1): the chain bits are unbalanced, so the exact gradient over the two bits is not ~0.
    batch = _batch(rows, seed=1, options=dataclasses.replace(OPTIONS, bit_probability=0.1))
    table = jax.random.normal(jax.random.key(4), (D + K - 2, VOCAB))
    options = BooleanChainOptions(mode="rl", baseline="none")
    grads = _objective_grad(TablePolicy(table), batch, jax.random.key(9), options)
    # Exact, given these x: J = Σ_j mean_x π_j(z_j(x)); the loss averages over steps: mean gradient -∇J / steps.
    probs = _bit_probs(table)
    targets, weights = np.asarray(batch["targets"]), np.asarray(batch["weights"])
    target_share = np.einsum("bt,btv->tv", weights, np.eye(VOCAB)[targets]) / rows
    # ∇_θt Σ_v share_tv π_t(v) = share_t ⊙ π_t - (share_t · π_t) π_t
    exact = -(target_share * probs - probs * (target_share * probs).sum(-1, keepdims=True)) / steps
    # The estimator's standard deviation per entry is about 0.5 / sqrt(rows) / steps ≈ 0.004.
    np.testing.assert_allclose(grads.table[...], exact, atol=0.012)
    assert np.abs(exact).max() > 0.03


def test_one_layer_model_decodes_like_its_forward_and_uses_absolute_positions():
    cfg = ModelConfig(name="one_layer", vocab_size=8, d_model=16, num_layers=1, num_heads=1, num_kv_heads=1,
                      mlp_dim=32, max_seq_len=6, mixer_options=(("position", "none"),),
                      model_options=(("max_positions", 6),))
    model = build_model(cfg, rngs=nnx.Rngs(0))
    tokens = jax.random.randint(jax.random.key(0), (2, 6), 0, 8)
    forward = nnx.jit(lambda m, t: m(t))
    decode = nnx.jit(lambda m, t, c: m.decode(t, c))
    cache, steps = model.init_cache(2), []
    for t in range(6):
        logits, cache = decode(model, tokens[:, t:t + 1], cache)
        steps.append(logits)
    # Token by token through the cache, each at its own position, equals the forward.
    np.testing.assert_allclose(jnp.concatenate(steps, axis=1), forward(model, tokens), rtol=1e-5, atol=1e-5)
    # Without RoPE only the position table tells equal tokens at different positions apart.
    same = forward(model, jnp.full((1, 6), 3))
    assert not np.allclose(same[0, 0], same[0, 5])
    with pytest.raises(ValueError, match="max_positions = 6"):
        model(jnp.zeros((1, 7), jnp.int32))
    with pytest.raises(ValueError, match="one_layer option 'max_positions' must be an integer >= 1"):
        build_model(dataclasses.replace(cfg, model_options=(("max_positions", 0),)), rngs=nnx.Rngs(0))
