"""The looped transformer ("looped"): a weight-tied block of layers applied a number of times that may grow
with the input length (Jerad et al., "Context-free Recognition with Transformers", arXiv 2601.01754).

    h = prelude(E(x))                               prelude_layers untied Blocks, run once
    for i in 0 .. T - 1:  h = core(h + [i > 0] E(x))   num_layers Blocks, the same weights every iteration
    logits = head(final_norm(h))

T is model option `loops`: an integer, or "log2" (T = ⌈c·log₂ n⌉) or "linear" (T = ⌈c·n⌉) of the row length n
the model is called on, with c = `loop_multiplier` (at least 1 loop). The embedded input is re-injected before
every iteration after the first (option `reinject`), the usual practice that keeps deep loops trainable.

Padding is the dataset's: the formal-language rows (`train.data.formal_languages`) put P `<pad>` tokens between
the string and `<cls>`; they are ordinary tokens with their own embedding, attended to like any other, so they
add compute positions. The objective `membership` reads the class at `<cls>`.

Reconstruction and deviations (the paper's code is not public): the zoo's looped model is causal (every
registered mixer is), not the paper's encoder with bidirectional or mixed heads; since `<cls>` comes last, its
state still depends on the whole string and the padding. Positions are the mixers' own (RoPE for attention),
not learned absolute embeddings, and there is no loop-index embedding. Any registered mixer can be the core's.

Decoding: each iteration keeps its own caches (the iterations see different inputs), so `init_cache` holds
T × num_layers mixer caches with T the loop count of `max_len`; `decode` then equals the forward of a row of
`max_len` tokens (on its first tokens: the model is causal), which is the forward of the tokens so far
whenever T does not depend on the length (integer `loops`).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from icml26zoo.models.block import Block, init_layer_caches, run_layers
from icml26zoo.models.config import MODEL_OPTIONS_FIELD, ModelConfig, parse_model_options
from icml26zoo.models.lm import (
    DecodeCache,
    DecoderLM,
    check_token_arrays,
    decode_positions,
    positions_from_segments,
)
from icml26zoo.registry import register_model
from icml26zoo.validation import check_int, check_positive, is_integer

FIELD = MODEL_OPTIONS_FIELD
LOOP_SCHEDULES = ("log2", "linear")
# A bound on the loop count: each iteration is a full pass of the core, so a larger count is a typo.
MAX_LOOPS = 1024


@dataclasses.dataclass(frozen=True)
class LoopedOptions:
    """The looped model's options (ModelConfig.model_options): loop count or schedule, prelude depth, re-injection."""

    # Iterations T of the core: an int >= 1, or "log2" / "linear" in the row length n.
    loops: int | str = 2
    # c in T = ⌈c·log₂ n⌉ or ⌈c·n⌉ (ignored for an integer `loops`).
    loop_multiplier: float = 1.0
    # Untied Blocks before the loop (the spec's prelude).
    prelude_layers: int = 1
    # Add the embedded input to the state before every iteration after the first.
    reinject: bool = True

    def __post_init__(self) -> None:
        if is_integer(self.loops):
            check_int(f"{FIELD} option 'loops'", self.loops, maximum=MAX_LOOPS)
        elif self.loops not in LOOP_SCHEDULES:
            raise ValueError(
                f"{FIELD} option 'loops' must be an integer or one of {list(LOOP_SCHEDULES)}, got {self.loops!r}"
            )
        check_positive(f"{FIELD} option 'loop_multiplier'", self.loop_multiplier, finite=True)
        check_int(f"{FIELD} option 'prelude_layers'", self.prelude_layers, minimum=0)

    def num_loops(self, length: int) -> int:
        """The loop count T for rows of `length` tokens (>= 1)."""
        if not isinstance(self.loops, str):
            return self.loops
        scale = math.log2(max(length, 1)) if self.loops == "log2" else float(length)
        return min(MAX_LOOPS, max(1, math.ceil(self.loop_multiplier * scale)))


def looped_options(cfg: ModelConfig) -> LoopedOptions:
    """cfg.model_options as LoopedOptions; ValueError naming model.model_options."""
    return parse_model_options(LoopedOptions, cfg, owner="looped model")


@register_model("looped")
class LoopedLM(DecoderLM):
    """Embedding -> prelude Blocks -> T × (the same num_layers Blocks) -> final norm -> head.

    `layers` is the weight-tied core (scanned or unrolled like the "llama" stack, so its layout converts the
    same way); `prelude` is an `nnx.List` of untied Blocks. Logits [B, T, vocab] float32.
    """

    options_class = LoopedOptions
    # The conformance harness's case (tests/zoo/test_conformance.py): one tied layer looped twice after a prelude.
    CONFORMANCE_CONFIGS = ({"mixer": "attention", "num_layers": 1, "model_options": (("loops", 2),)},)

    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs) -> None:
        self.options = looped_options(cfg)
        super().__init__(cfg, rngs=rngs)
        self.prelude = nnx.List([Block(cfg, rngs=rngs) for _ in range(self.options.prelude_layers)])

    def forward_embeddings(
        self, x: jax.Array, *, segment_ids: jax.Array | None = None, positions: jax.Array | None = None
    ) -> jax.Array:
        """x [B, T, D] embedded tokens -> logits [B, T, vocab] float32 (loop count from T)."""
        if x.ndim != 3 or x.shape[-1] != self.cfg.d_model:
            raise ValueError(f"x must have shape [B, T, {self.cfg.d_model}], got shape {x.shape}")
        check_token_arrays(x.shape[:2], segment_ids=segment_ids, positions=positions)
        if positions is None:
            positions = (
                jnp.broadcast_to(jnp.arange(x.shape[1], dtype=jnp.int32), x.shape[:2])
                if segment_ids is None
                else positions_from_segments(segment_ids)
            )
        x = x.astype(jnp.dtype(self.cfg.compute_dtype))
        loops = self.options.num_loops(x.shape[1])
        h, _ = self.run(x, loops=loops, segment_ids=segment_ids, positions=positions)
        return self.logits_from_hidden(h)

    def run(
        self, embedded: jax.Array, *, loops: int, segment_ids: jax.Array | None, positions: jax.Array,
        caches: dict[str, Any] | None = None,
    ) -> tuple[jax.Array, dict[str, Any] | None]:
        """Prelude then `loops` core iterations on embedded [B, T, D]; returns (h [B, T, D], new caches or None).

        caches: {"prelude": one cache per prelude Block, "core": per-iteration core caches (leaves [loops, ...]
        when cfg.scan_layers, else a tuple of `loops`)}.
        """
        h, prelude_caches = embedded, []
        for i, layer in enumerate(self.prelude):
            h, cache = layer(h, segment_ids=segment_ids, positions=positions,
                             cache=None if caches is None else caches["prelude"][i])
            prelude_caches.append(cache)
        core_caches = None if caches is None else caches["core"]
        h, core_caches = self._loop(h, embedded, loops, segment_ids, positions, core_caches)
        return h, None if caches is None else {"prelude": tuple(prelude_caches), "core": core_caches}

    def _loop(self, h, embedded, loops, segment_ids, positions, caches):
        reinject = self.options.reinject

        def iteration(layers, h, index, cache):
            if reinject:
                # index 0 adds exact zeros, so one loop with no prelude is the plain "llama" stack.
                h = h + (index > 0).astype(h.dtype) * embedded
            return run_layers(layers, h, cfg=self.cfg, segment_ids=segment_ids, positions=positions, caches=cache)

        if not self.cfg.scan_layers:
            new_caches = []
            for index in range(loops):
                h, cache = iteration(self.layers, h, jnp.int32(index), None if caches is None else caches[index])
                new_caches.append(cache)
            return h, None if caches is None else tuple(new_caches)

        # One scan over iterations around the scan over layers: the program does not grow with T or depth.
        graphdef, state = nnx.split(self.layers)

        def body(h, inputs):
            index, cache = inputs
            return iteration(nnx.merge(graphdef, state), h, index, cache)

        h, new_caches = jax.lax.scan(body, h, (jnp.arange(loops, dtype=jnp.int32), caches))
        return h, new_caches

    def init_cache(self, batch_size: int, max_len: int | None = None) -> DecodeCache:
        """An empty cache: per prelude Block, and per loop iteration (T from max_len) and core layer."""
        empty = super().init_cache(batch_size, max_len)
        loops = self.options.num_loops(empty.max_len)
        one = init_layer_caches(self.layers, self.cfg, batch_size, empty.max_len)
        if self.cfg.scan_layers:
            core = jax.tree.map(lambda a: jnp.broadcast_to(a, (loops, *a.shape)), one)
        else:
            core = tuple(one for _ in range(loops))
        dtype = jnp.dtype(self.cfg.compute_dtype)
        prelude = tuple(layer.mixer.init_cache(batch_size, empty.max_len, dtype) for layer in self.prelude)
        return empty.replace(layers={"prelude": prelude, "core": core})

    def decode(self, tokens: jax.Array, cache: DecodeCache) -> tuple[jax.Array, DecodeCache]:
        """Appends tokens [B, T'] to the cache; (logits [B, T', vocab] float32, new cache). See the module doc."""
        positions = decode_positions(tokens, cache)
        x = self.embed(tokens).astype(jnp.dtype(self.cfg.compute_dtype))
        loops = self.options.num_loops(cache.max_len)
        h, layers = self.run(x, loops=loops, segment_ids=None, positions=positions, caches=cache.layers)
        new_cache = cache.replace(index=cache.index + jnp.asarray(tokens.shape[1], jnp.int32), layers=layers)
        return self.logits_from_hidden(h), new_cache
