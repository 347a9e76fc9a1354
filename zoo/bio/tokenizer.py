"""`protein_tokenizer`: the global, coarse-to-fine Cα structure tokenizer of "Adaptive Protein Tokenization"
(Dilip, Varshney, Van Valen; arXiv 2602.06418), with a regression decoder in place of the paper's flow decoder.

Encoder (as the paper; checked against rdilip/apt apt/dae.py at commit 812ff93492d6dd630b2af51db64755993b19737c):
  per-residue lift Linear(3 → C), SiLU, Linear(C → C), LayerNorm, plus a learned index embedding of positions
  0..max_seq_len−1; cfg.num_layers bidirectional pre-norm transformer blocks over the real residues (no other
  positional encoding), so every output position summarises the whole structure; FSQ (icml26zoo.vq.FSQ:
  C → len(levels) → C) on the first T = min(N, n_tokens) positions, which are the tokens; Linear(C → C) to the
  decoder's input. Token i of a chain exists only when i < L (a chain of L < n_tokens residues has L tokens).
Nested dropout (as the paper): during training each chain keeps a prefix of k tokens, k ~ UniformInt[min_tokens,
  min(L, n_tokens)), and every token from k on is zeroed; with probability drop_all_probability all are zeroed.
  Early tokens must then carry the coarse global shape and later ones the detail: decoding reads any prefix.
Decoder (DEVIATION, swappable: the paper's decoder is a flow-matching DiT sampled with ~100 SDE steps): the
  paper's in-context conditioning without the flow. N residue queries (a learned index embedding of 0..N−1) are
  concatenated with the T (partly zeroed) tokens, a 2-entry type embedding marks which is which, and
  `decoder_layers` bidirectional blocks attend over the real residues and the existing tokens; a LayerNorm and
  Linear(C → 3) at the query positions regress the Cα coordinates directly. One forward pass decodes a prefix
  (the mean structure given the tokens, not a sample from it).

Bottleneck: FSQ (the paper's; option bottleneck="fsq") or nearest-codebook VQ (bottleneck="vq": Linear(C → d),
a learned codebook of num_codes vectors with the straight-through estimator, Linear(d → C), d = len(levels);
its codebook + commitment loss is returned by `encode_with_loss` for the objective to add).

model(points [B, N, 3], features [B, N, 0], weights [B, N], *, keep=None) -> coordinates [B, N, 3]; keep int [B]
(default: every existing token) is the prefix decoded. `encode` and `decode` expose the two halves.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from flax import nnx

from icml26zoo.bio.structure import check_structures, nested_dropout_keep, prefix_mask, token_counts
from icml26zoo.geometric.baseline import Block
from icml26zoo.models.config import MODEL_OPTIONS_FIELD, ModelConfig, parse_model_options
from icml26zoo.registry import register_model
from icml26zoo.validation import check_bool, check_choice, check_int, check_non_negative, check_probability
from icml26zoo.vq import FSQ, VectorQuantizer, check_codebook_size, check_levels

BOTTLENECKS = ("fsq", "vq")


@dataclasses.dataclass(frozen=True)
class ProteinTokenizerOptions:
    """The protein_tokenizer's options (ModelConfig.model_options); sizes from ModelConfig: d_model = C (encoder
    and decoder width), num_layers (encoder blocks), num_heads, mlp_dim, max_seq_len (the longest chain)."""

    # FSQ levels per token channel; (8, 5, 5, 5) gives 1000 codes (the paper's default (8, 8, 8, 8): 4096).
    levels: tuple[int, ...] = (8, 5, 5, 5)
    # Tokens per structure (the first n_tokens encoder positions).
    n_tokens: int = 32
    decoder_layers: int = 2
    # Train with nested dropout (the paper); False trains on every token (the ablation baseline).
    nested_dropout: bool = True
    # Fewest tokens nested dropout keeps (the paper's n_size_toks = 1).
    min_tokens: int = 1
    # Probability of zeroing every token of a chain during training (the paper's 0.05, for guidance).
    drop_all_probability: float = 0.05
    # "fsq" (the paper) or "vq" (a learned codebook of num_codes vectors of len(levels) channels).
    bottleneck: str = "fsq"
    num_codes: int = 1024
    # VQ's β: the weight of the commitment loss beside the codebook loss.
    commitment_cost: float = 0.25

    def __post_init__(self) -> None:
        owner = f"{MODEL_OPTIONS_FIELD}: protein_tokenizer option"
        object.__setattr__(self, "levels", check_levels(self.levels, f"{owner} 'levels'"))
        check_int(f"{owner} 'n_tokens'", self.n_tokens)
        check_int(f"{owner} 'decoder_layers'", self.decoder_layers)
        check_bool(f"{owner} 'nested_dropout'", self.nested_dropout)
        check_int(f"{owner} 'min_tokens'", self.min_tokens, minimum=0, maximum=self.n_tokens - 1)
        check_probability(f"{owner} 'drop_all_probability'", self.drop_all_probability)
        check_choice(f"{owner} 'bottleneck'", self.bottleneck, BOTTLENECKS)
        check_codebook_size(self.num_codes, f"{owner} 'num_codes'")
        check_non_negative(f"{owner} 'commitment_cost'", self.commitment_cost, finite=True)


@register_model("protein_tokenizer")
class ProteinTokenizer(nnx.Module):
    """Encoder + FSQ + prefix decoder (module docstring)."""

    LANGUAGE_MODEL = False
    options_class = ProteinTokenizerOptions

    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs) -> None:
        self.options = parse_model_options(ProteinTokenizerOptions, cfg, owner="protein_tokenizer model")
        width, heads, mlp = cfg.d_model, cfg.num_heads, cfg.resolved_mlp_dim
        self.max_len = cfg.max_seq_len
        self.lift_in = nnx.Linear(3, width, rngs=rngs)
        self.lift_out = nnx.Linear(width, width, rngs=rngs)
        self.lift_norm = nnx.LayerNorm(width, rngs=rngs)
        self.residue_index = nnx.Embed(self.max_len, width, rngs=rngs)
        self.encoder = nnx.List([Block(width, heads, mlp, rngs=rngs) for _ in range(cfg.num_layers)])
        if self.options.bottleneck == "fsq":
            self.fsq = FSQ(width, self.options.levels, rngs=rngs)
        else:
            code_dim = len(self.options.levels)
            self.vq_in = nnx.Linear(width, code_dim, rngs=rngs)
            self.vq = VectorQuantizer(self.options.num_codes, code_dim, commitment_cost=self.options.commitment_cost,
                                      rngs=rngs)
            self.vq_out = nnx.Linear(code_dim, width, rngs=rngs)
        self.to_decoder = nnx.Linear(width, width, rngs=rngs)
        self.query_index = nnx.Embed(self.max_len, width, rngs=rngs)
        self.kind = nnx.Embed(2, width, rngs=rngs)  # 0: residue query, 1: token
        self.decoder = nnx.List([Block(width, heads, mlp, rngs=rngs) for _ in range(self.options.decoder_layers)])
        self.out_norm = nnx.LayerNorm(width, rngs=rngs)
        self.head = nnx.Linear(width, 3, rngs=rngs)

    @property
    def codebook_size(self) -> int:
        return self.fsq.codebook_size if self.options.bottleneck == "fsq" else self.options.num_codes

    def num_tokens(self, num_residues: int) -> int:
        """T, the token positions of a batch padded to num_residues: min(N, n_tokens)."""
        return min(num_residues, self.options.n_tokens)

    def _check(self, points: jax.Array, weights: jax.Array) -> None:
        check_structures(points, weights, "points")
        if points.shape[1] > self.max_len:
            raise ValueError(f"points must have at most model.max_seq_len = {self.max_len} residues, got shape "
                             f"{list(points.shape)}")

    def encode(self, points: jax.Array, weights: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
        """(quantised tokens [B, T, C], codes [B, T, len(levels)], indices int32 [B, T]) of Cα chains."""
        return self.encode_with_loss(points, weights)[:3]

    def encode_with_loss(self, points: jax.Array, weights: jax.Array
                         ) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
        """`encode`'s three outputs and the bottleneck's own loss (VQ: codebook + β·commitment over the tokens that
        exist; FSQ: 0)."""
        self._check(points, weights)
        positions = jnp.arange(points.shape[1])
        x = self.lift_norm(self.lift_out(jax.nn.silu(self.lift_in(points.astype(jnp.float32)))))
        x = x + self.residue_index(positions)[None]
        for block in self.encoder:
            x = block(x, weights)
        x = x[:, : self.num_tokens(points.shape[1])]
        if self.options.bottleneck == "fsq":
            return (*self.fsq(x), jnp.zeros((), jnp.float32))
        exists = prefix_mask(token_counts(weights, self.options.n_tokens), x.shape[1])
        quantized = self.vq(self.vq_in(x), exists)
        return self.vq_out(quantized.quantized), quantized.quantized, quantized.indices, quantized.loss

    def decode(self, tokens: jax.Array, weights: jax.Array, keep: jax.Array | None = None) -> jax.Array:
        """Coordinates [B, N, 3] from quantised tokens [B, T, C], the chains' weights [B, N] and the prefix kept
        per row, keep int [B] (tokens from keep on are zeroed; None keeps every existing token)."""
        batch, num_residues = weights.shape
        count = tokens.shape[1]
        exists = token_counts(weights, self.options.n_tokens)
        keep = exists if keep is None else jnp.minimum(jnp.asarray(keep, jnp.int32), exists)
        context = self.to_decoder(tokens) * prefix_mask(keep, count)[..., None]
        queries = jnp.broadcast_to(self.query_index(jnp.arange(num_residues))[None],
                                   (batch, num_residues, context.shape[-1]))
        x = jnp.concatenate([queries + self.kind(jnp.zeros((), jnp.int32)),
                             context + self.kind(jnp.ones((), jnp.int32))], axis=1)
        # Keys: the real residues and the tokens that exist (zeroed ones included, as the paper's decoder sees).
        key_weights = jnp.concatenate([(weights > 0).astype(jnp.float32), prefix_mask(exists, count)], axis=1)
        for block in self.decoder:
            x = block(x, key_weights)
        return self.head(self.out_norm(x[:, :num_residues]))

    def training_keep(self, key: jax.Array, weights: jax.Array) -> jax.Array | None:
        """The prefix kept per row in a training step: nested dropout's cut-offs, or None (every token) when the
        option nested_dropout is off."""
        if not self.options.nested_dropout:
            return None
        return nested_dropout_keep(key, weights, self.options.n_tokens, min_tokens=self.options.min_tokens,
                                   drop_all_probability=self.options.drop_all_probability)

    def __call__(self, points: jax.Array, features: jax.Array, weights: jax.Array, *,
                 keep: jax.Array | None = None) -> jax.Array:
        del features  # Cα coordinates only.
        tokens, _, _ = self.encode(points, weights)
        return self.decode(tokens, weights, keep)
