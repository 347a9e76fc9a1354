"""`camp`: CAMP, Coherent Alignment of Multimodal Prototypes (ICML 2026), an explainable prototype classifier of
M modalities' frozen embeddings. RECONSTRUCTION: no code or paper text of CAMP was available; the zoo's design is
ProtoPNet-style prototypes per class and modality, fused
class evidence, OT alignment and geometric regularisers, built from the abstract. Each piece is a small
function here or in `camp_align` / `camp_regularisers`, so a better-informed piece can replace it.

Per modality m (embedding e_m ∈ R^{d_m} from a frozen encoder; the data gives e_m):
    z_m      = φ_m(e_m) = normalize(W_m e_m + b_m) ∈ S^{D−1}                       projector, D = d_model
    p_{m,c,j} ∈ S^{D−1}, J per class c                                             prototypes
    s_{m,c,j} = ⟨z_m, p_{m,c,j}⟩ / τ                                               similarity
    E_m(c)   = logsumexp_j s_{m,c,j} − log J                                       smooth-max class evidence
Fusion over the present modalities (present [B, M] ∈ {0, 1}; a missing modality contributes nothing):
    logit(c) = Σ_m present_m β_m E_m(c) / Σ_m present_m β_m,   β = softmax(ω) on the simplex
(renormalised over the present modalities so the logits keep their scale when one is missing; a row with no
modality gets logits 0, the uniform distribution).

Prototypes live on the unit sphere: the stored parameter is renormalised in every forward pass (the shared
trainer has no post-update hook, so the effective prototypes of every update are exactly unit vectors), and
`renormalise_prototypes` writes the unit vectors back into the parameter (after training, or after each update
in a custom loop).

Note (derived here, see docs/papers/camp.md): the fused logits are a sum of per-modality terms, so CAMP cannot
represent a class that depends on an interaction of the modalities such as (z₁ + z₂) mod 3.

Feature batches (dataset zoo_complementary / zoo_digit_halves, `train.data.features`): point m of a row is
modality m's embedding (zeros past d_m), weights [B, N] are 1 on the present modalities:
    model(points [B, N, F], features [B, N, 0], weights [B, N]) -> logits [B, C]
    model.evidence(embeddings (e_m [B, d_m] per m), present [B, M]) -> CampEvidence
"""

from __future__ import annotations

import dataclasses
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
from flax import nnx

from icml26zoo.models.config import MODEL_OPTIONS_FIELD, ModelConfig, parse_model_options
from icml26zoo.registry import register_model
from icml26zoo.validation import check_float_array, check_int, check_positive

# Added under the square root of a norm: a zero projection (or prototype) stays finite in value and gradient.
_NORM_EPS = 1e-12


@dataclasses.dataclass(frozen=True)
class CampOptions:
    """The camp model's options (ModelConfig.model_options); the sphere's dimension D is ModelConfig.d_model."""

    # d_m per modality (at least 2 modalities): the frozen encoders' embedding widths; must match the data.
    feature_dims: tuple[int, ...] = (32, 32)
    num_classes: int = 3
    # J, prototypes per class and modality.
    prototypes: int = 5
    # τ of the similarities ⟨z, p⟩ / τ.
    temperature: float = 0.1

    def __post_init__(self) -> None:
        owner = f"{MODEL_OPTIONS_FIELD}: camp option"
        check_feature_dims(f"{owner} 'feature_dims'", self.feature_dims)
        check_int(f"{owner} 'num_classes'", self.num_classes, minimum=2)
        check_int(f"{owner} 'prototypes'", self.prototypes, minimum=1)
        check_positive(f"{owner} 'temperature'", self.temperature, finite=True)


def check_feature_dims(field: str, dims: object) -> tuple[int, ...]:
    """A tuple of at least two positive embedding widths; ValueError naming `field` otherwise."""
    if not isinstance(dims, tuple) or len(dims) < 2:
        raise ValueError(f"{field} must be a tuple of at least 2 embedding widths (one per modality), got {dims!r}")
    for dim in dims:
        check_int(f"{field} entries", dim)
    return dims


def normalize(x: jax.Array) -> jax.Array:
    """x [..., D] scaled to unit norm along the last axis (a zero vector stays zero)."""
    return x * jax.lax.rsqrt(jnp.sum(jnp.square(x), axis=-1, keepdims=True) + _NORM_EPS)


def smooth_max_evidence(similarities: jax.Array) -> jax.Array:
    """Class evidence E [..., C] = logsumexp_j s[..., C, J] − log J: between the mean and the max of the J."""
    return jax.nn.logsumexp(similarities, axis=-1) - math.log(similarities.shape[-1])


def fuse_evidence(evidence: jax.Array, beta: jax.Array, present: jax.Array) -> jax.Array:
    """logits [B, C] = Σ_m present β_m E_m / Σ_m present β_m from evidence [B, M, C], beta [M] on the simplex and
    present [B, M] in {0, 1}; 0 for a row with no present modality."""
    weights = present.astype(evidence.dtype) * beta[None]
    total = jnp.sum(weights, axis=1, keepdims=True)
    weights = weights / jnp.where(total > 0, total, 1.0)
    return jnp.einsum("bm,bmc->bc", weights, evidence)


def check_present(present: jax.Array, batch: int, modalities: int) -> jax.Array:
    """The missing-modality mask as float32 [B, M]; ValueError naming `present` for a wrong shape."""
    shape = getattr(present, "shape", None)
    if shape is None or tuple(shape) != (batch, modalities):
        raise ValueError(f"present (the missing-modality mask) must have shape [B, M] = [{batch}, {modalities}], "
                         f"got {None if shape is None else list(shape)}")
    return jnp.asarray(present).astype(jnp.float32)


class CampEvidence(NamedTuple):
    """One forward pass: logits [B, C], projections z [B, M, D], similarities s [B, M, C, J] (already / τ),
    evidence E [B, M, C], modality weights beta [M], present [B, M] float32."""

    logits: jax.Array
    projections: jax.Array
    similarities: jax.Array
    evidence: jax.Array
    beta: jax.Array
    present: jax.Array


@register_model("camp")
class Camp(nnx.Module):
    """Projectors to S^{D−1}, J unit prototypes per class and modality, smooth-max evidence fused with simplex
    weights (module docstring)."""

    LANGUAGE_MODEL = False
    options_class = CampOptions

    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs) -> None:
        self.options = parse_model_options(CampOptions, cfg, owner="camp model")
        dims, classes, count = self.options.feature_dims, self.options.num_classes, self.options.prototypes
        self.dim = cfg.d_model
        self.projectors = nnx.List([nnx.Linear(d, self.dim, rngs=rngs) for d in dims])
        raw = jax.random.normal(rngs.params(), (len(dims), classes, count, self.dim))
        self.prototype_params = nnx.Param(normalize(raw))
        # ω = 0: β starts uniform over the modalities.
        self.omega = nnx.Param(jnp.zeros((len(dims),)))

    @property
    def num_modalities(self) -> int:
        return len(self.options.feature_dims)

    def prototypes(self) -> jax.Array:
        """The unit prototypes [M, C, J, D] (the stored parameter renormalised)."""
        return normalize(self.prototype_params[...])

    def beta(self) -> jax.Array:
        """Modality weights [M] on the simplex, softmax(ω)."""
        return jax.nn.softmax(self.omega[...])

    def project(self, embeddings: tuple[jax.Array, ...]) -> jax.Array:
        """z [B, M, D] on the unit sphere from the embeddings e_m [B, d_m]."""
        if len(embeddings) != self.num_modalities:
            raise ValueError(f"embeddings must hold {self.num_modalities} arrays (one per modality), got "
                             f"{len(embeddings)}")
        batch = embeddings[0].shape[0] if hasattr(embeddings[0], "shape") else None
        for m, (e, d) in enumerate(zip(embeddings, self.options.feature_dims, strict=True)):
            check_float_array(f"embeddings[{m}]", e, (batch, d), "[B, d_m]")
        return jnp.stack([normalize(proj(e)) for proj, e in zip(self.projectors, embeddings, strict=True)], axis=1)

    def evidence(self, embeddings: tuple[jax.Array, ...], present: jax.Array | None = None) -> CampEvidence:
        """The forward pass from the embeddings e_m [B, d_m] and the mask present [B, M] (None: all present)."""
        z = self.project(embeddings)
        batch, modalities = z.shape[:2]
        present = (jnp.ones((batch, modalities), jnp.float32) if present is None
                   else check_present(present, batch, modalities))
        similarities = jnp.einsum("bmd,mcjd->bmcj", z, self.prototypes()) / self.options.temperature
        evidence = smooth_max_evidence(similarities)
        beta = self.beta()
        return CampEvidence(fuse_evidence(evidence, beta, present), z, similarities, evidence, beta, present)

    def unpack(self, points: jax.Array, weights: jax.Array) -> tuple[tuple[jax.Array, ...], jax.Array]:
        """(embeddings e_m [B, d_m], present [B, M]) of a feature batch (`unpack_embeddings`)."""
        return unpack_embeddings(points, weights, self.options.feature_dims)

    def __call__(self, points: jax.Array, features: jax.Array, weights: jax.Array) -> jax.Array:
        del features  # the embeddings are the points
        return self.evidence(*self.unpack(points, weights)).logits


def unpack_embeddings(points: jax.Array, weights: jax.Array, dims: tuple[int, ...]
                      ) -> tuple[tuple[jax.Array, ...], jax.Array]:
    """(embeddings e_m [B, d_m], present float32 [B, M]) from a feature batch: point m holds modality m's
    embedding (zeros past d_m), weights [B, N] > 0 on the present modalities."""
    check_float_array("points", points, (None, None, None), "[B, N, F]")
    if points.shape[1] < len(dims) or points.shape[2] < max(dims):
        raise ValueError(f"points must have at least M = {len(dims)} points of at least max(d_m) = {max(dims)} "
                         f"features (one modality per point), got shape {list(points.shape)}")
    check_float_array("weights", weights, points.shape[:2], "[B, N]")
    embeddings = tuple(points[:, m, :d].astype(jnp.float32) for m, d in enumerate(dims))
    return embeddings, (weights[:, : len(dims)] > 0).astype(jnp.float32)


def renormalise_prototypes(model: Camp) -> None:
    """Projects the stored prototype parameter onto the unit sphere in place (after an optimizer update)."""
    model.prototype_params[...] = normalize(model.prototype_params[...])
