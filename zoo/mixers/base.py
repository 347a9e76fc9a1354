"""The sequence-mixer interface that every registered mixer implements.

A mixer is the token-mixing sublayer of a decoder block (softmax attention, FoX, DeltaNet, Mamba, ...).
The LM backbone (zoo/models) never names a mixer: it looks `cfg.mixer` up in `zoo.registry.MIXERS`, so
adding one is a new file plus an import line in `zoo/mixers/__init__.py`, nothing else.

Contract (`SequenceMixer` below spells it as a Protocol; mixers need not inherit from it):

* Registration and construction::

      @register_mixer("my_mixer")
      class MyMixer(nnx.Module):
          def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs): ...

  Everything comes from the shared `ModelConfig` (d_model, num_heads, num_kv_heads, resolved_head_dim,
  compute_dtype, norm_eps, rope_theta, ...). Mixer-specific settings come from
  the `mixer_options` pairs, read into the mixer's frozen options dataclass with `read_mixer_options`
  or `mixer_options` (typed; an unknown name is a ValueError), never from new ModelConfig fields.

* State: only `nnx.Param` variables (float32). No RNG streams, batch stats or other variables: the
  trainer splits a model with `nnx.split(model, nnx.Param)` and merges it again inside `jax.jit`.
  Parameters are cast to `cfg.compute_dtype` where they are used.

* Call::

      y, new_cache = mixer(x, *, segment_ids=None, positions=None, cache=None)

  x `[B, T, D]` in the compute dtype; segment_ids `[B, T]` int32 or None (packed sequences: no
  information crosses a segment boundary, 0 marks padding); positions `[B, T]` int32, the position of
  each token inside its segment (decoding: absolute position). The backbone always passes positions;
  a mixer that does not use them (recurrent and convolutional mixers) defaults them to None, one that
  does (RoPE, positional priors) requires them. Returns y `[B, T, D]` in the compute
  dtype and, when `cache` is given, the cache after appending the T tokens; `None` when `cache` is None.
  With a cache, T ≥ 1 tokens are appended at once (chunked prefill) and the outputs must equal those of
  the full forward pass; decoding assumes one sequence per row, so segment_ids is None there.
  Causality: y[:, t] may depend on x[:, s] only for s ≤ t (within the same segment).
  A mixer's `__call__` starts with `check_call(self, x, segment_ids, positions, cache, length_of=...)`:
  the input checks and, when decoding, the cache's entries and shapes against `init_cache`.

* Cache::

      cache = mixer.init_cache(batch_size, max_len, dtype)

  A pytree of arrays (KV buffers, recurrent states, a write index, ...) for `batch_size` rows and at
  most `max_len` tokens, in `dtype` (the compute dtype) except where a mixer needs float32 state.
  `init_cache` must not read parameters: with scanned layers it is called on the stacked module and
  the backbone stacks the result over layers.

* Conformance: `tests/zoo/test_conformance.py` runs every registered model × mixer through one
  harness (shapes, causality by gradients, decoding equals forward, packed equals padded, scan equals
  unrolled, ...). A mixer class may set `CONFORMANCE_OPTIONS`, a tuple of `mixer_options` variants
  (each a tuple of (name, value) pairs) that the harness runs separately; the default is `((),)`,
  i.e. the mixer's defaults only. Keep the variants few: each one reruns the whole harness.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias, TypeVar, runtime_checkable

import jax

from icml26zoo.layers.options import build_options, option_values

if TYPE_CHECKING:
    from icml26zoo.models.config import ModelConfig

T = TypeVar("T")

DEFAULT_CONFORMANCE_OPTIONS: tuple[tuple[tuple[str, Any], ...], ...] = ((),)

# The names every mixer's `__call__` signature uses (semantics in the module docstring).
# [B, T] int32 segment ids of packed sequences (0 marks padding), or None for one sequence per row.
SegmentIds: TypeAlias = jax.Array | None
# [B, T] int32 position of each token inside its segment (decoding: absolute position). The backbone always
# passes them; None only reaches mixers that do not use them, and those that do declare it required.
Positions: TypeAlias = jax.Array | None
# The dict of arrays `init_cache` makes (KV buffers, recurrent states, a write index), or None (training).
MixerCache: TypeAlias = dict[str, jax.Array] | None
# (y [B, T, D] in the compute dtype, the cache after appending the T tokens or None without a cache).
MixerOutput: TypeAlias = tuple[jax.Array, MixerCache]


@runtime_checkable
class SequenceMixer(Protocol):
    """The interface of a registered sequence mixer (see the module docstring for the semantics)."""

    def __init__(self, cfg: ModelConfig, *, rngs: Any) -> None: ...

    def __call__(
        self, x: jax.Array, *, segment_ids: SegmentIds = None, positions: Positions = None, cache: MixerCache = None
    ) -> MixerOutput: ...

    def init_cache(self, batch_size: int, max_len: int, dtype: Any) -> Any: ...


def conformance_options(mixer_cls: type) -> tuple[tuple[tuple[str, Any], ...], ...]:
    """The `mixer_options` variants the conformance harness runs for `mixer_cls`."""
    return tuple(getattr(mixer_cls, "CONFORMANCE_OPTIONS", DEFAULT_CONFORMANCE_OPTIONS))


def check_mixer_inputs(
    x: jax.Array, segment_ids: jax.Array | None, positions: jax.Array | None, d_model: int, cache: Any = None
) -> None:
    """Raises ValueError unless x is [B, T, d_model] and segment_ids/positions are None or int [B, T].

    Decoding from a cache takes no segment_ids: a cache holds one sequence per row.
    """
    if cache is not None and segment_ids is not None:
        raise ValueError(f"segment_ids must be None when decoding with a cache, got shape {segment_ids.shape}")
    if x.ndim != 3 or x.shape[-1] != d_model:
        raise ValueError(f"x must have shape [B, T, {d_model}], got shape {x.shape}")
    for name, arr in (("segment_ids", segment_ids), ("positions", positions)):
        if arr is None:
            continue
        if arr.shape != x.shape[:2] or not jax.numpy.issubdtype(arr.dtype, jax.numpy.integer):
            raise ValueError(
                f"{name} must be an integer array of shape {x.shape[:2]} (x is [B, T, D] = {x.shape}), "
                f"got {arr.dtype} {arr.shape}"
            )


def check_cache(
    mixer: SequenceMixer, cache: Any, batch_size: int, *, length_of: tuple[str, int] | None = None
) -> None:
    """Raises ValueError unless `cache` has the entries and shapes `mixer.init_cache` makes for batch_size.

    A cache whose buffers grow with max_len (KV buffers) names the entry and axis that hold it in
    `length_of`, e.g. ("k", 1) for k [B, S, Hkv, Dh]; a recurrent state has no length. Only shapes are
    compared (`jax.eval_shape`: nothing is allocated), not dtypes: a cache may be kept in another dtype.
    """
    name, axis = length_of if length_of is not None else (None, 0)
    if not isinstance(cache, dict) or (name is not None and name not in cache):
        raise ValueError(f"cache must be the dict made by init_cache, got {type(cache).__name__} {cache!r}")
    max_len = 1 if name is None else jax.numpy.shape(cache[name])[axis]
    made = jax.eval_shape(lambda: mixer.init_cache(batch_size, max_len, jax.numpy.float32))
    expected = {key: tuple(value.shape) for key, value in made.items()}
    actual = {key: tuple(jax.numpy.shape(cache[key])) for key in sorted(cache)}
    if actual != expected:
        raise ValueError(f"cache must have entries {expected} (from init_cache), got {actual}")


def check_call(
    mixer: Any, x: jax.Array, segment_ids: jax.Array | None, positions: jax.Array | None, cache: Any,
    *, length_of: tuple[str, int] | None = None,
) -> None:
    """What every mixer checks first: `check_mixer_inputs` against `mixer.d_model`, then, when decoding,
    `check_cache` (`length_of` as there)."""
    check_mixer_inputs(x, segment_ids, positions, mixer.d_model, cache)
    if cache is not None:
        check_cache(mixer, cache, x.shape[0], length_of=length_of)


def read_mixer_options(cfg: Any, mixer: str, cls: type, *, exclude: Collection[str] = ()) -> dict[str, Any]:
    """The fields of options dataclass `cls` (less `exclude`) read from `cfg.mixer_options`, type-checked.

    An unknown name raises ValueError naming the mixer and the name and listing the valid ones (see
    `zoo.layers.options.option_values`); the mixer then checks ranges and builds `cls(**values)`.
    """
    return option_values(cls, cfg.mixer_options, owner=f"{mixer} mixer", exclude=exclude)


def mixer_options(cfg: Any, mixer: str, cls: type[T]) -> T:
    """The typed options `cls` of `mixer` read from `cfg.mixer_options` (for options without range checks)."""
    return build_options(cls, cfg.mixer_options, owner=f"{mixer} mixer")
