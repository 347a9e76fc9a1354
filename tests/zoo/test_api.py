"""API (adaptive prototype imputation): the spec's invariants 1-6 and NumPy transcriptions of the official code.

The transcriptions follow the operation order of github KX-yolo/API, `trains/singleTask/model/april.py` at commit
ef641b3ceaaa3f9430a74bfc6e62f7e072f2939a: `_filter_boundary_samples_with_temporal` + `update_prototypes_epoch_end`
(trimmed class mean), `_infonce_loss_for_modality` + the modality weighting in `forward` (prototype contrastive
loss), `_compute_similarity` (test-time class estimate) and the FiLM branch of
`_personalize_and_fill_missing_modality` (DIAM), each on fixed weights.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from icml26zoo.losses.api_objective import random_availability
from icml26zoo.models import ModelConfig, build_model
from icml26zoo.multimodal import api, api_data, api_scope
from icml26zoo.multimodal.api_diam import DIRECTIONS
from icml26zoo.train.data.msa_data import MSAOptions, msa_examples

pytestmark = pytest.mark.usefixtures("fast_compile")  # tolerance and same-program comparisons only

CFG = api.APIConfig(input_dims=(5, 3, 4), seq_len=6, dim=4, num_heads=1, kernel_size=3, cross_layers=1,
                    memory_layers=1)
B, T, C = 6, CFG.projected_length, api_scope.NUM_CLASSES


@pytest.fixture(scope="module")
def setup():
    """A model with random, all-ready prototypes, a batch, and a mask in which every sample misses something."""
    model = api.APIModel(CFG, rngs=nnx.Rngs(0))
    rng = np.random.default_rng(0)
    protos = tuple(jnp.asarray(rng.normal(size=(C, T, CFG.dim)), jnp.float32) for _ in range(3))
    api.set_prototypes(model, protos, tuple(jnp.ones(C, bool) for _ in range(3)))
    data = {k: jnp.asarray(v) for k, v in api_data.synthetic_msa(B, 0, api_data.MSAConfig(
        dims=CFG.input_dims, seq_len=CFG.seq_len)).items()}
    available = jnp.asarray([[True, False, True], [False, True, True], [True, True, False], [True, False, False],
                             [False, True, False], [False, False, True]])
    return model, protos, data, available


def _zeroed(model, data, available):
    projected = model.project(data["text"], data["audio"], data["vision"])
    return projected, tuple(jnp.where(available[:, m, None, None], x, 0.0) for m, x in enumerate(projected))


def test_label_binning_at_the_boundaries():
    labels = jnp.asarray([-3.0, 3.0, -0.5, 0.5, -2.5, -3.7, 3.2, 0.49])
    assert api_scope.label_to_class(labels).tolist() == [0, 6, 2, 4, 0, 0, 6, 3]


def _numpy_update(features, classes, previous, ready, discard_rate=0.05):
    """`update_prototypes_epoch_end` with `_filter_boundary_samples_with_temporal`, in float64."""
    protos, flags = previous.astype(np.float64).copy(), ready.copy()
    for c in range(previous.shape[0]):
        members = features[classes == c].astype(np.float64)
        if len(members) == 0:
            continue
        if len(members) > 1:
            avg = members.mean(axis=1)
            dists = np.linalg.norm(avg - avg.mean(axis=0), axis=1)
            members = members[np.argsort(dists)[:max(1, int((1 - discard_rate) * len(members)))]]
        protos[c], flags[c] = members.mean(axis=0), True
    return protos, flags


def test_prototype_is_the_trimmed_class_mean():
    rng = np.random.default_rng(1)
    # 41 -> 38 kept, 20 -> 19, 5 -> 4, 3 -> 2, 1 -> 1 (not 2 samples: both are equally far from their centre)
    classes = np.repeat(np.arange(C), [1, 5, 20, 41, 0, 3, 0])
    features = rng.normal(size=(len(classes), T, 3)).astype(np.float32)
    features[classes == 3] += 3.0 * rng.normal(size=(1, 1, 3))  # a class away from the origin
    previous = rng.normal(size=(C, T, 3)).astype(np.float32)
    ready = np.array([False, False, False, False, True, False, False])
    perm = rng.permutation(len(classes))
    got, flags = api_scope.update_prototypes(jnp.asarray(previous), jnp.asarray(ready), jnp.asarray(features[perm]),
                                             jnp.asarray(classes[perm]))
    want, want_flags = _numpy_update(features, classes, previous, ready)
    np.testing.assert_allclose(np.asarray(got), want, atol=1e-6, rtol=0)
    assert np.asarray(flags).tolist() == want_flags.tolist() == [True] * 6 + [False]


def _numpy_contrastive(projected, classes, protos, ready, tau, weights):
    """`_infonce_loss_for_modality` per modality, then the weighted mean over contributing modalities."""
    def cos(a, b):
        return float(a @ b / max(np.linalg.norm(a) * np.linalg.norm(b), 1e-8))

    num = den = 0.0
    for x, p, flags, w in zip(projected, protos, ready, weights, strict=True):
        ready_idx = [c for c in range(C) if flags[c]]
        total, count = 0.0, 0
        if len(ready_idx) > 1:
            for i in range(len(x)):
                if not flags[classes[i]]:
                    continue
                sims = np.array([cos(x[i].mean(0), p[c].mean(0)) for c in ready_idx]) / tau
                log_probs = sims - sims.max() - np.log(np.sum(np.exp(sims - sims.max())))
                total -= log_probs[ready_idx.index(classes[i])]
                count += 1
        indicator = 1.0 if count > 0 else 0.0
        num += w * (total / max(count, 1)) * indicator
        den += w * indicator
    return num / den if den > 0 else 0.0


def test_contrastive_loss_and_class_estimate_match_numpy_transcriptions():
    rng = np.random.default_rng(2)
    projected = [rng.normal(size=(B, T, 4)).astype(np.float32) for _ in range(3)]
    protos = [rng.normal(size=(C, T, 4)).astype(np.float32) for _ in range(3)]
    ready = [np.array([1, 1, 0, 1, 1, 1, 1], bool), np.array([0, 0, 1, 0, 0, 0, 0], bool),  # audio: one class
             np.array([1, 0, 1, 0, 1, 0, 1], bool)]
    classes = np.array([0, 2, 3, 4, 6, 1])
    loss = api_scope.prototype_contrastive_loss(tuple(map(jnp.asarray, projected)), jnp.asarray(classes),
                                                tuple(map(jnp.asarray, protos)), tuple(map(jnp.asarray, ready)),
                                                temperature=0.07, weights=(1.0, 2.0, 0.5))
    np.testing.assert_allclose(float(loss), _numpy_contrastive(projected, classes, protos, ready, 0.07,
                                                               (1.0, 2.0, 0.5)), rtol=1e-5)

    # `_compute_similarity` over each sample's available modalities; no ready prototype among them: -1.
    ready[1] = np.zeros(C, bool)
    available = np.array([[1, 1, 1], [0, 1, 0], [0, 1, 1], [1, 0, 0], [1, 1, 0], [0, 0, 1]], bool)
    want = []
    for i in range(B):
        best, best_sim, best_entropy = -1, -np.inf, np.inf
        for m in np.flatnonzero(available[i]):
            if not ready[m].any():
                continue
            mean = projected[m][i].mean(0)
            sims = np.full(C, -1e9)
            for c in np.flatnonzero(ready[m]):
                p = protos[m][c].mean(0)
                sims[c] = mean @ p / max(np.linalg.norm(mean) * np.linalg.norm(p), 1e-8)
            probs = np.exp(sims - sims.max()) / np.exp(sims - sims.max()).sum()
            entropy = -np.sum(probs * np.log(probs + 1e-10))
            if sims.max() > best_sim or (sims.max() == best_sim and entropy < best_entropy):
                best, best_sim, best_entropy = int(sims.argmax()), sims.max(), entropy
        want.append(best)
    zeroed = tuple(jnp.where(jnp.asarray(available[:, m, None, None]), jnp.asarray(x), 0.0)
                   for m, x in enumerate(projected))
    got = api_scope.estimate_class(zeroed, jnp.asarray(available), tuple(map(jnp.asarray, protos)),
                                   tuple(map(jnp.asarray, ready)))
    assert got.tolist() == want and want[1] == -1


def _numpy_film(diam, i, source_mean, proto):
    """The FiLM branch of `_personalize_and_fill_missing_modality` for direction i (eval: dropout off)."""
    w = {k: np.asarray(v[...], np.float64)[i] for k, v in vars(diam).items() if hasattr(v, "get_value")}
    gelu = np.vectorize(lambda v: 0.5 * v * (1.0 + math.erf(v / math.sqrt(2.0))))
    h = source_mean @ w["src_w1"] + w["src_b1"]
    h = (h - h.mean(-1, keepdims=True)) / np.sqrt(h.var(-1, keepdims=True) + 1e-5) * w["src_ln_scale"] + w[
        "src_ln_bias"]
    c_hat = gelu(h) @ w["src_w2"] + w["src_b2"]
    gamma = gelu(c_hat @ w["gamma_w1"] + w["gamma_b1"]) @ w["gamma_w2"] + w["gamma_b2"]
    beta = gelu(c_hat @ w["beta_w1"] + w["beta_b1"]) @ w["beta_w2"] + w["beta_b2"]
    return gamma[:, None, :] * proto + beta[:, None, :]


def test_imputation_diam_transcription_identity_film_and_available_modalities(setup):
    model, protos, data, available = setup
    projected, zeroed = _zeroed(model, data, available)
    classes = jnp.asarray([0, 3, 6, 2, 5, 1])
    source = api_scope.select_source(zeroed, available, protos, tuple(jnp.ones((3, C), bool)), classes)
    filled = model.impute(zeroed, available, classes)
    for m in range(3):
        keep = np.asarray(available[:, m])
        # Invariant 4: the available modalities are bit-identical.
        np.testing.assert_array_equal(np.asarray(filled[m])[keep], np.asarray(projected[m])[keep])
        for i, (_, s, t) in enumerate(DIRECTIONS):  # the DIAM fill against the NumPy transcription
            rows = ~keep & (np.asarray(source) == s) if t == m else np.zeros(B, bool)
            if rows.any():
                want = _numpy_film(model.diam, i, np.asarray(zeroed[s]).mean(1)[rows],
                                   np.asarray(protos[t])[np.asarray(classes)[rows]])
                np.testing.assert_allclose(np.asarray(filled[m])[rows], want, rtol=1e-5, atol=1e-5)
    # Invariant 2: with γ ≡ 1, β ≡ 0 the DIAM fill is the SCOPE prototype.
    identity = nnx.clone(model)
    for name, value in (("gamma", 1.0), ("beta", 0.0)):
        getattr(identity.diam, f"{name}_w2").set_value(jnp.zeros_like(getattr(identity.diam, f"{name}_w2")[...]))
        getattr(identity.diam, f"{name}_b2").set_value(jnp.full_like(getattr(identity.diam, f"{name}_b2")[...],
                                                                     value))
    filled = identity.impute(zeroed, available, classes)
    for m in range(3):
        missing = ~np.asarray(available[:, m])
        np.testing.assert_array_equal(np.asarray(filled[m])[missing], np.asarray(protos[m])[classes][missing])


def test_gradient_reaches_film_but_not_prototypes(setup):
    model, _, data, available = setup
    _, zeroed = _zeroed(model, data, available)
    graphdef, params, bank, flags = nnx.split(model, nnx.Param, nnx.PathContains("prototypes"), ...)
    weights = [jnp.asarray(np.random.default_rng(3).normal(size=x.shape), jnp.float32) for x in zeroed]

    def objective(params, bank):
        filled = nnx.merge(graphdef, params, bank, flags).impute(zeroed, available, jnp.asarray([0, 3, 6, 2, 5, 1]))
        return sum(jnp.sum(w * f) for w, f in zip(weights, filled, strict=True))

    grad_params, grad_bank = jax.grad(objective, argnums=(0, 1))(params, bank)
    assert len(jax.tree.leaves(grad_bank)) == 1  # the prototypes [3, C, T', d]
    assert all(not np.any(np.asarray(g)) for g in jax.tree.leaves(grad_bank))  # invariant 3: buffers
    diam = grad_params["diam"]
    for name in ("gamma_w1", "gamma_w2", "beta_w1", "beta_w2", "src_w1"):
        assert np.any(np.asarray(diam[name][...])), name


def test_forward_ignores_labels_at_test_and_checks_the_mask(setup):
    model, protos, data, available = setup
    inputs = (data["text"], data["audio"], data["vision"], available)
    first = model(*inputs, data["labels"])
    second = model(*inputs, -data["labels"])
    np.testing.assert_array_equal(np.asarray(first.prediction), np.asarray(second.prediction))  # invariant 5
    _, zeroed = _zeroed(model, data, available)
    estimate = api_scope.estimate_class(zeroed, available, protos, tuple(jnp.ones((3, C), bool)))
    assert first.classes.tolist() == estimate.tolist() and np.isfinite(np.asarray(first.prediction)).all()
    assert first.proto_loss == 0 and first.recon_loss == 0
    train = model(*inputs, data["labels"], train=True, rngs=nnx.Rngs(dropout=1))
    assert train.classes.tolist() == api_scope.label_to_class(data["labels"]).tolist()
    assert float(train.proto_loss) > 0 and float(train.recon_loss) > 0
    with pytest.raises(ValueError, match=r"available must have shape \[B, 3\]"):
        model(*inputs[:3], available[:, :2])
    with pytest.raises(ValueError, match="available must be a bool array"):
        model(*inputs[:3], available.astype(jnp.int32))
    with pytest.raises(ValueError, match="labels must be given in training"):
        model(*inputs, train=True)


def test_synthetic_data_and_missing_masks():
    data = api_data.synthetic_msa(50, 3)
    assert [data[k].shape for k in ("text", "audio", "vision")] == [(50, 20, 32), (50, 20, 8), (50, 20, 12)]
    assert np.all(np.abs(data["labels"]) <= 3)
    mask = api_data.missing_mask(400, 0.7, 0)
    assert mask.any(axis=1).all() and 0.2 < mask.mean() < 0.45
    assert api_data.missing_mask(10, 0.0, 0).all()
    full = jnp.ones((300, 3), bool)
    counts = np.asarray(random_availability(jax.random.key(0), full)).sum(axis=1)
    assert set(counts.tolist()) == {1, 2, 3}
    present = jnp.asarray(api_data.missing_mask(300, 0.5, 1))
    drawn = np.asarray(random_availability(jax.random.key(1), present))
    assert not (drawn & ~np.asarray(present)).any() and drawn.any(axis=1).all()  # only present ones, never none
    with pytest.raises(ValueError, match="missing_rate"):
        api_data.missing_mask(10, 1.0, 0)


def _batch_features(model: api.APIModel, rows: np.ndarray, seed: int) -> tuple[tuple[jax.Array, ...], jax.Array]:
    """Projected sequences and classes of `rows` synthetic samples (what the objective hands to `remember`)."""
    data = api_data.synthetic_msa(rows, seed, api_data.MSAConfig(dims=CFG.input_dims, seq_len=CFG.seq_len))
    projected = model.project(*(jnp.asarray(data[k]) for k in ("text", "audio", "vision")))
    return projected, api_scope.label_to_class(jnp.asarray(data["labels"]))


def _expected_bank(features: list[tuple[jax.Array, ...]], classes: list[jax.Array]) -> np.ndarray:
    """SCOPE's update from empty prototypes of the samples in `features` / `classes` (one epoch)."""
    epoch = jnp.concatenate(classes)
    return np.stack([np.asarray(api_scope.update_prototypes(
        jnp.zeros((C, T, CFG.dim)), jnp.zeros(C, bool), jnp.concatenate([f[m] for f in features]), epoch)[0])
        for m in range(3)])


def test_epoch_cache_rebuilds_the_prototypes_when_an_epoch_completes():
    model = api.APIModel(dataclasses.replace(CFG, cache_size=8), rngs=nnx.Rngs(0))
    batches = [_batch_features(model, 4, seed) for seed in range(3)]
    model.remember(*batches[0])
    assert not np.asarray(model.ready[...]).any() and int(model.cache_count[...]) == 4
    model.remember(*batches[1])  # the 8th sample: SCOPE's update of exactly these 8
    bank = np.asarray(model.prototypes[...])
    np.testing.assert_allclose(bank, _expected_bank(*zip(*batches[:2], strict=True)), rtol=1e-6, atol=1e-6)
    assert int(model.cache_count[...]) == 0
    model.remember(*batches[2])  # half an epoch: the bank waits
    np.testing.assert_array_equal(np.asarray(model.prototypes[...]), bank)
    # A batch size that does not divide the cache: the update sees the last cache_size samples (a sliding window).
    window = api.APIModel(dataclasses.replace(CFG, cache_size=6), rngs=nnx.Rngs(0))
    for features, classes in batches[:2]:
        window.remember(features, classes)
    # Slots 0-5 hold samples 7, 8, 3, 4, 5, 6 (1-based): the buffer's order breaks a tie of equal distances.
    (first, first_classes), (second, second_classes) = batches[:2]
    last = ([tuple(x[2:] for x in second), tuple(x[2:] for x in first), tuple(x[:2] for x in second)],
            [second_classes[2:], first_classes[2:], second_classes[:2]])
    np.testing.assert_allclose(np.asarray(window.prototypes[...]), _expected_bank(*last), rtol=1e-6, atol=1e-6)
    with pytest.raises(ValueError, match="must not exceed cache_size=6"):
        window.remember(*_batch_features(window, 7, 5))
    with pytest.raises(ValueError, match="cache_size > 0"):
        api.APIModel(CFG, rngs=nnx.Rngs(0)).remember(*batches[0])
    with pytest.raises(ValueError, match="cache_size"):
        dataclasses.replace(CFG, cache_size=-1)


def test_registered_model_reads_the_stacked_feature_layout():
    options = (("input_dims", CFG.input_dims), ("seq_len", CFG.seq_len), ("kernel_size", 3), ("cross_layers", 1),
               ("memory_layers", 1), ("fill", "zero"))
    cfg = ModelConfig(name="api", d_model=CFG.dim, num_layers=1, num_heads=1, num_kv_heads=1, model_options=options)
    model = build_model(cfg, rngs=nnx.Rngs(0))
    assert model.config == dataclasses.replace(CFG, fill="zero")
    points, weights, _ = msa_examples(MSAOptions(sequence_length=CFG.seq_len), 5, 0, 0.5)
    sequences, available = model.unpack(jnp.asarray(points), jnp.asarray(weights))
    mask = api_data.missing_mask(5, 0.5, 1)
    data = api_data.synthetic_msa(5, 0, api_data.MSAConfig(seq_len=CFG.seq_len))
    np.testing.assert_array_equal(np.asarray(available), mask)
    for m, name in enumerate(("text", "audio", "vision")):
        width = CFG.input_dims[m]
        np.testing.assert_array_equal(np.asarray(sequences[m]), data[name][:, :, :width])
    with pytest.raises(ValueError, match=r"model.model_options: unknown api model option 'dim'"):
        build_model(dataclasses.replace(cfg, model_options=(("dim", 8),)), rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match=r"points must be \[B, N >= 18"):
        model.unpack(jnp.zeros((2, 10, 32)), jnp.ones((2, 10)))
