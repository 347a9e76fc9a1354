"""GeoCoupling's reference denoiser, the registered model `geocoupling_denoiser`.

model(x_t [B, N, 3], s_t int [B, N] in 0..K (K = MASK), t [B, 2], mask [B, N]) -> (x1_hat [B, N, 3],
logits [B, N, K]). Residues are the zoo's T axis. Each residue embeds its noisy coordinates (Linear 3 → C), its
token (K + 1 entries), its index, and both modality times: two sinusoidal embeddings (t_x and t_s, each
`time_features` wide), concatenated and projected (Linear → C), so changing t_s alone changes the outputs (a
denoiser that sees one time would make off-diagonal training meaningless). Then `num_layers` pre-norm transformer
blocks over the real residues whose attention logits carry a per-head bias from an RBF expansion of the
pairwise distances of x_t (`rbf_centres` Gaussians on [0, rbf_max]); a LayerNorm and two heads predict the clean
coordinates (x_t plus a predicted update) and the token logits. A reconstruction: GeoCoupling's networks are not
public; its precursor and MultiFlow use far larger SE(3) networks.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from flax import nnx

from icml26zoo.models.config import MODEL_OPTIONS_FIELD, ModelConfig, parse_model_options
from icml26zoo.registry import register_model
from icml26zoo.validation import check_int, check_positive

__all__ = ["GeoCouplingDenoiser", "GeoCouplingDenoiserOptions", "time_embedding"]


@dataclasses.dataclass(frozen=True)
class GeoCouplingDenoiserOptions:
    """Options of model geocoupling_denoiser (ModelConfig.model_options); sizes from ModelConfig: d_model,
    num_layers, num_heads, mlp_dim, max_seq_len (the most residues)."""

    # K, the sequence alphabet (MASK is token K).
    num_tokens: int = 4
    rbf_centres: int = 16
    # Largest distance the RBF expansion resolves (data units).
    rbf_max: float = 6.0
    # Width of each time's sinusoidal embedding.
    time_features: int = 32

    def __post_init__(self) -> None:
        owner = f"{MODEL_OPTIONS_FIELD}: geocoupling_denoiser option"
        check_int(f"{owner} 'num_tokens'", self.num_tokens, minimum=2)
        check_int(f"{owner} 'rbf_centres'", self.rbf_centres)
        check_positive(f"{owner} 'rbf_max'", self.rbf_max, finite=True)
        check_int(f"{owner} 'time_features'", self.time_features, minimum=2)
        if self.time_features % 2:
            raise ValueError(f"{owner} 'time_features' must be even, got {self.time_features}")


def time_embedding(t: jax.Array, features: int) -> jax.Array:
    """Sinusoidal embedding [B, features] of times t [B] in [0, 1] (frequencies 1 .. 1000, geometric)."""
    frequencies = jnp.exp(jnp.linspace(0.0, jnp.log(1000.0), features // 2))
    angles = t[:, None] * frequencies[None]
    return jnp.concatenate([jnp.sin(angles), jnp.cos(angles)], axis=-1)


class _BiasedBlock(nnx.Module):
    """Pre-norm block: x + attention(norm(x)) with an additive per-head logit bias, then x + MLP(norm(x))."""

    def __init__(self, width: int, heads: int, mlp: int, *, rngs: nnx.Rngs) -> None:
        if width % heads:
            raise ValueError(f"d_model ({width}) must be divisible by num_heads ({heads})")
        self.heads = heads
        self.attention_norm = nnx.LayerNorm(width, rngs=rngs)
        self.qkv = nnx.Linear(width, 3 * width, rngs=rngs)
        self.out = nnx.Linear(width, width, rngs=rngs)
        self.mlp_norm = nnx.LayerNorm(width, rngs=rngs)
        self.up = nnx.Linear(width, mlp, rngs=rngs)
        self.down = nnx.Linear(mlp, width, rngs=rngs)

    def __call__(self, x: jax.Array, bias: jax.Array, keys: jax.Array) -> jax.Array:
        """x [B, N, C], bias [B, H, N, N], keys bool [B, N] (residues that may be attended to)."""
        batch, length, width = x.shape
        q, k, v = jnp.split(self.qkv(self.attention_norm(x)), 3, axis=-1)
        shape = (batch, length, self.heads, width // self.heads)
        q, k, v = (a.reshape(shape) for a in (q, k, v))
        logits = jnp.einsum("bqhd,bkhd->bhqk", q, k) / jnp.sqrt(shape[-1]) + bias
        # Mask before the softmax's exp: a padding key gets a large negative logit.
        logits = jnp.where(keys[:, None, None, :], logits, -1e9)
        attended = jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(logits, axis=-1), v).reshape(x.shape)
        x = x + self.out(attended)
        return x + self.down(jax.nn.gelu(self.up(self.mlp_norm(x))))


@register_model("geocoupling_denoiser")
class GeoCouplingDenoiser(nnx.Module):
    """The two-time co-design denoiser (module docstring)."""

    LANGUAGE_MODEL = False
    options_class = GeoCouplingDenoiserOptions

    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs) -> None:
        self.options = options = parse_model_options(GeoCouplingDenoiserOptions, cfg,
                                                     owner="geocoupling_denoiser model")
        width, heads = cfg.d_model, cfg.num_heads
        self.max_len = cfg.max_seq_len
        self.coordinates = nnx.Linear(3, width, rngs=rngs)
        self.tokens = nnx.Embed(options.num_tokens + 1, width, rngs=rngs)
        self.index = nnx.Embed(cfg.max_seq_len, width, rngs=rngs)
        self.times = nnx.Linear(2 * options.time_features, width, rngs=rngs)
        self.distance_bias = nnx.Linear(options.rbf_centres, heads, rngs=rngs)
        self.blocks = nnx.List([_BiasedBlock(width, heads, cfg.resolved_mlp_dim, rngs=rngs)
                                for _ in range(cfg.num_layers)])
        self.final_norm = nnx.LayerNorm(width, rngs=rngs)
        self.structure_head = nnx.Linear(width, 3, rngs=rngs)
        self.sequence_head = nnx.Linear(width, options.num_tokens, rngs=rngs)

    @property
    def num_tokens(self) -> int:
        return self.options.num_tokens

    def _distance_bias(self, x: jax.Array) -> jax.Array:
        """Per-head logit bias [B, H, N, N] from RBF features of the pairwise distances of x [B, N, 3]."""
        distance = jnp.sqrt(jnp.sum(jnp.square(x[:, :, None] - x[:, None]), axis=-1) + 1e-9)
        centres = jnp.linspace(0.0, self.options.rbf_max, self.options.rbf_centres)
        width = self.options.rbf_max / self.options.rbf_centres
        features = jnp.exp(-0.5 * jnp.square((distance[..., None] - centres) / width))
        return jnp.moveaxis(self.distance_bias(features), -1, 1)

    def __call__(self, x_t: jax.Array, s_t: jax.Array, t: jax.Array, mask: jax.Array
                 ) -> tuple[jax.Array, jax.Array]:
        batch, length = s_t.shape
        if x_t.shape != (batch, length, 3) or t.shape != (batch, 2) or mask.shape != (batch, length):
            raise ValueError(f"x_t must be [B, N, 3], s_t and mask [B, N], t [B, 2]; got x_t {list(x_t.shape)}, "
                             f"s_t {list(s_t.shape)}, t {list(t.shape)}, mask {list(mask.shape)}")
        if length > self.max_len:
            raise ValueError(f"s_t must have at most model.max_seq_len = {self.max_len} residues, got {length}")
        x_t = x_t.astype(jnp.float32)
        features = self.options.time_features
        times = jnp.concatenate([time_embedding(t[:, 0], features), time_embedding(t[:, 1], features)], axis=-1)
        h = (self.coordinates(x_t) + self.tokens(s_t) + self.index(jnp.arange(length))[None]
             + self.times(times)[:, None])
        bias, keys = self._distance_bias(x_t), mask > 0
        for block in self.blocks:
            h = block(h, bias, keys)
        h = self.final_norm(h)
        return x_t + self.structure_head(h), self.sequence_head(h)
