"""The architecture config shared by every registered language model."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, TypeVar

from icml26zoo.layers.options import build_options
from icml26zoo.moe.layer import MoEConfig
from icml26zoo.validation import check_choice, check_int, check_pairs, check_positive

NORM_PLACEMENTS = ("pre", "post", "sandwich", "none")
COMPUTE_DTYPES = ("float32", "bfloat16")
NORMS = ("rmsnorm", "dyt")
MLP_ACTIVATIONS = ("swiglu", "gelu")


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """Decoder-LM architecture. Every field is validated on construction (ValueError names the field)."""

    # Registered model name (zoo.registry.MODELS), e.g. "llama".
    name: str = "llama"
    # Registered sequence mixer used in every layer (zoo.registry.MIXERS), e.g. "attention".
    mixer: str = "attention"
    # Vocabulary size; 256 for the byte-level corpus. Must cover the dataset's vocabulary.
    vocab_size: int = 256
    # Residual stream width D.
    d_model: int = 256
    # Number of decoder layers.
    num_layers: int = 4
    # Query heads H.
    num_heads: int = 4
    # Key/value heads Hkv (GQA); must divide num_heads.
    num_kv_heads: int = 2
    # Per-head width; None means d_model // num_heads.
    head_dim: int | None = None
    # MLP hidden width; None means 8/3 * d_model rounded up to a multiple of 64 for SwiGLU and 4 * d_model
    # for GELU (equal parameter counts); 0 means no MLP sublayer (a block is then only its mixer, as in
    # Mamba's own backbone).
    mlp_dim: int | None = None
    # The MLP: "swiglu" (down(silu(gate x) * up x), Llama) or "gelu" (down(gelu(up x)), GPT-2).
    mlp_activation: str = "swiglu"
    # Where the norms sit around each sublayer: "pre", "post", "sandwich" or "none".
    norm_placement: str = "pre"
    # The block norm: "rmsnorm" or "dyt" (Dynamic Tanh, tanh(alpha x) * w + b; zoo.layers.norms.DyT).
    # DyT replaces the norms inside the blocks; the final norm before the head (pre/sandwich) stays RMSNorm.
    norm: str = "rmsnorm"
    # RMSNorm epsilon.
    norm_eps: float = 1e-6
    # RoPE base frequency.
    rope_theta: float = 10_000.0
    # Share the input embedding with the output head.
    tie_embeddings: bool = True
    # Scan over stacked layers (fast compile) instead of a Python loop.
    scan_layers: bool = True
    # Rematerialize each layer's activations in the backward pass.
    remat: bool = False
    # Dtype of activations and matmuls; parameters are always float32.
    compute_dtype: str = "float32"
    # Longest sequence a decode cache holds.
    max_seq_len: int = 1024
    # Extra mixer-specific options as (name, value) pairs, e.g. (("gate", "full"),).
    mixer_options: tuple[tuple[str, Any], ...] = ()
    # Options of the registered model cfg.name as (name, value) pairs, checked by the model against its typed
    # options dataclass, e.g. (("loops", "log2"),) for "looped" or (("pattern", "gated_deltanet,attention"),)
    # for "hybrid" (zoo.models.looped, zoo.models.hybrid). "llama" takes none.
    model_options: tuple[tuple[str, Any], ...] = ()
    # Mixture-of-experts feed-forward (`icml26zoo.moe.MoEConfig`): None keeps the dense MLP; a MoEConfig replaces
    # every block's MLP by moe.num_experts expert MLPs (activation mlp_activation, hidden width the resolved
    # mlp_dim), moe.top_k of them per token, chosen by the registered router moe.router. Its weights of the
    # routers' auxiliary losses are added by objective "lm_moe". Set from the command line with
    # `model.moe=default` (MoEConfig's defaults) and then its fields, e.g. `model.moe.num_experts=8`.
    # A "mahalanobis" router estimates its co-occurrence statistics from each batch (router option
    # statistics="batch", which the layers get when it is not given: `resolved_moe`), since a model carries
    # only parameters; "running" is rejected. Its routing then depends on the whole batch, so decoding does
    # not reproduce the forward.
    moe: MoEConfig | None = None

    def __post_init__(self) -> None:
        for name in ("vocab_size", "d_model", "num_layers", "num_heads", "num_kv_heads", "max_seq_len"):
            check_int(name, getattr(self, name))
        if self.head_dim is not None:
            check_int("head_dim", self.head_dim)
        if self.mlp_dim is not None:
            check_int("mlp_dim", self.mlp_dim, minimum=0)
        if self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"num_heads must be a multiple of num_kv_heads, got num_heads={self.num_heads}, "
                f"num_kv_heads={self.num_kv_heads}"
            )
        if self.head_dim is None and self.d_model % self.num_heads:
            raise ValueError(
                f"d_model must be divisible by num_heads when head_dim is None, got d_model={self.d_model}, "
                f"num_heads={self.num_heads}"
            )
        if self.resolved_head_dim % 2:
            raise ValueError(f"head_dim must be even for RoPE, got {self.resolved_head_dim}")
        check_choice("norm_placement", self.norm_placement, NORM_PLACEMENTS)
        check_choice("compute_dtype", self.compute_dtype, COMPUTE_DTYPES)
        check_choice("norm", self.norm, NORMS)
        check_choice("mlp_activation", self.mlp_activation, MLP_ACTIVATIONS)
        check_positive("norm_eps", self.norm_eps)
        check_positive("rope_theta", self.rope_theta)
        check_pairs("mixer_options", self.mixer_options)
        check_pairs("model_options", self.model_options)
        self._check_moe()

    def _check_moe(self) -> None:
        moe = self.moe
        if moe is None:
            return
        if not isinstance(moe, MoEConfig):
            raise ValueError(f"moe must be None or a MoEConfig, got {type(moe).__name__}")
        if self.mlp_dim == 0:
            raise ValueError("mlp_dim must not be 0 when moe is set (the experts replace the MLP), got 0")
        if moe.router == "mahalanobis" and dict(moe.router_options).get("statistics", "batch") != "batch":
            raise ValueError(
                "moe.router_options statistics must be 'batch' for the mahalanobis router in a model "
                f"(running statistics are state that a parameters-only model cannot carry), got {moe.router_options!r}"
            )

    @property
    def resolved_moe(self) -> MoEConfig | None:
        """The MoEConfig the model's layers run: `moe`, with router option statistics="batch" added for a
        "mahalanobis" router that does not set it (the only statistics a parameters-only model can use)."""
        moe = self.moe
        if moe is None or moe.router != "mahalanobis" or "statistics" in dict(moe.router_options):
            return moe
        return dataclasses.replace(moe, router_options=(("statistics", "batch"), *moe.router_options))

    @property
    def resolved_head_dim(self) -> int:
        return self.head_dim if self.head_dim is not None else self.d_model // self.num_heads

    @property
    def resolved_mlp_dim(self) -> int:
        if self.mlp_dim is not None:
            return self.mlp_dim
        if self.mlp_activation == "gelu":
            return 4 * self.d_model
        return -(-(8 * self.d_model // 3) // 64) * 64


MODEL_OPTIONS_FIELD = "model.model_options"
Options = TypeVar("Options")


def parse_model_options(options_class: type[Options], cfg: ModelConfig, *, owner: str,
                        fixed: Mapping[str, Any] | None = None) -> Options:
    """cfg.model_options as the model's typed options (defaults applied); ValueError naming model.model_options.

    `fixed`: fields the options may not set, given their values here (e.g. {"dim": cfg.d_model} for a model whose
    width is ModelConfig's, not an option).
    """
    fixed = dict(fixed or {})
    try:
        options = build_options(options_class, cfg.model_options, owner=owner, exclude=fixed)
        return dataclasses.replace(options, **fixed) if fixed else options
    except ValueError as error:
        message = str(error)
        raise ValueError(message if message.startswith(MODEL_OPTIONS_FIELD) else f"{MODEL_OPTIONS_FIELD}: {message}"
                         ) from None
