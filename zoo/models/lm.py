"""The baseline decoder-only language model ("llama"): mixer-agnostic, RoPE, SwiGLU, RMSNorm."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx, struct

from icml26zoo.layers.embed import EMBED_INIT_STD, Embedding
from icml26zoo.layers.norms import build_norm
from icml26zoo.models.block import build_layers, init_layer_caches, run_layers
from icml26zoo.models.config import ModelConfig
from icml26zoo.registry import register_model
from icml26zoo.validation import check_int, check_int_array

# Placements whose blocks do not already end in a norm get a final norm (cfg.norm) before the head. "post"
# blocks end in one (the original Transformer has no final norm), and "none" is the norm-free ablation.
FINAL_NORM_PLACEMENTS = ("pre", "sandwich")


@struct.dataclass
class DecodeCache:
    """Decoding state: the next write position, the per-layer mixer caches, and static sizes.

    `layers` is stacked over layers (leaves [L, ...]) when cfg.scan_layers, else a tuple of L caches.
    A pytree: it passes through `jax.jit` and `lax.scan`; `batch_size` and `max_len` are static.
    """

    index: jax.Array  # int32 scalar: number of tokens already in the cache
    layers: Any
    batch_size: int = struct.field(pytree_node=False)
    max_len: int = struct.field(pytree_node=False)


def positions_from_segments(segment_ids: jax.Array) -> jax.Array:
    """[B, T] int32 position of each token inside its segment (restarts at 0 where the id changes)."""
    length = segment_ids.shape[1]
    steps = jnp.broadcast_to(jnp.arange(length, dtype=jnp.int32), segment_ids.shape)
    is_start = jnp.concatenate(
        [jnp.ones_like(segment_ids[:, :1], dtype=jnp.bool_), segment_ids[:, 1:] != segment_ids[:, :-1]],
        axis=1,
    )
    segment_start = jax.lax.cummax(jnp.where(is_start, steps, 0), axis=1)
    return steps - segment_start


def check_tokens(tokens: Any) -> None:
    """ValueError unless tokens is an integer array [B, T]."""
    check_int_array("tokens", tokens, (None, None), "[B, T]")


def check_token_arrays(shape: tuple[int, ...], **arrays: Any) -> None:
    """ValueError naming the array unless each one given (None: skipped), e.g. segment_ids and positions, is
    an integer array with one entry per token: `shape` = the tokens' [B, T]."""
    for name, array in arrays.items():
        if array is not None:
            check_int_array(name, array, shape, "[B, T]")


def decode_positions(tokens: jax.Array, cache: DecodeCache) -> jax.Array:
    """Checks tokens [B, T'] against the decode cache; returns their positions [B, T'] int32 (index + i).

    Overflowing max_len raises ValueError when the index is concrete; under jit it cannot be checked and the
    caller must keep index + T' ≤ max_len.
    """
    check_tokens(tokens)
    if not isinstance(cache, DecodeCache):
        raise ValueError(f"cache must be a DecodeCache from init_cache, got {type(cache).__name__}")
    batch, length = tokens.shape
    if batch != cache.batch_size or length > cache.max_len:
        raise ValueError(
            f"tokens must have shape [B, T'] with B = {cache.batch_size} and "
            f"T' <= max_len = {cache.max_len} (the cache's), got shape {tokens.shape}"
        )
    if not isinstance(cache.index, jax.core.Tracer) and int(cache.index) + length > cache.max_len:
        raise ValueError(
            f"tokens of shape {tokens.shape} do not fit: the cache holds {int(cache.index)} of "
            f"max_len = {cache.max_len} tokens"
        )
    return jnp.broadcast_to(cache.index + jnp.arange(length, dtype=jnp.int32), tokens.shape)


def _head_init(rngs: nnx.Rngs, d_model: int, vocab_size: int) -> jax.Array:
    """[d_model, vocab_size] float32, the same scale as the embedding table a tied head would use."""
    return jax.nn.initializers.normal(EMBED_INIT_STD)(rngs.params(), (d_model, vocab_size), jnp.float32)


@register_model("llama")
class DecoderLM(nnx.Module):
    """Embedding -> cfg.num_layers × Block(mixer, SwiGLU) -> final RMSNorm (pre/sandwich) -> head.

    Parameters are float32 `nnx.Param`s only; activations run in cfg.compute_dtype; logits are float32.
    """

    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs) -> None:
        self.cfg = cfg
        dtype = jnp.dtype(cfg.compute_dtype)
        self.embed = Embedding(cfg.vocab_size, cfg.d_model, dtype=dtype, rngs=rngs)
        self.layers = build_layers(cfg, rngs=rngs)
        self.final_norm = (
            build_norm(cfg.norm, cfg.d_model, eps=cfg.norm_eps)
            if cfg.norm_placement in FINAL_NORM_PLACEMENTS
            else None
        )
        # Untied head [D, vocab]; None when the embedding table doubles as the head.
        self.head = None if cfg.tie_embeddings else nnx.Param(_head_init(rngs, cfg.d_model, cfg.vocab_size))

    def __call__(
        self, tokens: jax.Array, *, segment_ids: jax.Array | None = None, positions: jax.Array | None = None
    ) -> jax.Array:
        """tokens [B, T] int -> logits [B, T, vocab] float32.

        segment_ids [B, T] int (packed sequences, 0 = padding) restricts attention to equal ids; positions
        [B, T] int default to the index inside each segment (arange(T) without segments).
        """
        check_tokens(tokens)
        return self.forward_embeddings(self.embed(tokens), segment_ids=segment_ids, positions=positions)

    def forward_embeddings(
        self, x: jax.Array, *, segment_ids: jax.Array | None = None, positions: jax.Array | None = None
    ) -> jax.Array:
        """The model after the embedding lookup: x [B, T, D] -> logits [B, T, vocab] float32.

        Exposed for inputs that are not tokens (soft prompts) and for gradient checks w.r.t. the inputs.
        """
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
        x, _ = run_layers(self.layers, x, cfg=self.cfg, segment_ids=segment_ids, positions=positions)
        return self.logits_from_hidden(x)

    def logits_from_hidden(self, x: jax.Array) -> jax.Array:
        """The final norm and the head: the last block's output x [B, T, D] -> logits [B, T, vocab] float32.

        Public for code that runs the blocks itself (e.g. to read their auxiliary outputs) and needs the
        model's own head; the matmul runs in the compute dtype with float32 accumulation.
        """
        if self.final_norm is not None:
            x = self.final_norm(x)
        if self.head is None:
            return self.embed.attend(x)
        kernel = self.head[...].astype(x.dtype)
        return jnp.einsum("btd,dv->btv", x, kernel, preferred_element_type=jnp.float32)

    # The former private name, still used by zoo.diagnostics.capture.
    _logits = logits_from_hidden

    def init_cache(self, batch_size: int, max_len: int | None = None) -> DecodeCache:
        """An empty decode cache for batch_size rows and at most max_len (default cfg.max_seq_len) tokens."""
        max_len = self.cfg.max_seq_len if max_len is None else max_len
        check_int("batch_size", batch_size)
        check_int("max_len", max_len)
        layers = init_layer_caches(self.layers, self.cfg, batch_size, max_len)
        return DecodeCache(
            index=jnp.zeros((), jnp.int32), layers=layers, batch_size=batch_size, max_len=max_len
        )

    def decode(self, tokens: jax.Array, cache: DecodeCache) -> tuple[jax.Array, DecodeCache]:
        """Appends tokens [B, T'] (T' ≥ 1) to the cache; returns (logits [B, T', vocab] float32, new cache).

        Token i gets position cache.index + i. Equal to the full forward over all tokens so far.
        Overflowing max_len raises ValueError when the index is concrete; under jit it cannot be checked
        and the caller must keep index + T' ≤ max_len.
        """
        positions = decode_positions(tokens, cache)
        x = self.embed(tokens)
        x, layer_caches = run_layers(
            self.layers, x, cfg=self.cfg, segment_ids=None, positions=positions, caches=cache.layers
        )
        new_cache = cache.replace(index=cache.index + jnp.asarray(tokens.shape[1], jnp.int32), layers=layer_caches)
        return self.logits_from_hidden(x), new_cache
