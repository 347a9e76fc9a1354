"""The finitely Y-convex layer of "Universal Representation of Generalized Convex Functions and their Gradients"
(M. Nehzati, arXiv 2509.04477): f(x) = max_j [k(x, y_j) − b_j] (sense "max", a k-convex function) or
min_j [k(x, y_j) − b_j] (sense "min", k-concave), with J candidates y_j ∈ Y and intercepts b_j.

Why this parametrisation: every (y_{1:J}, b_{1:J}) ∈ Y^J × R^J gives a function in the class, so the parameter
space is convex and needs no positivity constraint (contrast input-convex networks), and the envelope theorem gives
the gradient ∇f(x) = ∇_x k(x, y_{j*(x)}) with j* the selected candidate, which is itself the answer in the
applications: the transport map's image of x in optimal transport, the allocation type x buys in a mechanism.

Options: a kernel (icml26zoo.convex.kernels, or a callable on one pair), a selection mode (hard, soft, ste; see
icml26zoo.convex.selection), box bounds [low, high] on the candidates (they are clipped into the box in every
forward, a projection that keeps the parameter space convex), an optional fixed default option (y_0, b_0), e.g. the
outside option (0, 0) that makes a menu individually rational, and fixed (not trained) candidates.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
from flax import nnx

from icml26zoo.convex.kernels import SAME_DIMENSION, PairKernel, resolve_kernel
from icml26zoo.convex.selection import MODES, SENSES, Selection, select
from icml26zoo.validation import check_choice, check_float_array, check_int, check_positive


class FixedCandidates(nnx.Variable):
    """Candidates that the optimiser leaves alone (they are not nnx.Param)."""


def with_default(candidates: jax.Array, intercepts: jax.Array, default: tuple[jax.Array, float] | None
                 ) -> tuple[jax.Array, jax.Array]:
    """Candidates [J(+1), m] and intercepts [J(+1)] with the fixed default option (y_0, b_0) prepended, if any."""
    if default is None:
        return candidates, intercepts
    y0 = jnp.broadcast_to(jnp.asarray(default[0], candidates.dtype), candidates.shape[1:])
    b0 = jnp.asarray(default[1], intercepts.dtype)
    return jnp.concatenate([y0[None], candidates]), jnp.concatenate([b0[None], intercepts])


def finite_convex(x: jax.Array, candidates: jax.Array, intercepts: jax.Array, *, kernel: str | PairKernel,
                  sense: str = "max", mode: str = "hard", temp: float = 50.0, max_effective_temp: float = 5000.0,
                  default: tuple[jax.Array, float] | None = None) -> Selection:
    """The selection (value [B], choice [B, m], index [B], weights [B, J']) of f at x [B, n] for candidates [J, m]
    and intercepts [J]; with a default option, index 0 is the default and J' = J + 1."""
    if candidates.ndim != 2 or intercepts.shape != candidates.shape[:1]:
        raise ValueError(f"candidates must have shape [J, m] and intercepts [J], got candidates "
                         f"{list(candidates.shape)} and intercepts {list(intercepts.shape)}")
    candidates, intercepts = with_default(candidates, intercepts, default)
    scores = resolve_kernel(kernel)(x, candidates) - intercepts[None, :]
    return select(scores, candidates, sense=sense, mode=mode, temp=temp, max_effective_temp=max_effective_temp)


class FiniteConvex(nnx.Module):
    """f(x [B, n]) -> [B], a finitely Y-convex (sense "max") or Y-concave (sense "min") function (module docstring).

    Parameters: candidates [J, m] (nnx.Param, or FixedCandidates when trainable_candidates is False) and intercepts
    [J] (nnx.Param, initialised at 0). `candidates=` gives their initial values; otherwise N(0, 1), or uniform in the
    box when bounds are given.
    """

    def __init__(self, num_candidates: int, dim: int, *, candidate_dim: int | None = None,
                 kernel: str | PairKernel = "inner_product", sense: str = "max", mode: str = "hard",
                 temp: float = 50.0, max_effective_temp: float = 5000.0,
                 bounds: tuple[float, float] | None = None,
                 default: tuple[Sequence[float] | float, float] | None = None,
                 trainable_candidates: bool = True, candidates: jax.Array | None = None, rngs: nnx.Rngs) -> None:
        self.num_candidates = check_int("num_candidates", num_candidates)
        self.dim = check_int("dim", dim)
        self.candidate_dim = dim if candidate_dim is None else check_int("candidate_dim", candidate_dim)
        if isinstance(kernel, str) and kernel in SAME_DIMENSION and self.candidate_dim != self.dim:
            raise ValueError(f"candidate_dim must equal dim ({dim}) for kernel {kernel!r}, got {candidate_dim}")
        resolve_kernel(kernel)
        self.kernel = kernel
        self.sense, self.mode = check_choice("sense", sense, SENSES), check_choice("mode", mode, MODES)
        self.temp = check_positive("temp", temp, finite=True)
        self.max_effective_temp = check_positive("max_effective_temp", max_effective_temp, finite=True)
        self.bounds = check_bounds(bounds)
        self.default = check_default(default, self.candidate_dim)
        initial = self._initial_candidates(candidates, rngs)
        self.candidates = nnx.Param(initial) if trainable_candidates else FixedCandidates(initial)
        self.intercepts = nnx.Param(jnp.zeros((num_candidates,), jnp.float32))

    def _initial_candidates(self, candidates: jax.Array | None, rngs: nnx.Rngs) -> jax.Array:
        shape = (self.num_candidates, self.candidate_dim)
        if candidates is not None:
            check_float_array("candidates", candidates, shape, "[J, m]")
            return jnp.asarray(candidates, jnp.float32)
        if self.bounds is None:
            return jax.random.normal(rngs.params(), shape, jnp.float32)
        return jax.random.uniform(rngs.params(), shape, jnp.float32, *self.bounds)

    def active_candidates(self) -> jax.Array:
        """The candidates [J, m] the function uses: the parameters clipped into the box, if any."""
        candidates = self.candidates[...]
        return candidates if self.bounds is None else jnp.clip(candidates, *self.bounds)

    def select(self, x: jax.Array, *, mode: str | None = None) -> Selection:
        """The selection at x [B, n] in the layer's mode (or `mode`); index 0 is the default option if any."""
        check_float_array("x", x, (None, self.dim), "[B, n]")
        return finite_convex(x, self.active_candidates(), self.intercepts[...], kernel=self.kernel, sense=self.sense,
                             mode=self.mode if mode is None else mode, temp=self.temp,
                             max_effective_temp=self.max_effective_temp, default=self.default)

    def __call__(self, x: jax.Array) -> jax.Array:
        """f(x) [B] of x [B, n]."""
        return self.select(x).value

    def envelope_gradient(self, x: jax.Array) -> jax.Array:
        """∇f(x) [B, n] by the envelope theorem: ∇_x k(x, y_{j*(x)}) at the hard arg-best candidate."""
        chosen = jax.lax.stop_gradient(self.select(x, mode="hard").choice)
        all_pairs = resolve_kernel(self.kernel)

        def kernel_at_choice(point: jax.Array, candidate: jax.Array) -> jax.Array:
            return all_pairs(point[None], candidate[None])[0, 0]

        return jax.vmap(jax.grad(kernel_at_choice))(x, chosen)


def check_default(default: tuple[Sequence[float] | float, float] | None, candidate_dim: int
                  ) -> tuple[tuple[float, ...], float] | None:
    """The default option as static floats ((y_0 of candidate_dim numbers), b_0); a scalar y_0 is broadcast."""
    if default is None:
        return None
    try:
        option, price = default
        option = tuple(float(v) for v in jnp.broadcast_to(jnp.asarray(option, jnp.float32), (candidate_dim,)))
        return option, float(price)
    except (TypeError, ValueError) as error:
        raise ValueError(f"default must be a pair (y_0 with {candidate_dim} numbers, b_0), got {default!r}") from error


def check_bounds(bounds: tuple[float, float] | None) -> tuple[float, float] | None:
    """(low, high) with low < high, both finite, or None."""
    if bounds is None:
        return None
    if not (isinstance(bounds, tuple | list) and len(bounds) == 2 and all(isinstance(b, int | float) for b in bounds)
            and bounds[0] < bounds[1]):
        raise ValueError(f"bounds must be a pair (low, high) of numbers with low < high, got {bounds!r}")
    return float(bounds[0]), float(bounds[1])
