"""CAMP's coherent alignment: class-wise entropic optimal transport between the modalities' prototype sets.

RECONSTRUCTION (docs/papers/camp.md): for each class c and modality pair a < b, the empirical measure of class
c's J unit prototypes in modality a (uniform weights 1/J) is transported onto modality b's, cost
C_ij = 1 − cos(p_{a,c,i}, p_{b,c,j}) on the shared sphere, entropic regularisation ε (Sinkhorn, ott-jax's
solver, the `[ot]` extra, imported lazily). The loss is the transport cost of the entropic plan,
    W_ε(a, b, c) = ⟨P*_ε, C⟩ ≥ 0   (C ≥ 0, P* ≥ 0),   L_OT = Σ_c Σ_{a<b} W_ε(a, b, c),
which is ≈ 0 for identical, well-separated sets (P* ≈ diag / J) and grows as class c's prototypes of the two
modalities drift apart: the class geometry is made consistent across modalities without tying any sample's two
embeddings together (complementary modalities need not agree per instance). The spec's "shared linear map"
before the cosine is the identity here: the projectors φ_m already map every modality into one sphere.
Prototypes rather than batch samples are the measures, so every problem has a fixed J × J size.

Gradient (Danskin / envelope theorem, as ott's `use_danskin`): the derivative of the entropic OT cost
min_P ⟨P, C⟩ − ε H(P) with respect to the cost matrix is the optimal plan P*, so the backward pass holds P*
fixed and differentiates ⟨P*, C(x, y)⟩ through the cosine cost only; Sinkhorn's iterations are never
differentiated (cheap, and ott's implicit differentiation fails on these problems: its linear system is
singular). The solver sees stopped-gradient inputs.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from icml26zoo.multimodal.camp import normalize
from icml26zoo.validation import check_float_array, check_int, check_positive

# ott's stopping threshold on the marginal error (L1 of the column marginals' deviation).
SINKHORN_THRESHOLD = 1e-5
SINKHORN_MAX_ITERATIONS = 1000


class SinkhornResult(NamedTuple):
    """Per problem: the transport cost ⟨P, C⟩ [...], the plan P [..., n, n'] (no gradient) and the cost matrix
    C [..., n, n']."""

    cost: jax.Array
    plan: jax.Array
    cost_matrix: jax.Array


def sinkhorn_cosine(x: jax.Array, y: jax.Array, epsilon: float, *,
                    max_iterations: int = SINKHORN_MAX_ITERATIONS) -> SinkhornResult:
    """Entropic OT between uniform measures on the rows of x [..., n, D] and y [..., n', D], cost 1 − cos, through
    ott-jax's Sinkhorn (vmapped over the leading axes)."""
    from ott.geometry import costs, pointcloud
    from ott.problems.linear import linear_problem
    from ott.solvers.linear import sinkhorn

    check_positive("epsilon", epsilon, finite=True)
    check_int("max_iterations", max_iterations)
    if getattr(x, "ndim", 0) < 2:
        raise ValueError(f"x must be an array [..., n, D], got shape {list(getattr(x, 'shape', ()))}")
    if y.ndim != x.ndim or y.shape[:-2] != x.shape[:-2] or y.shape[-1] != x.shape[-1]:
        raise ValueError(f"y must have shape [..., n', D] with x's leading axes and D, x {list(x.shape)}, got "
                         f"{list(y.shape)}")
    solver = sinkhorn.Sinkhorn(threshold=SINKHORN_THRESHOLD, max_iterations=max_iterations, implicit_diff=None)

    def plan_of(x: jax.Array, y: jax.Array) -> jax.Array:
        geometry = pointcloud.PointCloud(x, y, cost_fn=costs.Cosine(), epsilon=epsilon)
        return solver(linear_problem.LinearProblem(geometry)).matrix

    for _ in range(x.ndim - 2):
        plan_of = jax.vmap(plan_of)
    # ott mixes int32 counters with float32 arrays: allow JAX's standard promotion inside the solver even when
    # the caller runs with jax_numpy_dtype_promotion="strict" (the zoo's tests do).
    with jax.numpy_dtype_promotion("standard"):
        plan = plan_of(jax.lax.stop_gradient(x), jax.lax.stop_gradient(y))
    matrix = cosine_cost(x, y)
    return SinkhornResult(jnp.sum(plan * matrix, axis=(-2, -1)), plan, matrix)


def cosine_cost(x: jax.Array, y: jax.Array) -> jax.Array:
    """C [..., n, n'] = 1 − cos(x_i, y_j) of x [..., n, D] and y [..., n', D] (ott's costs.Cosine)."""
    return 1.0 - jnp.einsum("...id,...jd->...ij", normalize(x), normalize(y))


def ot_alignment(prototypes: jax.Array, epsilon: float = 0.05, *,
                 max_iterations: int = SINKHORN_MAX_ITERATIONS) -> jax.Array:
    """L_OT (scalar) = Σ_c Σ_{a<b} ⟨P*, C⟩ between the class-c prototype sets of modalities a and b, from the unit
    prototypes [M, C, J, D] (module docstring)."""
    check_float_array("prototypes", prototypes, (None, None, None, None), "[M, C, J, D]")
    modalities = prototypes.shape[0]
    first, second = zip(*[(a, b) for a in range(modalities) for b in range(a + 1, modalities)], strict=True)
    # [P, C, J, D] for the P = M(M−1)/2 pairs, one Sinkhorn problem per (pair, class).
    result = sinkhorn_cosine(prototypes[jnp.array(first)], prototypes[jnp.array(second)], epsilon,
                             max_iterations=max_iterations)
    return jnp.sum(result.cost)
