"""The architecture config shared by every registered language model."""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

from icml26zoo.layers.options import build_options
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
    # Mixture-of-experts feed-forward (zoo.moe): 0 keeps the dense MLP; E > 0 replaces every block's MLP by E
    # expert MLPs (activation mlp_activation, hidden width the resolved mlp_dim), moe_top_k of them per token.
    moe_num_experts: int = 0
    # Experts per token k (<= moe_num_experts).
    moe_top_k: int = 2
    # Registered router (zoo.moe.registry.ROUTERS): "topk_softmax", "confidence", "gaussian", "laplacian",
    # "mahalanobis".
    moe_router: str = "topk_softmax"
    # None: no token is dropped; else each expert keeps at most ceil(factor · tokens · k / E) assignments
    # (tokens then compete for capacity across the batch, so decoding no longer equals the forward).
    moe_capacity_factor: float | None = None
    # Weights of the router's load-balancing loss and z-loss (routers that use them; added by objective "lm_moe").
    moe_load_balance_weight: float = 0.01
    moe_z_loss_weight: float = 1e-3
    # Grouped matmul path of the experts: None (= "ragged_dot"), "dense" (one-hot reference) or "ragged_dot".
    moe_implementation: str | None = None
    # The router's own options as (name, value) pairs, e.g. (("covariance", "phi"),).
    moe_router_options: tuple[tuple[str, Any], ...] = ()

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
        check_int("moe_num_experts", self.moe_num_experts, minimum=0)
        check_pairs("moe_router_options", self.moe_router_options)
        if not self.moe_num_experts:
            return
        if self.mlp_dim == 0:
            raise ValueError("mlp_dim must not be 0 when moe_num_experts > 0 (the experts replace the MLP), got 0")
        self.moe_config()

    def moe_config(self) -> Any:
        """The blocks' `zoo.moe.MoEConfig` (validated: ValueError names the moe_* field), or None without MoE.

        In the LM, the "mahalanobis" router estimates its co-occurrence statistics from each batch
        ("statistics": "batch"), since the model carries only parameters; "running" is rejected here. Its
        routing then depends on the whole batch, so decoding does not reproduce the forward exactly.
        """
        if not self.moe_num_experts:
            return None
        # Imported here: the config module stays free of flax for cheap config loading.
        from icml26zoo.moe.layer import MoEConfig, check_moe_fields

        check_moe_fields(
            prefix="moe_", num_experts=self.moe_num_experts, top_k=self.moe_top_k, router=self.moe_router,
            capacity_factor=self.moe_capacity_factor, load_balance_weight=self.moe_load_balance_weight,
            z_loss_weight=self.moe_z_loss_weight, implementation=self.moe_implementation,
        )
        options = self.moe_router_options
        if self.moe_router == "mahalanobis":
            if dict(options).get("statistics", "batch") != "batch":
                raise ValueError(
                    "moe_router_options statistics must be 'batch' for the mahalanobis router in a model "
                    f"(running statistics are state that a parameters-only model cannot carry), got {options!r}"
                )
            options = (("statistics", "batch"), *options)
        return MoEConfig(
            num_experts=self.moe_num_experts, top_k=self.moe_top_k, router=self.moe_router,
            capacity_factor=self.moe_capacity_factor, load_balance_weight=self.moe_load_balance_weight,
            z_loss_weight=self.moe_z_loss_weight, implementation=self.moe_implementation, router_options=options,
        )

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

    def option(self, name: str, default: Any = None) -> Any:
        """The value of mixer option `name`, or `default` when it is not set."""
        return dict(self.mixer_options).get(name, default)


MODEL_OPTIONS_FIELD = "model.model_options"
Options = TypeVar("Options")


def parse_model_options(options_class: type[Options], cfg: ModelConfig, *, owner: str) -> Options:
    """cfg.model_options as the model's typed options (defaults applied); ValueError naming model.model_options."""
    try:
        return build_options(options_class, cfg.model_options, owner=owner)
    except ValueError as error:
        message = str(error)
        raise ValueError(message if message.startswith(MODEL_OPTIONS_FIELD) else f"{MODEL_OPTIONS_FIELD}: {message}"
                         ) from None
