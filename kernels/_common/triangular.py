"""Unit lower-triangular solves for the chunked (WY / UT form) recurrent ops, with a hand-written backward."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from icml26zoo.kernels._common.precision import HIGHEST


def _ein(spec: str, *xs: jax.Array) -> jax.Array:
    return jnp.einsum(spec, *xs, precision=HIGHEST)


def _diag_blocks(a: jax.Array, b: int) -> jax.Array:
    """Lower-left b x b quarter of every 2b x 2b diagonal block of a [..., C, C] -> [..., C/(2b), b, b]."""
    c = a.shape[-1]
    n = c // (2 * b)
    a6 = a.reshape(a.shape[:-2] + (n, 2, b, n, 2, b))[..., :, 1, :, :, 0, :]  # [..., n, b, n, b]
    return jnp.moveaxis(jnp.diagonal(a6, axis1=-4, axis2=-2), -1, -3)


def unit_lower_inverse(a: jax.Array) -> jax.Array:
    """(I + a)^{-1} for strictly lower-triangular a [..., C, C], C a power of two, by block doubling.

    Keeps the inverses X of the diagonal blocks of I + a; two neighbouring b-blocks merge into the 2b-block
    [[X11, 0], [-X22 L21 X11, X22]] (L21 the block of a between them). log2(C) levels of small batched
    matmuls (about C^3/3 flops), which run and differentiate far faster than a triangular solve on CPU.
    """
    c = a.shape[-1]
    x = jnp.ones(a.shape[:-2] + (c, 1, 1), a.dtype)  # inverses of the 1 x 1 diagonal blocks
    b = 1
    while b < c:
        x11, x22 = x[..., 0::2, :, :], x[..., 1::2, :, :]
        x21 = -_ein("...ij,...jk,...kl->...il", x22, _diag_blocks(a, b), x11)
        top = jnp.concatenate([x11, jnp.zeros_like(x11)], axis=-1)
        x = jnp.concatenate([top, jnp.concatenate([x21, x22], axis=-1)], axis=-2)
        b *= 2
    return x[..., 0, :, :]


@jax.custom_vjp
def unit_lower_solve(a: jax.Array, rhs: jax.Array) -> jax.Array:
    """(I + a)^{-1} rhs for strictly lower-triangular a [..., C, C] (only that part is read); rhs [..., C, D].

    Hand-written backward: with y the solution and T = (I + a)^{-1}, d rhs = T^T dy and
    da = StrictTril(-(d rhs) y^T): two matmuls instead of autodiff through every doubling level.
    """
    return _solve_fwd(a, rhs)[0]


def _solve_fwd(a: jax.Array, rhs: jax.Array) -> tuple[jax.Array, tuple[jax.Array, jax.Array]]:
    inv = unit_lower_inverse(a)
    y = _ein("...ts,...sd->...td", inv, rhs)
    return y, (inv, y)


def _solve_bwd(res: tuple[jax.Array, jax.Array], dy: jax.Array) -> tuple[jax.Array, jax.Array]:
    inv, y = res
    drhs = _ein("...ts,...td->...sd", inv, dy)
    c = inv.shape[-1]
    da = jnp.where(jnp.tril(jnp.ones((c, c), bool), -1), -_ein("...td,...sd->...ts", drhs, y), 0.0)
    return da, drhs


unit_lower_solve.defvjp(_solve_fwd, _solve_bwd)
