"""Pieces of the ProtoT mixer (zoo/mixers/protot.py): options, time scales, edits, and the channel-memory
recurrence in its parallel form (two `kernels.ssd` calls) and as a readable per-step reference.

ProtoT (arXiv 2602.11852) is a RECONSTRUCTION: the paper's method section and code were not
available (docs/papers.md). Channel k of head h has retention λ_k ∈ [0, 1); with write weights w_t = (1 − λ) ⊙ a_t (a_t
expanded over the scales) and values v_t,

    m_{t,k} = λ_k m_{t−1,k} + w_{t,k} v_t        memory     [P] per channel (the SSD state [P, K])
    n_{t,k} = λ_k n_{t−1,k} + w_{t,k}            normalizer (the same recurrence with v ≡ 1)
    r_t = Σ_k b_{t,k} m_{t,k} / (n_{t,k} + ε)    read ("avg"); "sum" drops the division

Channel layout: K = K₀·S channels, channel k = j·S + s is base prototype j at scale s.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax import lax

from icml26zoo.kernels.ssd import CHUNK_SIZES, ssd, ssd_step
from icml26zoo.layers.options import check_choice, check_implementation
from icml26zoo.mixers.base import read_mixer_options
from icml26zoo.models.config import ModelConfig
from icml26zoo.validation import check_int, check_positive, is_integer, is_number

DECAYS = ("fixed", "learned")
MEMORIES = ("avg", "sum")
READS = ("joint", "factored")
IMPLEMENTATIONS = ("reference", "xla", "attention", "pallas")
# log λ is floored here: λ = 0 (exponent 0) has log λ = −inf, which the chunked op cannot take. exp(−100)
# underflows float32 to (sub)normal zero, so the floor still keeps nothing of the previous state.
LOG_DECAY_FLOOR = -100.0
# The normalizer pass runs the scalar-decay SSD with one head per channel ([B, H·K, nc, Q, Q] weights):
# a short chunk keeps that tile small.
COUNT_CHUNK = 16


@dataclasses.dataclass(frozen=True)
class ProtoTOptions:
    """The ProtoT mixer's `cfg.mixer_options`, validated (see `parse_options`)."""

    num_prototypes: int = 64  # K₀ base prototypes per head
    scale_exponents: tuple[float, ...] = (1, 4, 7, 10)  # λ_s = 1 − 2^(−e_s): half-lives ≈ 0.7·2^e tokens
    decay: str = "fixed"  # "fixed": option (B), K = K₀·S; "learned": option (A), K = K₀, λ_k = σ(θ_k)
    memory: str = "avg"  # "avg": normalized memories m/(n + ε); "sum": unnormalized (ablation)
    read: str = "joint"  # "joint": softmax over all K; "factored": + per-scale logits W_s x (concept × scale)
    read_count_bias: bool = False  # add log(n + ε) to the read logits (ignore empty channels)
    prototype_dim: int = 64  # d_p
    value_dim: int | None = None  # d_v; None = d_model
    num_heads: int = 1  # H independent prototype banks, d_v / H value channels each
    eps: float = 1e-6
    chunk_size: int = 64  # chunk of the memory SSD (one of kernels.ssd.CHUNK_SIZES)
    implementation: str | tuple[str, ...] | None = None  # the SSD op's `implementation=`: None = best for the backend


def _fail(name: str, expected: str, value: Any) -> None:
    raise ValueError(f"protot mixer option {name!r} must be {expected}, got {value!r}")


def _check_exponents(values: dict[str, Any]) -> None:
    exps = values["scale_exponents"]
    if not exps or not all(is_number(e) and 0 <= e <= 30 for e in exps):
        _fail("scale_exponents", "a non-empty tuple of numbers in [0, 30] (λ = 1 − 2^(−e))", exps)
    if len(set(exps)) != len(exps):
        _fail("scale_exponents", "free of duplicates", exps)
    if values["decay"] == "learned" and min(exps) <= 0:
        _fail("scale_exponents", "all > 0 with decay='learned' (λ = 0 has no finite logit θ)", exps)


def parse_options(cfg: ModelConfig) -> ProtoTOptions:
    """Reads and validates the ProtoT options of `cfg`; a bad name or value raises ValueError naming it."""
    values = read_mixer_options(cfg, "protot", ProtoTOptions)
    for name, choices in (("decay", DECAYS), ("memory", MEMORIES), ("read", READS)):
        check_choice("protot mixer", name, values[name], choices)
    if values["value_dim"] is None:
        values["value_dim"] = cfg.d_model
    for name in ("num_prototypes", "prototype_dim", "value_dim", "num_heads"):
        check_int(f"protot mixer option {name!r}", values[name])
    _check_exponents(values)
    if values["read"] == "factored" and values["decay"] != "fixed":
        _fail("read", "'joint' with decay='learned' (one scale per prototype: no scale axis to factor)", "factored")
    check_positive("protot mixer option 'eps'", values["eps"])
    check_choice("protot mixer", "chunk_size", values["chunk_size"], CHUNK_SIZES)
    check_implementation("protot mixer", values["implementation"], IMPLEMENTATIONS)
    if values["value_dim"] % values["num_heads"]:
        _fail("num_heads", f"a divisor of value_dim = {values['value_dim']}", values["num_heads"])
    return ProtoTOptions(**values)


def fixed_log_decay(exponents: tuple[float, ...]) -> np.ndarray:
    """[S] float32 log λ_s = log(1 − 2^(−e_s)), floored at LOG_DECAY_FLOOR (e = 0 is λ = 0)."""
    e = np.asarray(exponents, np.float64)
    with np.errstate(divide="ignore"):
        return np.maximum(np.log1p(-(2.0**-e)), LOG_DECAY_FLOOR).astype(np.float32)


def learned_decay_init(exponents: tuple[float, ...], num_prototypes: int) -> np.ndarray:
    """[K₀] float32 θ = logit(λ) with half-life exponents log-spaced from min(e) to max(e) (option (A))."""
    e = np.linspace(min(exponents), max(exponents), num_prototypes)
    return np.log(np.expm1(e * np.log(2.0))).astype(np.float32)  # logit(1 − 2^−e) = log(2^e − 1)


class PrototypeEditMasks(nnx.Param):
    """An edit of one ProtoT layer as arrays (PrototypeEdit.mask_state): {"write_keep": [H, K₀],
    "memory_keep", "pinned" (1 = pinned), "pin_value", "read_scale": [H, K]}, float32.

    Arrays rather than a static attribute, so jit traces them: one compiled program serves every edit of the
    same shapes. A Param subclass only so that `nnx.split(model, nnx.Param)` (decoding, the trainer) carries
    them; they are not weights: the mixer stops their gradient, and an edited copy is not meant to be trained.
    """


@dataclasses.dataclass(frozen=True)
class PrototypeEdit:
    """A targeted edit of one ProtoT layer (the mixer holds it as PrototypeEditMasks arrays).

    block_writes: base prototypes j with a_{·,j} = 0 (no token writes to concept j, at any scale).
    zero_memories: channels k with m̄_{·,k} = 0 (read out as empty).
    pin_reads: (channel k, value) pairs: b_{·,k} = value, the other read weights left as they are.
    scale_reads: (channel k, factor) pairs: b_{·,k} ← factor · b_{·,k} (after any pin), factor finite and
      >= 0: 1 leaves the channel as it is, 0 silences it, > 1 amplifies it (the weights then no longer sum
      to 1). A channel listed twice gets the product of its factors.
    heads: the heads the edit applies to; None = all.
    """

    block_writes: tuple[int, ...] = ()
    zero_memories: tuple[int, ...] = ()
    pin_reads: tuple[tuple[int, float], ...] = ()
    scale_reads: tuple[tuple[int, float], ...] = ()
    heads: tuple[int, ...] | None = None

    def masks(self, heads: int, num_prototypes: int, channels: int) -> tuple[np.ndarray, ...]:
        """(write_keep [H, K₀], memory_keep [H, K], pinned [H, K] bool, pin_value [H, K], read_scale [H, K])
        float32 masks."""
        self._check("heads", self.heads or (), heads)
        self._check("block_writes", self.block_writes, num_prototypes)
        self._check("zero_memories", self.zero_memories, channels)
        self._check("pin_reads", tuple(k for k, _ in self.pin_reads), channels)
        self._check("scale_reads", tuple(k for k, _ in self.scale_reads), channels)
        factors = tuple(f for _, f in self.scale_reads)
        if not all(is_number(f) and 0 <= f < np.inf for f in factors):
            raise ValueError(f"PrototypeEdit.scale_reads factors must be finite numbers >= 0, got {factors!r}")
        rows = np.zeros(heads, bool)
        rows[list(range(heads) if self.heads is None else self.heads)] = True
        write_keep = np.ones((heads, num_prototypes), np.float32)
        write_keep[np.ix_(rows, list(self.block_writes))] = 0.0
        memory_keep = np.ones((heads, channels), np.float32)
        memory_keep[np.ix_(rows, list(self.zero_memories))] = 0.0
        pinned, pin_value = np.zeros((heads, channels), bool), np.zeros((heads, channels), np.float32)
        for k, value in self.pin_reads:
            pinned[rows, k], pin_value[rows, k] = True, value
        read_scale = np.ones((heads, channels), np.float32)
        for k, factor in self.scale_reads:
            read_scale[rows, k] *= factor
        return write_keep, memory_keep, pinned, pin_value, read_scale

    def mask_state(self, heads: int, num_prototypes: int, channels: int) -> PrototypeEditMasks:
        """The validated masks as the mixer holds them (see PrototypeEditMasks)."""
        names = ("write_keep", "memory_keep", "pinned", "pin_value", "read_scale")
        arrays = self.masks(heads, num_prototypes, channels)
        return PrototypeEditMasks({n: jnp.asarray(a, jnp.float32) for n, a in zip(names, arrays, strict=True)})

    @staticmethod
    def _check(name: str, ids: tuple[int, ...], size: int) -> None:
        if not all(is_integer(i) and 0 <= i < size for i in ids):
            raise ValueError(f"PrototypeEdit.{name} must hold integers in [0, {size}), got {ids!r}")


def channel_counts(
    write: jax.Array, log_decay: jax.Array, *, segment_ids: jax.Array | None, count0: jax.Array | None,
    implementation: str | tuple[str, ...] | None,
) -> tuple[jax.Array, jax.Array]:
    """The normalizers n_{t,k}: the channel recurrence with v ≡ 1, one scalar-decay SSD head per channel.

    write [B, T, H, K] float32 (w = (1 − λ) ⊙ a), log_decay [H, K] float32, count0 [B, H, K] or None.
    Returns n [B, T, H, K] and the final normalizers [B, H, K], float32. A single token with a state
    takes one `ssd_step`.
    """
    bsz, length, heads, k = write.shape
    x = write.reshape(bsz, length, heads * k, 1)
    a = jnp.broadcast_to(log_decay.reshape(heads * k), (bsz, length, heads * k))
    ones = jnp.ones_like(x)
    s0 = None if count0 is None else count0.reshape(bsz, heads * k, 1, 1)
    if s0 is not None and length == 1:
        y, state = ssd_step(x[:, 0], a[:, 0], ones[:, 0], ones[:, 0], state=s0)
        y = y[:, None]
    else:
        y, state = ssd(x, a, ones, ones, initial_state=s0, segment_ids=segment_ids, chunk_size=COUNT_CHUNK,
                       implementation=implementation)
    return y.reshape(bsz, length, heads, k), state.reshape(bsz, heads, k)


def read_memories(
    v: jax.Array, write: jax.Array, coeff: jax.Array, log_decay: jax.Array, *, segment_ids: jax.Array | None,
    memory0: jax.Array | None, chunk_size: int, implementation: str | tuple[str, ...] | None,
) -> tuple[jax.Array, jax.Array]:
    """r_t = Σ_k coeff_{t,k} m_{t,k}: the memory recurrence as a diagonal-decay SSD with N = K channels.

    v [B, T, H, P], write / coeff [B, T, H, K], float32; log_decay [H, K]; memory0 [B, H, P, K] or None.
    coeff is b / (n + ε) ("avg") or b ("sum"), so the per-channel division happens before the contraction
    over channels and the [B, T, H, K, P] memories are never materialized.
    Returns r [B, T, H, P] and the final memories [B, H, P, K], float32.
    """
    bsz, length = v.shape[:2]
    a = jnp.broadcast_to(log_decay, (bsz, length) + log_decay.shape)
    if memory0 is not None and length == 1:
        r, state = ssd_step(v[:, 0], a[:, 0], write[:, 0], coeff[:, 0], state=memory0)
        return r[:, None], state
    return ssd(v, a, write, coeff, initial_state=memory0, segment_ids=segment_ids, chunk_size=chunk_size,
               implementation=implementation)


def reference_recurrence(
    v: jax.Array, write: jax.Array, read: jax.Array, log_decay: jax.Array, *, memory: str = "avg",
    eps: float = 1e-6, segment_ids: jax.Array | None = None, memory0: jax.Array | None = None,
    count0: jax.Array | None = None,
) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array, jax.Array]:
    """The channel memories step by step (the write and the read), float32 `lax.scan`.

    v [B, T, H, P]; write (w = (1 − λ) ⊙ a) and read (b) [B, T, H, K]; log_decay [H, K]; memory0
    [B, H, P, K] / count0 [B, H, K] or None (zeros). The state resets at every segment start.
    Returns r [B, T, H, P], n [B, T, H, K], m̄ [B, T, H, K, P] (m/(n + ε), or m for "sum") and the final
    memories [B, H, P, K] and normalizers [B, H, K].
    """
    bsz, length, heads, p = v.shape
    k = write.shape[-1]
    lam = jnp.exp(log_decay.astype(jnp.float32))
    m0 = jnp.zeros((bsz, heads, p, k), jnp.float32) if memory0 is None else memory0.astype(jnp.float32)
    n0 = jnp.zeros((bsz, heads, k), jnp.float32) if count0 is None else count0.astype(jnp.float32)
    seg = jnp.zeros((bsz, length), jnp.int32) if segment_ids is None else segment_ids
    starts = jnp.concatenate([jnp.zeros((bsz, 1), bool), seg[:, 1:] != seg[:, :-1]], axis=1)

    def step(carry, inputs):
        m, n = carry
        v_t, w_t, b_t, start = inputs
        m = jnp.where(start[:, None, None, None], 0.0, m)
        n = jnp.where(start[:, None, None], 0.0, n)
        m = lam[:, None, :] * m + v_t[..., :, None] * w_t[..., None, :]
        n = lam * n + w_t
        m_bar = m / (n[:, :, None, :] + eps) if memory == "avg" else m
        r = jnp.einsum("bhpk,bhk->bhp", m_bar, b_t, precision=lax.Precision.HIGHEST)
        return (m, n), (r, n, jnp.swapaxes(m_bar, -1, -2))

    time_first = lambda z: jnp.moveaxis(z.astype(jnp.float32), 1, 0)
    (m_fin, n_fin), (r, n, m_bar) = lax.scan(
        step, (m0, n0), (time_first(v), time_first(write), time_first(read), jnp.moveaxis(starts, 1, 0))
    )
    batch_first = lambda z: jnp.moveaxis(z, 0, 1)
    return batch_first(r), batch_first(n), batch_first(m_bar), m_fin, n_fin
