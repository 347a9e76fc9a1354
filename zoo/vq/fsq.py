"""Finite scalar quantisation (FSQ; "Finite Scalar Quantization: VQ-VAE Made Simple", arXiv 2309.15505), as the
protein tokenizer of "Adaptive Protein Tokenization" (arXiv 2602.06418) uses it.

Each of the d = len(levels) channels is bounded by a tanh so that it spans (l − 1)/2 either side of zero, rounded
to the nearest integer with a straight-through gradient, and divided by ⌊l/2⌋, so channel i takes one of l_i
values in [−1, 1]. For an even l the integer grid {−l/2, ..., l/2 − 1} is not symmetric about zero: the bound
moves its output down by half a step (and its input by tan(1/2 / half_l), so z = 0 still lands on a grid point).
The code index is mixed radix: index = Σ_i (code_i·⌊l_i/2⌋ + ⌊l_i/2⌋)·basis_i with basis = (1, l_0, l_0·l_1, ...), an
integer in [0, Π l_i).

Checked against the official code of the paper, repository rdilip/apt, file apt/fsq.py at commit
812ff93492d6dd630b2af51db64755993b19737c (and rdilip/kanzi src/kanzi/fsq.py at cfed9cf): the bound uses
eps = 1e-3 and the input shift tan(offset / half_l) (the FSQ paper writes atanh; the two agree to third order),
and tests/zoo/test_vq.py compares this module with that formula on fixed inputs. Written from the maths, not
copied.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from icml26zoo.validation import check_int

# Shrinks the tanh range a little so that the bounded value never reaches a rounding boundary of the grid's edge.
BOUND_EPS = 1e-3


def check_levels(levels: Sequence[int], field: str = "levels") -> tuple[int, ...]:
    """`levels` as a tuple of ints, each >= 2 (a channel with one level carries nothing); ValueError naming
    `field` otherwise."""
    if isinstance(levels, (str, bytes)) or not isinstance(levels, Sequence) or not levels:
        raise ValueError(f"{field} must be a non-empty sequence of integers >= 2, got {levels!r}")
    return tuple(check_int(f"{field}[{i}]", level, minimum=2) for i, level in enumerate(levels))


def codebook_size(levels: Sequence[int]) -> int:
    """The number of codes, Π levels."""
    return int(np.prod(check_levels(levels)))


def _constants(levels: Sequence[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(levels [d], ⌊l/2⌋ [d], mixed-radix basis [d]) as float32 / int arrays."""
    levels = np.asarray(check_levels(levels))
    basis = np.cumprod(np.concatenate([[1], levels[:-1]])).astype(np.int64)
    return levels, levels // 2, basis


def round_straight_through(x: jax.Array) -> jax.Array:
    """round(x) in the forward pass, the identity in the backward pass (the gradient passes straight through)."""
    return x + jax.lax.stop_gradient(jnp.round(x) - x)


def fsq_bound(z: jax.Array, levels: Sequence[int]) -> jax.Array:
    """z [..., d] -> [..., d]: tanh-bounded to (−half_l − offset, half_l − offset) per channel, where
    half_l = (l − 1)(1 − eps)/2 and offset = 1/2 for an even l (0 for odd), so rounding gives l integers."""
    levels, _, _ = _constants(levels)
    _check_channels(z, levels)
    half_l = (levels - 1) * (1 - BOUND_EPS) / 2
    offset = np.where(levels % 2 == 0, 0.5, 0.0)
    shift = np.tan(offset / half_l)
    z = z.astype(jnp.float32)
    return jnp.tanh(z + shift.astype(np.float32)) * half_l.astype(np.float32) - offset.astype(np.float32)


def fsq_quantize(z: jax.Array, levels: Sequence[int]) -> jax.Array:
    """z [..., d] -> codes [..., d] float32 on the grid {k / ⌊l/2⌋}, in [−1, 1]; straight-through gradient."""
    _, half_width, _ = _constants(levels)
    return round_straight_through(fsq_bound(z, levels)) / half_width.astype(np.float32)


def fsq_codes_to_indices(codes: jax.Array, levels: Sequence[int]) -> jax.Array:
    """codes [..., d] on the grid -> int32 indices [...] in [0, Π levels) (mixed radix, channel 0 fastest)."""
    levels_array, half_width, basis = _constants(levels)
    _check_channels(codes, levels_array)
    half_width = half_width.astype(np.float32)
    digits = jnp.round(codes.astype(jnp.float32) * half_width + half_width).astype(jnp.int32)
    return jnp.sum(digits * basis.astype(np.int32), axis=-1).astype(jnp.int32)


def fsq_indices_to_codes(indices: jax.Array, levels: Sequence[int]) -> jax.Array:
    """int indices [...] -> codes [..., d] float32 (the inverse of fsq_codes_to_indices)."""
    levels_array, half_width, basis = _constants(levels)
    indices = jnp.asarray(indices).astype(jnp.int32)[..., None]
    digits = (indices // basis.astype(np.int32)) % levels_array.astype(np.int32)
    return (digits - half_width.astype(np.int32)).astype(jnp.float32) / half_width.astype(np.float32)


def _check_channels(z: jax.Array, levels: np.ndarray) -> None:
    if z.ndim < 1 or z.shape[-1] != len(levels):
        raise ValueError(f"z must have shape [..., {len(levels)}] (one channel per level of levels="
                         f"{tuple(int(level) for level in levels)}), got shape {list(z.shape)}")


class FSQ(nnx.Module):
    """Linear(dim -> d), FSQ, Linear(d -> dim): x [..., dim] -> (quantised [..., dim], codes [..., d], indices [...]).

    d = len(levels); the gradient reaches the input projection through the straight-through rounding.
    """

    def __init__(self, dim: int, levels: Sequence[int], *, rngs: nnx.Rngs) -> None:
        self.levels = check_levels(levels)
        check_int("dim", dim)
        self.project_in = nnx.Linear(dim, len(self.levels), rngs=rngs)
        self.project_out = nnx.Linear(len(self.levels), dim, rngs=rngs)

    @property
    def codebook_size(self) -> int:
        return codebook_size(self.levels)

    def __call__(self, x: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
        codes = fsq_quantize(self.project_in(x), self.levels)
        return self.project_out(codes), codes, fsq_codes_to_indices(codes, self.levels)

    def decode_indices(self, indices: jax.Array) -> jax.Array:
        """int indices [...] -> the projected codes [..., dim] (what __call__ returns for those codes)."""
        return self.project_out(fsq_indices_to_codes(indices, self.levels))
