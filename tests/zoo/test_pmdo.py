"""PMDO (zoo/optim/pmdo*.py, an experimental reconstruction): the invariants of the reconstruction.

- mask maths: standardise (a constant tensor maps to 0), r̃ = clip(tanh(z), 0, 1), top-ρ support of exactly
  round(ρ·n) entries with index tie-breaks, SPG importance in [0, 1] and max-accumulated (non-decreasing);
- all parts off (M = 1, no projection, α = 1) is bitwise the base optimiser's step, under jit;
- a hard mask leaves M = 0 entries bitwise unchanged under AdamW with weight decay, even with Adam moments carried
  over from unmasked steps;
- GPM: projected gradients are orthogonal to the basis, a bias-free layer's outputs on old inputs do not move under
  projected SGD, the basis update is orthonormal, within `in` columns and captures ≥ ε of the energy;
- slow weights follow θ_s + α M ⊙ (θ_f − θ_s); masked SAM perturbs only masked coordinates;
- the expanding head's inactive classes never win and their gradients are finite;
- the CD-CIL benchmark's tasks and the metrics Ā, A_T, F, BWT on a hand-made accuracy matrix;
- bad input is a ValueError naming the argument.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from icml26zoo.optim import pmdo as pm
from icml26zoo.optim import pmdo_cdcil as cd
from icml26zoo.optim import pmdo_gpm as gpm
from icml26zoo.optim.hparams import with_standard_promotion

pytestmark = pytest.mark.usefixtures("fast_compile")

RNG = np.random.default_rng(0)
PARAMS = {"dense": {"kernel": jnp.asarray(RNG.normal(size=(6, 5)), jnp.float32),
                    "bias": jnp.asarray(RNG.normal(size=(5,)), jnp.float32)}}
GRADS = [jax.tree.map(lambda p: jnp.asarray(RNG.normal(size=p.shape), jnp.float32), PARAMS) for _ in range(4)]
# The zoo's tests run under strict dtype promotion; optax's Adam bias correction needs standard promotion.
ADAMW = with_standard_promotion(optax.adamw(1e-2, weight_decay=0.1))


def _run(opt, grads, *, state=None, params=PARAMS, **extra):
    """Applies `opt` to each gradient in turn under one jit; returns (params, state)."""
    @jax.jit
    def step(p, s, g, extra):
        u, s = opt.update(g, s, p, **extra)
        return optax.apply_updates(p, u), s

    state = opt.init(params) if state is None else state
    for g in grads:
        params, state = step(params, state, g, extra)
    return params, state


def test_standardise_relevance_and_importance_maths():
    r = jnp.asarray([0.0, 1.0, 2.0, 3.0, 10.0])
    z = (np.asarray(r) - np.mean(r)) / np.std(r)
    np.testing.assert_allclose(pm.standardise(r), z, rtol=1e-6)
    np.testing.assert_allclose(pm.relevance_scores({"w": r})["w"], np.clip(np.tanh(z), 0, 1), rtol=1e-6)
    assert np.all(np.asarray(pm.relevance_scores({"w": r})["w"])[z <= 0] == 0)  # below mean -> 0, not |tanh|
    np.testing.assert_allclose(pm.spg_importance({"w": -r})["w"], np.abs(np.tanh(-z)), rtol=1e-6)
    for constant in (jnp.zeros(4), jnp.full((2, 2), 3.0)):  # std 0: zeros, no NaN
        assert np.all(np.asarray(pm.standardise(constant)) == 0)
        assert np.all(np.asarray(pm.spg_importance({"w": constant})["w"]) == 0)
    # Max-accumulation over several tasks: non-decreasing, in [0, 1].
    acc = {"w": jnp.zeros(30)}
    for seed in range(4):
        new = pm.accumulate_importance(acc, pm.spg_importance({"w": jnp.asarray(RNG.normal(size=30) * 10 ** seed)}))
        assert np.all(np.asarray(new["w"]) >= np.asarray(acc["w"])) and 0 <= new["w"].min() <= new["w"].max() <= 1
        acc = new


@pytest.mark.parametrize("rho", [0.2, 0.5, 0.13, 1.0])
def test_top_fraction_opens_exactly_round_rho_n_entries(rho):
    scores = jnp.asarray(RNG.normal(size=(7, 11)), jnp.float32)
    chosen = np.asarray(pm.top_fraction(scores, rho))
    count = int(rho * 77 + 0.5)
    assert chosen.sum() == count and set(np.unique(chosen)) <= {0.0, 1.0}
    if count < 77:
        assert np.asarray(scores)[chosen == 1].min() >= np.asarray(scores)[chosen == 0].max()


def test_top_fraction_breaks_ties_by_index():
    ties = jnp.asarray([0.0, -0.0, 1.0, 1.0, 0.0, 1.0])
    np.testing.assert_array_equal(pm.top_fraction(ties, 0.5), [0, 0, 1, 1, 0, 1])
    np.testing.assert_array_equal(pm.top_fraction(ties, 4 / 6), [1, 0, 1, 1, 0, 1])


def test_build_mask_hard_soft_first_task_and_bias_protection():
    relevance = jax.tree.map(jnp.abs, GRADS[0])
    importance = {"dense": {"kernel": jnp.full((6, 5), 0.25), "bias": jnp.zeros(5)}}
    ones = pm.build_mask(relevance, importance, pm.PMDOConfig(), first_task=True)
    assert all(np.all(np.asarray(leaf) == 1) for leaf in jax.tree.leaves(ones))
    hard = pm.build_mask(relevance, importance, pm.PMDOConfig(rho_mask=0.2))
    assert np.count_nonzero(hard["dense"]["kernel"]) == 6 and set(np.unique(hard["dense"]["kernel"])) == {0, 0.75}
    assert np.all(np.asarray(hard["dense"]["bias"]) == 0)  # protect_bias_norm: frozen after task 1
    soft = pm.build_mask(relevance, importance, pm.PMDOConfig(mask_kind="soft", protect_bias_norm=False))
    expected = jax.tree.map(lambda s, a: s * (1 - a), pm.relevance_scores(relevance), importance)
    for got, want in zip(jax.tree.leaves(soft), jax.tree.leaves(expected), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-6)


def test_all_parts_off_is_bitwise_the_base_optimiser():
    cfg = pm.PMDOConfig(rho_mask=1.0, project=False, ema_alpha=1.0)
    mask = pm.build_mask(GRADS[0], jax.tree.map(jnp.zeros_like, PARAMS), cfg)  # ρ = 1, A = 0 -> M = 1 (bias: 0)
    mask = jax.tree.map(jnp.ones_like, mask)
    base, _ = _run(ADAMW, GRADS)
    ours, _ = _run(pm.pmdo(ADAMW, cfg), GRADS, mask=mask, bases=None)
    for got, want in zip(jax.tree.leaves(ours), jax.tree.leaves(base), strict=True):
        np.testing.assert_array_equal(got, want)


def test_hard_mask_freezes_protected_entries_bitwise_under_adamw_with_decay():
    opt = pm.pmdo(ADAMW, pm.PMDOConfig(project=False))
    ones = jax.tree.map(jnp.ones_like, PARAMS)
    # Unmasked steps first, so Adam's moments are non-zero on every coordinate (the pitfall), then a hard mask.
    params, state = _run(opt, GRADS[:2], mask=ones)
    mask = {"dense": {"kernel": pm.top_fraction(jnp.abs(GRADS[0]["dense"]["kernel"]), 0.3), "bias": jnp.zeros(5)}}
    after, _ = _run(opt, GRADS[2:] * 3, state=state, params=params, mask=mask)
    for m, before, now in zip(jax.tree.leaves(mask), jax.tree.leaves(params), jax.tree.leaves(after), strict=True):
        frozen = np.asarray(m) == 0
        np.testing.assert_array_equal(np.asarray(now)[frozen], np.asarray(before)[frozen])
        assert np.all(np.asarray(now)[~frozen] != np.asarray(before)[~frozen])


def test_projection_keeps_a_bias_free_layer_on_old_inputs():
    old = jnp.asarray(RNG.normal(size=(40, 2)) @ RNG.normal(size=(2, 6)), jnp.float32)  # old inputs span 2 dims
    basis = gpm.update_basis(gpm.empty_basis(6), old, 0.999)
    assert gpm.basis_size(basis) == 2
    g = GRADS[1]["dense"]["kernel"]
    projected = gpm.project(g, basis)
    assert jnp.linalg.norm(basis.T @ projected) <= 1e-6 * jnp.linalg.norm(g)
    np.testing.assert_allclose(gpm.project(g, gpm.truncate_basis(basis, 4)), projected, atol=1e-6)
    cfg = pm.PMDOConfig(project=True, ema_alpha=1.0)
    kernel = {"kernel": PARAMS["dense"]["kernel"]}
    new_inputs = jnp.asarray(RNG.normal(size=(9, 6)), jnp.float32)
    grads = [{"kernel": new_inputs.T @ jnp.asarray(RNG.normal(size=(9, 5)), jnp.float32)} for _ in range(5)]
    trained, _ = _run(pm.pmdo(optax.sgd(0.1, momentum=0.9), cfg), grads, params=kernel, bases={"kernel": basis})
    np.testing.assert_allclose(old @ trained["kernel"], old @ kernel["kernel"], atol=1e-5)
    assert not np.allclose(trained["kernel"], kernel["kernel"])


def test_basis_update_is_orthonormal_capped_and_captures_the_threshold():
    basis = gpm.empty_basis(8)
    for task in range(4):
        acts = RNG.normal(size=(30, 8)) * np.linspace(3, 0.1, 8) + task
        basis = gpm.update_basis(basis, acts, 0.9)
        k = gpm.basis_size(basis)
        held = np.asarray(basis)[:, :k]
        np.testing.assert_allclose(held.T @ held, np.eye(k), atol=1e-5)
        assert k <= 8 and np.all(np.asarray(basis)[:, k:] == 0)
        assert gpm.captured_energy(basis, acts) >= 0.9 - 1e-6
    assert gpm.basis_size(gpm.update_basis(basis, RNG.normal(size=(50, 8)), 1.0)) == 8  # capped at in


def test_consolidation_follows_the_slow_weight_rule():
    mask = jax.tree.map(lambda p: jnp.asarray(RNG.uniform(size=p.shape), jnp.float32), PARAMS)
    opt = pm.pmdo(optax.sgd(0.1), pm.PMDOConfig(project=False, ema_alpha=0.3))
    params, state = _run(opt, GRADS[:1], mask=mask)
    slow = pm.slow_params(state)
    for p0, p1, m, s in zip(*(jax.tree.leaves(t) for t in (PARAMS, params, mask, slow)), strict=True):
        np.testing.assert_allclose(s, p0 + 0.3 * m * (p1 - p0), rtol=1e-6, atol=1e-7)
    with pytest.raises(ValueError, match="opt_state must be the state of a pmdo"):
        pm.slow_params(optax.sgd(0.1).init(PARAMS))


def test_masked_sam_perturbs_only_masked_coordinates():
    target = jax.tree.map(lambda p: p + 1.0, PARAMS)

    def loss_fn(p, batch):
        return sum(jnp.sum(batch * (a - b) ** 4) for a, b in zip(jax.tree.leaves(p), jax.tree.leaves(target),
                                                                  strict=True))

    mask = {"dense": {"kernel": jnp.zeros((6, 5)).at[0].set(1.0), "bias": jnp.zeros(5)}}
    loss, plain = pm.masked_sam_gradient(loss_fn, PARAMS, 1.0, rho=0.0, mask=mask)
    np.testing.assert_allclose(loss, loss_fn(PARAMS, 1.0))
    _, sam = pm.masked_sam_gradient(loss_fn, PARAMS, 1.0, rho=0.5, mask=mask)
    moved = np.asarray(sam["dense"]["kernel"]) != np.asarray(plain["dense"]["kernel"])
    assert moved[0].all() and not moved[1:].any() and np.array_equal(sam["dense"]["bias"], plain["dense"]["bias"])
    direction = np.asarray(plain["dense"]["kernel"])[0]
    shifted = np.asarray(PARAMS["dense"]["kernel"])[0] + 0.5 * direction / np.linalg.norm(direction)
    np.testing.assert_allclose(sam["dense"]["kernel"][0], 4 * (shifted - np.asarray(target["dense"]["kernel"])[0])
                               ** 3, rtol=1e-5)


def test_inactive_head_classes_never_win_and_gradients_stay_finite():
    logits = jnp.asarray(RNG.normal(size=(8, 6)) * 5, jnp.float32).at[:, 5].set(100.0)
    active = jnp.asarray([True, True, False, True, False, False])
    assert set(np.asarray(jnp.argmax(pm.masked_logits(logits, active), -1))) <= {0, 1, 3}
    labels = jnp.asarray([0, 1, 3, 0, 1, 3, 0, 1])
    grad = jax.grad(lambda z: optax.softmax_cross_entropy_with_integer_labels(pm.masked_logits(z, active),
                                                                              labels).mean())(logits)
    assert np.all(np.isfinite(grad)) and np.all(np.asarray(grad)[:, ~np.asarray(active)] == 0)


def test_cdcil_tasks_bring_disjoint_classes_in_their_domains():
    images, labels = cd.synthetic_images(10, 6, seed=3)
    tasks = cd.make_tasks(images, labels, classes_per_task=2, domains=("identity", "invert", "rot90"), seed=1)
    assert [t.classes for t in tasks] == [(0, 1), (2, 3), (4, 5)]
    for task in tasks:
        assert task.train_x.shape == (14, 64) and task.test_x.shape == (6, 64)
        assert set(task.train_y) == set(task.test_y) == set(task.classes)
    again = cd.make_tasks(images, labels, classes_per_task=2, domains=("identity", "invert", "rot90"), seed=1)
    np.testing.assert_array_equal(again[1].train_x, tasks[1].train_x)
    np.testing.assert_array_equal(cd.apply_domain(images[:2], "invert"), 16 - images[:2])
    np.testing.assert_array_equal(cd.apply_domain(images[:2], "rot90"), np.rot90(images[:2], axes=(1, 2)))
    np.testing.assert_array_equal(cd.apply_domain(images[:2], "flip_contrast"), images[:2, :, ::-1] * 0.5)


def test_metrics_on_a_hand_made_accuracy_matrix():
    acc = np.array([[0.9, 0.0, 0.0], [0.6, 0.8, 0.0], [0.7, 0.5, 1.0]])
    m = cd.cil_metrics(acc)
    np.testing.assert_allclose(m["A_t"], [0.9, 0.7, 2.2 / 3])
    assert m["A_bar"] == pytest.approx((0.9 + 0.7 + 2.2 / 3) / 3) and m["A_T"] == pytest.approx(2.2 / 3)
    assert m["F"] == pytest.approx(((0.9 - 0.7) + (0.8 - 0.5)) / 2)  # best before T, not the diagonal
    assert m["BWT"] == pytest.approx(((0.7 - 0.9) + (0.5 - 0.8)) / 2)
    weighted = cd.cil_metrics(acc, counts=[1, 3, 1])
    np.testing.assert_allclose(weighted["A_t"][1], (0.6 + 3 * 0.8) / 4)


@pytest.mark.parametrize(("call", "message"), [
    (lambda: pm.PMDOConfig(rho_mask=0.0), r"rho_mask must be a number in \(0, 1\], got 0.0"),
    (lambda: pm.PMDOConfig(mask_kind="hrad"), r"mask_kind must be one of \['hard', 'soft'\].*did you mean"),
    (lambda: pm.PMDOConfig(ema_alpha=1.5), r"ema_alpha must be a number in \(0, 1\], got 1.5"),
    (lambda: pm.top_fraction(jnp.ones(4), 1.2), r"rho must be a number in \(0, 1\], got 1.2"),
    (lambda: pm.mask_updates().update(PARAMS, optax.EmptyState(), mask={"dense": {"kernel": jnp.ones((5, 6)),
                                                                                 "bias": jnp.ones(5)}}),
     r"mask\['dense'\]\['kernel'\] must have shape \(6, 5\) like its parameter, got \(5, 6\)"),
    (lambda: pm.mask_updates().update(PARAMS, optax.EmptyState(), mask={"dense": jnp.ones(5)}),
     r"mask must be a tree like the parameters"),
    (lambda: gpm.project(jnp.ones((6, 5)), jnp.ones((5, 5))), r"basis \[in, k\] with k <= in; got gradient \(6, 5\)"),
    (lambda: gpm.update_basis(gpm.empty_basis(4), np.ones((3, 5)), 0.9), r"acts must be \[n, 4\]"),
    (lambda: gpm.update_basis(gpm.empty_basis(4), np.ones((3, 4)), 0.0), r"threshold must be a number in \(0, 1\]"),
    (lambda: pm.pmdo(ADAMW, {"rho_mask": 0.2}), r"cfg must be a PMDOConfig, got dict"),
    (lambda: cd.cil_metrics(np.ones((2, 3))), r"acc must be a square accuracy matrix \[T, T\] with T >= 2"),
    (lambda: cd.cil_metrics(np.full((2, 2), 1.5)), r"acc must hold accuracies in \[0, 1\]"),
    (lambda: cd.apply_domain(np.ones((2, 8, 8)), "blur_nosie"), r"domain must be one of .*did you mean 'blur_noise'"),
    (lambda: cd.apply_domain(np.ones((2, 8, 8)), "blur_noise"), r"rng must be a numpy Generator"),
    (lambda: cd.make_tasks(np.ones((4, 8, 8)), np.arange(4)), r"5 domains x 2 classes need >= 10 classes"),
    (lambda: pm.masked_logits(jnp.ones((2, 3)), jnp.ones(4, bool)), r"logits \[B, C\] and active \[C\]"),
])
def test_bad_input_is_a_value_error_naming_the_argument(call, message):
    with pytest.raises(ValueError, match=message):
        call()
