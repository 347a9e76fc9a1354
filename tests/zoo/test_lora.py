"""LoRA adapters (as used by "Can Muon Fine-tune Adam-Pretrained Models?", arXiv 2605.10468): exact identity
at init, scanned and unrolled layers, merge, bad input, and the LoRA + Muon fine-tune of an AdamW-pretrained
zoo LM on a shifted task."""

import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from icml26zoo import lora
from icml26zoo.models import ModelConfig, build_model, count_params
from icml26zoo.optim.muon import muon_dimension_numbers, muon_finetune, muon_param_labels

VOCAB, SEQ, BATCH = 32, 24, 16
LR_MUON = 0.02

# XLA's cheap pipeline: compile time dominates these tiny models. The bit-exact checks below hold under
# it (x W + 0 is x W; frozen arrays are never recomputed).
pytestmark = pytest.mark.usefixtures("fast_compile")


@nnx.jit
def _forward(model, tokens):
    """One compiled program per model graph (eager calls would dispatch and compile op by op)."""
    return model(tokens)


def _config(scan_layers=True, compute_dtype="float32"):
    return ModelConfig(vocab_size=VOCAB, d_model=32, num_layers=2, num_heads=4, num_kv_heads=2, mlp_dim=64,
                       scan_layers=scan_layers, compute_dtype=compute_dtype, max_seq_len=64)


def _tokens(seed, shape=(2, 16)):
    return jnp.asarray(np.random.default_rng(seed).integers(0, VOCAB, shape), jnp.int32)


def _perturb_lora(model, seed=3, size=0.1):
    """Gives B (and A) non-zero values, as training would, so the LoRA branch contributes."""
    state = nnx.state(model, lora.lora_filter)
    keys = iter(jax.random.split(jax.random.PRNGKey(seed), len(jax.tree.leaves(state))))
    nnx.update(model, jax.tree.map(lambda a: a + size * jax.random.normal(next(keys), a.shape), state))


@pytest.mark.parametrize("scan_layers", [True, False])
def test_init_reproduces_base_exactly_and_merge_matches(scan_layers):
    base = build_model(_config(scan_layers), rngs=nnx.Rngs(0))
    adapted = lora.add_lora(base, rank=4, alpha=8.0, rngs=nnx.Rngs(1))
    tokens = _tokens(0)
    # B = 0: the LoRA branch adds exact zeros.
    np.testing.assert_array_equal(_forward(adapted, tokens), _forward(base, tokens))

    # Seven linear layers per block, r·(in + out) each: q, o 32→32; k, v 32→16; gate, up 32→64; down 64→32.
    per_layer = 4 * (64 + 48 + 48 + 64 + 96 + 96 + 96)
    assert lora.count_lora_params(adapted) == 2 * per_layer
    assert count_params(adapted) == count_params(base) + 2 * per_layer  # the base params are all still there

    _perturb_lora(adapted)
    out = _forward(adapted, tokens)
    assert float(jnp.max(jnp.abs(out - _forward(base, tokens)))) > 1e-2  # the branch now matters
    merged = lora.merge_lora(adapted)
    assert lora.count_lora_params(merged) == 0 and count_params(merged) == count_params(base)
    assert jax.tree.structure(nnx.state(merged)) == jax.tree.structure(nnx.state(base))
    np.testing.assert_allclose(_forward(merged, tokens), out, rtol=1e-5, atol=1e-5)


def test_adapter_forward_is_base_plus_alpha_over_rank_branch_and_stacks_per_layer():
    base = build_model(_config(scan_layers=False), rngs=nnx.Rngs(0))
    adapter = lora.add_lora(base, rank=2, alpha=6.0, targets=("q_proj",), rngs=nnx.Rngs(1)).layers[1].mixer.q_proj
    assert adapter.scale == 3.0 and not np.any(adapter.lora.lora_b[...])
    b = jax.random.normal(jax.random.PRNGKey(1), (2, 32))
    adapter.lora.lora_b[...] = b
    x = jax.random.normal(jax.random.PRNGKey(0), (3, 5, 32))
    kernel, a = adapter.base.kernel[...], adapter.lora.lora_a[...]
    hi = jax.lax.Precision.HIGHEST
    expected = jnp.matmul(x, kernel, precision=hi) + 3.0 * jnp.matmul(jnp.matmul(x, a, precision=hi), b, precision=hi)
    np.testing.assert_allclose(adapter(x), expected, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(adapter.merged_kernel(), kernel + 3.0 * jnp.matmul(a, b, precision=hi), rtol=1e-6)

    # Scanned: A [L, in, r] and B [L, r, out], a different A per layer, merged layer by layer.
    stacked = lora.add_lora(build_model(_config(), rngs=nnx.Rngs(0)), rank=2, alpha=6.0, targets=("q_proj",),
                            rngs=nnx.Rngs(1)).layers.mixer.q_proj
    a, b = stacked.lora.lora_a[...], stacked.lora.lora_b[...]
    assert a.shape == (2, 32, 2) and b.shape == (2, 2, 32) and not np.array_equal(a[0], a[1])
    stacked.lora.lora_b[...] = jax.random.normal(jax.random.PRNGKey(1), b.shape)
    merged = stacked.merged_kernel()
    for i in range(2):
        delta = jnp.matmul(a[i], stacked.lora.lora_b[...][i], precision=hi)
        np.testing.assert_allclose(merged[i], stacked.base.kernel[...][i] + 3.0 * delta, rtol=1e-6)


def test_targets_select_by_name_and_path_and_copy_leaves_input_untouched():
    base = build_model(_config(scan_layers=False), rngs=nnx.Rngs(0))
    before = jax.tree.map(np.asarray, nnx.state(base))
    adapted = lora.add_lora(base, rank=2, alpha=2.0, targets=("*_proj", "layers.1.mlp.down"), rngs=nnx.Rngs(1))
    adapters = sorted(lora.linear_layers(base))  # the input keeps all 14 plain linears
    assert len(adapters) == 14
    remaining = sorted(lora.linear_layers(adapted))  # gate/up everywhere and layer 0's down stay plain
    assert remaining == ["layers.0.mlp.down", "layers.0.mlp.gate", "layers.0.mlp.up",
                         "layers.1.mlp.gate", "layers.1.mlp.up"]
    assert isinstance(adapted.layers[1].mlp.down, lora.LoRAAdapter)
    jax.tree.map(np.testing.assert_array_equal, nnx.state(base), before)
    # bfloat16 compute under strict promotion: the branch runs in the base layer's dtype.
    bf16 = build_model(_config(compute_dtype="bfloat16"), rngs=nnx.Rngs(0))
    bf16_adapted = lora.add_lora(bf16, rank=2, alpha=1.0, rngs=nnx.Rngs(1))
    np.testing.assert_array_equal(_forward(bf16_adapted, _tokens(1)), _forward(bf16, _tokens(1)))


@pytest.mark.parametrize("bad", [{"rank": 0}, {"rank": -2}, {"rank": 2.0}, {"alpha": 0.0}, {"alpha": -1.0}])
def test_non_positive_rank_or_alpha_raises_naming_it(bad):
    model = build_model(_config(), rngs=nnx.Rngs(0))
    kwargs = {"rank": 4, "alpha": 8.0, **bad}
    with pytest.raises(ValueError, match=next(iter(bad))):
        lora.add_lora(model, rngs=nnx.Rngs(1), **kwargs)


def test_target_matching_nothing_lists_the_linear_layers():
    model = build_model(_config(), rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match=r"'attn_qkv'.*layers\.mixer\.q_proj.*layers\.mlp\.up"):
        lora.add_lora(model, rank=4, alpha=8.0, targets=("q_proj", "attn_qkv"), rngs=nnx.Rngs(1))


def _bigram_batches(seed, steps, successor):
    """[steps, BATCH, SEQ + 1] int32 sequences of a deterministic bigram task: x_{t+1} = successor[x_t]."""
    rng = np.random.default_rng(seed)
    seqs = np.empty((steps, BATCH, SEQ + 1), np.int32)
    seqs[..., 0] = rng.integers(0, VOCAB, (steps, BATCH))
    for t in range(SEQ):
        seqs[..., t + 1] = successor[seqs[..., t]]
    return jnp.asarray(seqs)


def _next_token_loss(model, seqs):
    """Mean next-token cross-entropy (nats) of model on seqs [B, SEQ + 1]."""
    logits = model(seqs[:, :-1])
    log_probs = jax.nn.log_softmax(logits, axis=-1)
    return -jnp.mean(jnp.take_along_axis(log_probs, seqs[:, 1:, None], axis=-1))


_eval_loss = nnx.jit(_next_token_loss)


def _train(split_model, optimizer, batches):
    """Trains the first state of `split_model = (graphdef, trainable, *frozen)` on batches; the losses."""
    graphdef, trainable, *frozen = split_model

    @jax.jit
    def step(trainable, opt_state, seqs):
        loss, grads = jax.value_and_grad(lambda p: _next_token_loss(nnx.merge(graphdef, p, *frozen), seqs))(
            trainable)
        with jax.numpy_dtype_promotion("standard"):  # optax's Adam bias correction mixes int32 and floats
            updates, opt_state = optimizer.update(grads, opt_state, trainable)
        return optax.apply_updates(trainable, updates), opt_state, loss

    opt_state, losses = optimizer.init(trainable), []
    for seqs in batches:
        trainable, opt_state, loss = step(trainable, opt_state, seqs)
        losses.append(float(loss))
    return trainable, losses


def test_lora_muon_finetune_of_an_adamw_pretrained_lm_trains_only_the_adapters():
    start = time.perf_counter()
    rng = np.random.default_rng(0)
    task_a, task_b = rng.permutation(VOCAB), rng.permutation(VOCAB)
    eval_a, eval_b = _bigram_batches(100, 1, task_a)[0], _bigram_batches(101, 1, task_b)[0]

    # 1. Pretrain the whole (scanned) LM with AdamW on task A.
    model = build_model(_config(), rngs=nnx.Rngs(0))
    graphdef, params = nnx.split(model, nnx.Param)
    params, _ = _train((graphdef, params), optax.adamw(1e-2, weight_decay=0.0), _bigram_batches(1, 60, task_a))
    pretrained = nnx.merge(graphdef, params)
    loss_a = float(_eval_loss(pretrained, eval_a))
    assert loss_a < 0.5, loss_a  # from log 32 ≈ 3.47: the bigram map is learned

    # 2. LoRA on every linear layer; train only the LoRAParams with the Muon recipe on task B.
    adapted = lora.add_lora(pretrained, rank=8, alpha=16.0, rngs=nnx.Rngs(1))
    graphdef, lora_params, base_params = lora.split_lora(adapted)
    num_trainable = sum(p.size for p in jax.tree.leaves(lora_params))
    assert lora.count_lora_params(adapted) == num_trainable == 8 * 512 * 2  # r · Σ(in + out) · L
    assert set(jax.tree.leaves(muon_param_labels(lora_params))) == {"muon"}  # A and B are matrices: Muon
    dims = muon_dimension_numbers(lora_params)["layers"]["mixer"]["q_proj"]["lora"]["lora_a"]
    assert dims == optax.contrib.MuonDimensionNumbers(1, 2)  # stacked [L, in, r]: orthogonalized per layer
    frozen_before = jax.tree.map(np.asarray, base_params)
    loss_b_before = float(_eval_loss(adapted, eval_b))
    lora_params, losses = _train((graphdef, lora_params, base_params), muon_finetune(LR_MUON),
                                 _bigram_batches(2, 60, task_b))
    tuned = nnx.merge(graphdef, lora_params, base_params)
    loss_b_after = float(_eval_loss(tuned, eval_b))
    print(f"task A {loss_a:.3f}; task B {loss_b_before:.3f} -> {loss_b_after:.3f} "
          f"(train {losses[0]:.3f} -> {losses[-1]:.3f}); {time.perf_counter() - start:.1f}s")

    # The frozen weights are bit-identical to the pretrained ones; task B is learned.
    jax.tree.map(np.testing.assert_array_equal, nnx.state(tuned, lora.base_filter), frozen_before)
    frozen_flat = dict(nnx.to_flat_state(frozen_before))  # ... and to the pretrained model's, path by path
    pretrained_flat = nnx.to_flat_state(nnx.state(pretrained, nnx.Param))
    assert len(frozen_flat) == len(pretrained_flat)
    for path, value in pretrained_flat:
        adapted_path = path[:-1] + ("base", path[-1]) if path[-1] == "kernel" else path  # adapters wrap kernels
        np.testing.assert_array_equal(frozen_flat[adapted_path][...], value[...])
    assert loss_b_after < 0.1 * loss_b_before, (loss_b_before, loss_b_after)

    # Folding (α/r) A B into the kernels gives the fine-tuned model back as a plain LM.
    merged = lora.merge_lora(tuned)
    tokens = eval_b[:, :-1]
    np.testing.assert_allclose(_forward(merged, tokens), _forward(tuned, tokens), rtol=1e-4, atol=1e-4)
