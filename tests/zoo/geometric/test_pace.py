"""PACE attention (reconstruction): the spec's testable invariants 1, 2, 3, 4 and 6, the model's
permutation symmetry (and its failing out-of-group check), padding, determinism and bad input. Invariant 5
(runtime linear in N) is a benchmark: scripts/bench_pace.py."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from icml26zoo.geometric import pace, pace_ops
from icml26zoo.geometric.pace_layers import TSSA, PACEAttention, PaceLayerConfig, _inverse_softplus
from icml26zoo.models import ModelConfig, build_model, is_language_model

pytestmark = pytest.mark.usefixtures("fast_compile")

EPS_SQ = 0.5
# Invariant 1's bounds on max|operator − jax.grad| / max|jax.grad| (the spec's figures).
GRAD_TOL = {jnp.float64: 1e-6, jnp.float32: 1e-4}
# float32 bound on outputs of O(1) under a token permutation (measured ~5e-7: summation order only).
PERMUTATION_TOL = 1e-5
# An output change this large cannot be round-off: the symmetry is broken.
BROKEN = 1e-2
# Inputs of the model tests: B = 2 examples of N = 16 tokens (the digit patches' shape), the second padded.
BATCH, TOKENS, FEATURES = 2, 16, 4


def max_normalized(got, want) -> float:
    return float(jnp.max(jnp.abs(got - want)) / jnp.max(jnp.abs(want)))


def operator_inputs(dtype, seed=0, batch=2, tokens=12, dim=8, heads=2):
    """(x [B, N, d], weights [B, N] with the last 3 tokens of example 1 padding, memberships [B, K, N], bases
    [d, K, d/K]), drawn with numpy so that no eager JAX op is compiled."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((batch, tokens, dim))
    weights = np.ones((batch, tokens))
    weights[1, tokens - 3:] = 0.0
    logits = rng.standard_normal((batch, heads, tokens))
    memberships = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    bases = rng.standard_normal((dim, heads, dim // heads)) / np.sqrt(dim)
    return tuple(jnp.asarray(array, dtype) for array in (x, weights, memberships, bases))


def operators(x, weights, memberships, bases):
    """{name: operator output [B, N, d]}: Expand (S = None and S = I_N), Compress (π fixed), subspace Expand."""
    identity_sketch = jnp.eye(x.shape[1], dtype=x.dtype)
    return {
        "expand": pace_ops.expand(x, weights, EPS_SQ),
        "expand S=I": pace_ops.expand(x, weights, EPS_SQ, identity_sketch),
        "compress": pace_ops.compress(x, weights, memberships, bases, EPS_SQ),
        "subspace": pace_ops.subspace_expand(x, weights, bases, EPS_SQ),
    }


@jax.jit
def float64_checks(x, weights, memberships, bases):
    """({name: operator}, {name: jax.grad of the operator's rate}) in one compiled program."""
    total = lambda rate: jax.grad(lambda z: jnp.sum(rate(z)))(x)
    want_expand = total(lambda z: pace_ops.coding_rate(z, weights, EPS_SQ))
    gradients = {
        "expand": want_expand,
        "expand S=I": want_expand,
        "compress": total(lambda z: pace_ops.compressed_rate(z, weights, memberships, bases, EPS_SQ)),
        "subspace": total(lambda z: pace_ops.subspace_coding_rate(z, weights, bases, EPS_SQ)),
    }
    return operators(x, weights, memberships, bases), gradients


@jax.jit
def float32_checks(inputs, order, sketch):
    """(operators of the float32 inputs, permutation_pairs) in one compiled program."""
    return operators(*inputs), permutation_pairs(*inputs, order, sketch)


def test_operators_are_rate_gradients_and_permutation_equivariant():
    """Invariant 1: Expand (S = None and S = I_N) = ∇R, Compress (π fixed) = ∇R_c in the head subspaces, the
    subspace expansion = ∇ Σ_k R(V_kᵀ X), all zero on padding tokens: in float64 against jax.grad (<= 1e-6),
    in float32 against the same float64 gradients (<= 1e-4). Invariant 4 (float32): Compress, exact Expand and
    Expand with the sketch's rows permuted alongside the tokens are permutation equivariant; an unpermuted
    sketch is not."""
    with jax.enable_x64(True):
        got, gradients = float64_checks(*operator_inputs(jnp.float64))
        for name, value in got.items():
            assert value.dtype == jnp.float64, name
            assert max_normalized(value, gradients[name]) <= GRAD_TOL[jnp.float64], name
        gradients = {name: np.asarray(value) for name, value in gradients.items()}
    inputs = operator_inputs(jnp.float32)
    order = jnp.asarray(np.random.default_rng(5).permutation(inputs[0].shape[1]))
    sketch = jnp.asarray(np.random.default_rng(6).standard_normal((inputs[0].shape[1], 8)) / np.sqrt(8), jnp.float32)
    got, pairs = float32_checks(inputs, order, sketch)
    for name, value in got.items():
        assert value.dtype == jnp.float32, name
        assert max_normalized(value, gradients[name]) <= GRAD_TOL[jnp.float32], name
        assert float(jnp.max(jnp.abs(value[1, -3:]))) == 0.0, name
    unpermuted = pairs.pop("unpermuted sketch")
    for name, (permuted, want) in pairs.items():
        assert max_normalized(permuted, want) <= PERMUTATION_TOL, name
    assert max_normalized(unpermuted, pairs["sketch"][1]) > BROKEN


def union_of_subspaces(seed, num_subspaces=4, subspace_dim=4, dim=16, per_subspace=50, noise=0.05):
    """Tokens [1, K·n, dim] near K random subspaces of dim subspace_dim, and their one-hot memberships [1, K, K·n]
    (numpy float64)."""
    rng = np.random.default_rng(seed)
    bases = np.linalg.qr(rng.standard_normal((num_subspaces, dim, subspace_dim)))[0]
    coefficients = rng.standard_normal((num_subspaces, per_subspace, subspace_dim))
    tokens = np.einsum("kdp,knp->knd", bases, coefficients).reshape(1, -1, dim)
    tokens = tokens + noise * rng.standard_normal(tokens.shape)
    labels = np.repeat(np.arange(num_subspaces), per_subspace)
    return tokens, (labels[None, :] == np.arange(num_subspaces)[:, None]).astype(np.float64)[None]


def test_small_step_increases_rate_reduction():
    """Invariant 2 (float64: ΔR changes by ~η|g|², below float32's resolution of R): Z + η(∇R − ∇R_c) with
    the true memberships and full-space R_c (K copies of U_k = I_d) increases ΔR by η|g|² to first order."""
    with jax.enable_x64(True):
        x, memberships = (jnp.asarray(array) for array in union_of_subspaces(1))
        weights = jnp.ones(x.shape[:2], jnp.float64)
        dim = x.shape[-1]
        full_space = jnp.asarray(np.broadcast_to(np.eye(dim)[:, None, :], (dim, 4, dim)))

        def rate_reduction(z):
            return (pace_ops.coding_rate(z, weights, EPS_SQ)
                    - pace_ops.compressed_rate(z, weights, memberships, full_space, EPS_SQ))[0]

        @jax.jit
        def gains_and_first_order(x):
            direction = pace_ops.expand(x, weights, EPS_SQ) - pace_ops.compress(x, weights, memberships,
                                                                                full_space, EPS_SQ)
            gains = jnp.stack([rate_reduction(x + step * direction) for step in (1e-3, 2e-3)]) - rate_reduction(x)
            return gains, 1e-3 * jnp.sum(direction**2)

        gains, first_order = gains_and_first_order(x)
        gains, first_order = gains.tolist(), float(first_order)
        assert 0 < gains[0] < gains[1]
        assert 0.95 <= gains[0] / first_order <= 1.05


def test_sketch_is_unbiased():
    """Invariant 3: the Monte-Carlo mean of Ĉ over M sketches is within 4σ of C = XᵀWX in relative Frobenius
    norm, σ² = (|C|_F² + tr(C)²) / (r M |C|_F²) (Ĉ ~ Wishart(C/r, r)); a 10% biased sketch fails the bound."""
    x, weights, _, _ = operator_inputs(jnp.float32, seed=2, tokens=24, dim=4)
    x, weights = x[:1], weights[:1]
    rank, draws = 32, 8000
    exact = pace_ops.weighted_covariance(x, weights)[0]
    estimate = jax.jit(jax.vmap(lambda key: pace_ops.sketched_covariance(
        x, weights, pace_ops.gaussian_sketch(key, x.shape[1], rank))[0]))
    mean = jnp.mean(estimate(jax.random.split(jax.random.key(3), draws)), axis=0)
    frobenius = jnp.linalg.norm(exact)
    sigma = float(jnp.sqrt((frobenius**2 + jnp.trace(exact) ** 2) / (rank * draws)) / frobenius)
    tolerance = 4 * sigma
    assert tolerance <= 0.02
    assert float(jnp.linalg.norm(mean - exact) / frobenius) <= tolerance
    assert float(jnp.linalg.norm(1.1 * mean - exact) / frobenius) > tolerance


def permutation_pairs(x, weights, memberships, bases, order, sketch):
    """{name: (operator of the permuted tokens, permuted operator output)}, and the unpermuted-sketch output."""
    px, pw, pm = x[:, order], weights[:, order], memberships[:, :, order]
    return {
        "compress": (pace_ops.compress(px, pw, pm, bases, EPS_SQ),
                     pace_ops.compress(x, weights, memberships, bases, EPS_SQ)[:, order]),
        "expand": (pace_ops.expand(px, pw, EPS_SQ), pace_ops.expand(x, weights, EPS_SQ)[:, order]),
        "sketch": (pace_ops.expand(px, pw, EPS_SQ, sketch[order]),
                   pace_ops.expand(x, weights, EPS_SQ, sketch)[:, order]),
        "unpermuted sketch": pace_ops.expand(px, pw, EPS_SQ, sketch),
    }


def tssa_reference(y: np.ndarray, temperature: np.ndarray) -> np.ndarray:
    """ToST's TSSA written out token by token (spec formula), y [K, N, p] -> [K, N, p]; no padding."""
    heads, tokens, _ = y.shape
    energy = np.zeros((heads, tokens))
    for k in range(heads):
        column_norms = np.sqrt((y[k] ** 2).sum(axis=0))
        energy[k] = temperature[k] * ((y[k] / column_norms) ** 2).sum(axis=1)
    memberships = np.exp(energy) / np.exp(energy).sum(axis=0, keepdims=True)
    out = np.zeros_like(y)
    for k in range(heads):
        share = memberships[k] / memberships[k].sum()
        second_moment = (share[:, None] * y[k] ** 2).sum(axis=0)
        for i in range(tokens):
            out[k, i] = -memberships[k, i] * y[k, i] / (1.0 + second_moment)
    return out


def mssa_reference(y: np.ndarray) -> np.ndarray:
    """CRATE's SSA per head with q = k = v = y [K, N, p] -> [K, N, p]."""
    scores = np.einsum("kip,kjp->kij", y, y) / np.sqrt(y.shape[-1])
    attention = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return np.einsum("kij,kjp->kip", attention / attention.sum(axis=-1, keepdims=True), y)


def test_tssa_and_mssa_follow_their_formulas():
    """Invariant 6: PACE with λ_E = 0, λ_C = 1 and Compress = TSSA is the TSSA layer, which is ToST's formula
    (softmax over heads); MSSA is CRATE's SSA with one shared projection."""
    cfg = PaceLayerConfig(dim=8, num_heads=2, compress="tssa")
    pace_layer, tssa_layer = PACEAttention(cfg, rngs=nnx.Rngs(0)), TSSA(cfg, rngs=nnx.Rngs(0))
    pace_layer.expand_weight[...] = jnp.asarray(-1e4, jnp.float32)
    pace_layer.compress_weight[...] = jnp.asarray(_inverse_softplus(1.0), jnp.float32)
    temperature = jnp.asarray([0.7, 1.9], jnp.float32)
    pace_layer.temperature[...] = temperature
    tssa_layer.temperature[...] = temperature
    x = jnp.asarray(np.random.default_rng(7).standard_normal((1, 10, 8)), jnp.float32)
    weights = jnp.ones((1, 10), jnp.float32)

    @nnx.jit
    def layer_outputs(pace_layer, tssa_layer, x):
        y = pace_layer.project(x)
        return y, pace_layer(x, weights), tssa_layer(x, weights), pace_ops.mssa_heads(y, weights)

    y, pace_out, tssa_out, mssa_out = layer_outputs(pace_layer, tssa_layer, x)
    y = np.asarray(y[0], np.float64)
    reference = jnp.asarray(tssa_reference(y, np.asarray(temperature)), jnp.float32)[None]
    kernel = pace_layer.out.kernel[...]
    want_tssa = jnp.transpose(reference, (0, 2, 1, 3)).reshape(1, 10, 8) @ kernel
    assert max_normalized(pace_out, want_tssa) <= 1e-5
    assert max_normalized(tssa_out, want_tssa) <= 1e-5
    assert max_normalized(mssa_out[0], mssa_reference(y)) <= 1e-5


def make_model(num_layers=1, **options):
    options = {"num_features": FEATURES, "num_outputs": 3, **options}
    cfg = ModelConfig(name="pacenet", d_model=16, num_layers=num_layers, num_heads=2, num_kv_heads=2, mlp_dim=32,
                      model_options=tuple(options.items()))
    return build_model(cfg, rngs=nnx.Rngs(0))


def jitted(model):
    graphdef, state = nnx.split(model)
    forward = jax.jit(lambda state, p, f, w, key: nnx.merge(graphdef, state)(p, f, w, key=key))
    return lambda p, f, w, key=None: forward(state, p, f, w, key)


@pytest.fixture(scope="module")
def inputs():
    rng = np.random.default_rng(8)
    weights = np.ones((BATCH, TOKENS))
    weights[1, 12:] = 0.0
    arrays = (rng.uniform(size=(BATCH, TOKENS, 2)), rng.standard_normal((BATCH, TOKENS, FEATURES)), weights)
    return tuple(jnp.asarray(array, jnp.float32) for array in arrays)


@pytest.fixture(scope="module")
def eager_model():
    """A model called eagerly (not under jit), where the value checks run."""
    return make_model()


@pytest.mark.parametrize(("attention", "readout"), [("pace", "point"), ("mssa", "pool"), ("tssa", "pool")])
def test_model_is_permutation_symmetric_and_ignores_padding(attention, readout, inputs):
    """In-group (token permutations: pooled outputs invariant, per-token outputs permuted alongside) error <=
    PERMUTATION_TOL, out-of-group (orthogonal token mixing) > BROKEN; padding values never reach the real
    outputs; a row of padding only stays finite under jit. One block: the attention is where tokens meet."""
    model = jitted(make_model(attention=attention, readout=readout, expand="exact"))
    errors = pace.equivariance_errors(model, *inputs, jax.random.key(9))
    assert errors["in_group"] <= PERMUTATION_TOL
    assert errors["out_of_group"] > BROKEN
    points, features, weights = inputs
    garbage = jnp.where(weights == 0, 100.0, 0.0)[..., None]
    real = (weights > 0)[..., None] if readout == "point" else True
    changed = jnp.abs(model(points + garbage, features - garbage, weights) - model(points, features, weights))
    assert float(jnp.max(jnp.where(real, changed, 0.0))) == 0.0
    assert bool(jnp.all(jnp.isfinite(model(points, features, weights.at[1].set(0.0)))))


def test_sketch_keys(inputs):
    """key=None is deterministic (seeded sketch when N > sketch_rank, the same as passing key(eval_seed)); another
    key draws another sketch; the model is registered outside the LM harnesses."""
    assert not is_language_model("pacenet")
    # compress="tssa": the sketch lives in the expansion only, and TSSA's compression compiles no solve.
    forward = jitted(make_model(sketch_rank=4, compress="tssa"))
    seeded = forward(*inputs)
    assert bool(jnp.all(seeded == forward(*inputs)))
    assert bool(jnp.all(seeded == forward(*inputs, jax.random.key(0))))
    assert float(jnp.max(jnp.abs(forward(*inputs, jax.random.key(1)) - seeded))) > 1e-4
    # N <= sketch_rank: the exact covariance whatever the key (a sketch would save nothing).
    exact = make_model(sketch_rank=16, compress="tssa")
    assert exact.layer_keys(16, jax.random.key(1)) == [None] * len(exact.blocks)


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"points": lambda p: p.at[0, 3, 1].set(jnp.nan)}, "points must be finite"),
        ({"weights": lambda w: w.at[0].set(0.0)}, "weights must mark at least one real point"),
        ({"points": lambda p: p[..., :1]}, r"points must have shape \[B, N, 2\]"),
        ({"features": lambda f: f[..., :3]}, "features must have F = num_features = 4"),
        ({"weights": lambda w: w[:, None]},
         r"weights must be a float array of shape \[B, N\] = \(\*, \*\), got float32 \(\d+, 1, \d+\)"),
    ],
)
def test_bad_inputs_name_the_argument(change, match, inputs, eager_model):
    model = eager_model
    arguments = dict(zip(("points", "features", "weights"), inputs, strict=True))
    for name, edit in change.items():
        arguments[name] = edit(arguments[name])
    with pytest.raises(ValueError, match=match):
        model(**arguments)


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"attention": "softmax"}, r"model.model_options: pacenet option 'attention' must be one of"),
        ({"expand": "random"}, "pacenet option 'expand' must be one of"),
        ({"sketch_rank": 0}, "pacenet option 'sketch_rank' must be an integer >= 1"),
        ({"eps_sq": -1.0}, "pacenet option 'eps_sq' must be a positive number, got -1.0"),
    ],
)
def test_bad_options_name_model_options(options, match):
    with pytest.raises(ValueError, match=match):
        make_model(**options)
