"""`atl_fgd`: adaptive-topology (edge-gated) GNN + FiLM-guided distillation for 3-D RNA inverse folding.

Paper: "Learning Adaptive Topology with FiLM-Guided Distillation for Tertiary Structure-Based RNA Design"
(ICML 2026; only the abstract is available). Baseline: RDesign (Tan et al., ICLR 2024; A4Bio/RDesign @fa410a9,
read for the maths). ATL and FGD internals are a RECONSTRUCTION, kept swappable by options.

    features   RNABackboneFeaturizer (icml26zoo.bio.rna_features): RDesign's node (101) and edge (115) features
               on a dense padded candidate pool of the k_max nearest nucleotides (i ± 1 always kept)
    ATLEncoder linear embeddings + LayerNorm (RDesign's learnable normalisation), n_enc GatedMPNNLayers
               (icml26zoo.bio.rna_layers), each with its own gates ("layer-adaptive" topology)
    FiLM       FiLMDistiller: the student predictor h^s = γ̂ ⊙ h + β̂ with γ̂ = 1 + U_γ h, β̂ = U_β h (kept at
               inference) and the training-only teacher bridge h^T = γ^T ⊙ h + β^T with γ^T = 1 + W_γ LN(z),
               β^T = W_β LN(z) from teacher embeddings z; all four maps zero-initialised (identity at step 0);
               applied after the encoder (film_at="encoder_out")
    decoder    n_dec GatedMPNNLayers (non-autoregressive, same type), shared by both paths, then Linear -> 4

model(X [B, L, 6, 3], mask [B, L], teacher=None, *, key=None) -> (logits [B, L, 4], aux); `key` None is
evaluation (no gate noise, no dropout). aux: "gates" [n_enc + n_dec, B, L, K] (student path), "nbr_idx",
"nbr_mask", "sequential", "gamma_s", "beta_s", "h" (encoder output), "h_s"; with a teacher also "gamma_t",
"beta_t", "h_t", "teacher_logits", "teacher_gates". Called by the trainer as model(points [B, L, 18],
features [B, L, F], weights [B, L]) through `forward_points` (features = teacher embeddings, F = 0 for none).
Nucleotides are the zoo's T axis; vocabulary A, C, G, U = 0..3.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from flax import nnx

from icml26zoo.bio.rna_features import RNABackboneFeaturizer, check_backbone, edge_dim, node_dim
from icml26zoo.bio.rna_layers import AGGREGATIONS, GATE_KINDS, GatedMPNNLayer
from icml26zoo.models.config import MODEL_OPTIONS_FIELD, ModelConfig, parse_model_options
from icml26zoo.registry import register_model
from icml26zoo.validation import (
    check_choice,
    check_int,
    check_interval,
    check_non_negative,
    check_positive,
    check_probability,
    check_unit_interval,
)

VOCAB = 4
BASES = "ACGU"
TEACHER_MODES = ("context", "plain")
FILM_PLACEMENTS = ("encoder_out",)


@dataclasses.dataclass(frozen=True)
class ATLFGDConfig:
    """The model's and loss's settings (spec defaults). The registered model takes hidden = model.d_model and
    n_enc = model.num_layers from ModelConfig, the rest from model.model_options."""

    hidden: int = 128
    n_enc: int = 3
    n_dec: int = 3
    k: int = 30
    k_max: int = 48
    num_rbf: int = 16
    rbf_max: float = 20.0
    gate_kind: str = "concrete"
    gate_tau: float = 0.5
    # ρ, the initial and targeted mean gate; None means k / k_max.
    target_density: float | None = None
    lambda_sparsity: float = 0.1
    aggregation: str = "gate_mean"
    # Width of the teacher embeddings z (0: no teacher bridge is built).
    teacher_dim: int = 0
    teacher_mode: str = "context"
    film_at: str = "encoder_out"
    # λ_T: weight of the teacher-path CE (held constant: the shared trainer passes no step; see the page).
    lambda_teacher0: float = 1.0
    lambda_film: float = 1.0
    lambda_kd: float = 1.0
    kd_temp: float = 2.0
    dropout: float = 0.2
    label_smoothing: float = 0.1

    def __post_init__(self) -> None:
        check_int("hidden", self.hidden)
        check_int("n_enc", self.n_enc)
        check_int("n_dec", self.n_dec, minimum=0)
        check_int("k_max", self.k_max)
        check_int("k", self.k, minimum=1, maximum=self.k_max)
        check_int("num_rbf", self.num_rbf)
        check_positive("rbf_max", self.rbf_max, finite=True)
        check_choice("gate_kind", self.gate_kind, GATE_KINDS)
        check_positive("gate_tau", self.gate_tau, finite=True)
        if self.target_density is not None:
            check_interval("target_density", self.target_density, 0.0, 1.0, closed="neither")
        elif self.k == self.k_max and self.gate_kind != "none":
            raise ValueError(f"target_density must be given when k == k_max ({self.k}) and gates are learned: "
                             "the default k / k_max = 1 leaves nothing to gate")
        check_non_negative("lambda_sparsity", self.lambda_sparsity, finite=True)
        check_choice("aggregation", self.aggregation, AGGREGATIONS)
        check_int("teacher_dim", self.teacher_dim, minimum=0)
        check_choice("teacher_mode", self.teacher_mode, TEACHER_MODES)
        check_choice("film_at", self.film_at, FILM_PLACEMENTS)
        for name in ("lambda_teacher0", "lambda_film", "lambda_kd"):
            check_non_negative(name, getattr(self, name), finite=True)
        check_positive("kd_temp", self.kd_temp, finite=True)
        check_unit_interval("dropout", self.dropout)
        check_probability("label_smoothing", self.label_smoothing)

    @property
    def density(self) -> float:
        return self.k / self.k_max if self.target_density is None else self.target_density

    @property
    def n_layers(self) -> int:
        return self.n_enc + self.n_dec


def _layer(config: ATLFGDConfig, rngs: nnx.Rngs) -> GatedMPNNLayer:
    return GatedMPNNLayer(config.hidden, gate_kind=config.gate_kind, aggregation=config.aggregation, k=config.k,
                          density=config.density, tau=config.gate_tau, dropout_rate=config.dropout, rngs=rngs)


def _keys(key: jax.Array | None, count: int) -> list[jax.Array | None]:
    return [None] * count if key is None else list(jax.random.split(key, count))


class ATLEncoder(nnx.Module):
    """Featurises X and runs the encoder layers: -> (h [B, L, d], graph dict, gates [n_enc, B, L, K])."""

    def __init__(self, config: ATLFGDConfig, *, rngs: nnx.Rngs) -> None:
        self.featurizer = RNABackboneFeaturizer(config.k_max, config.num_rbf, config.rbf_max)
        self.node_in = nnx.Linear(node_dim(config.num_rbf), config.hidden, rngs=rngs)
        self.node_norm = nnx.LayerNorm(config.hidden, rngs=rngs)
        self.edge_in = nnx.Linear(edge_dim(config.num_rbf), config.hidden, rngs=rngs)
        self.edge_norm = nnx.LayerNorm(config.hidden, rngs=rngs)
        self.layers = nnx.List([_layer(config, rngs) for _ in range(config.n_enc)])

    def __call__(self, X: jax.Array, mask: jax.Array, key: jax.Array | None = None,
                 tau: float | jax.Array | None = None) -> tuple[jax.Array, dict[str, jax.Array], jax.Array]:
        graph = self.featurizer(X, mask)
        h = self.node_norm(self.node_in(graph["node"]))
        e = self.edge_norm(self.edge_in(graph["edge"]))
        graph = graph | {"e": e}
        gates = []
        for layer, layer_key in zip(self.layers, _keys(key, len(self.layers)), strict=True):
            h, g = layer(h, e, graph["nbr_idx"], graph["nbr_mask"], graph["sequential"], layer_key, tau)
            gates.append(g)
        return h, graph, jnp.stack(gates)


class FiLMDistiller(nnx.Module):
    """Student FiLM predictor (kept at inference) and teacher FiLM bridge (training only); module docstring."""

    def __init__(self, hidden: int, teacher_dim: int, *, rngs: nnx.Rngs) -> None:
        zeros = nnx.initializers.zeros
        self.U_gamma = nnx.Linear(hidden, hidden, kernel_init=zeros, rngs=rngs)
        self.U_beta = nnx.Linear(hidden, hidden, kernel_init=zeros, rngs=rngs)
        self.teacher_dim = teacher_dim
        if teacher_dim:
            self.teacher_norm = nnx.LayerNorm(teacher_dim, rngs=rngs)
            self.W_gamma = nnx.Linear(teacher_dim, hidden, kernel_init=zeros, rngs=rngs)
            self.W_beta = nnx.Linear(teacher_dim, hidden, kernel_init=zeros, rngs=rngs)

    def student(self, h: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
        """(h^s, γ̂, β̂), each [B, L, d]."""
        gamma, beta = 1.0 + self.U_gamma(h), self.U_beta(h)
        return gamma * h + beta, gamma, beta

    def teacher(self, h: jax.Array, z: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
        """(h^T, γ^T, β^T), each [B, L, d], from teacher embeddings z [B, L, d_T]."""
        if not self.teacher_dim:
            raise ValueError("teacher embeddings were given but the model has teacher_dim = 0 (no teacher bridge)")
        if z.shape[-1] != self.teacher_dim:
            raise ValueError(f"teacher must have width teacher_dim = {self.teacher_dim}, got shape {list(z.shape)}")
        normed = self.teacher_norm(z.astype(jnp.float32))
        gamma, beta = 1.0 + self.W_gamma(normed), self.W_beta(normed)
        return gamma * h + beta, gamma, beta


class ATLFGDModel(nnx.Module):
    """Encoder, FiLM distiller, shared decoder and readout (module docstring)."""

    def __init__(self, config: ATLFGDConfig, *, rngs: nnx.Rngs) -> None:
        self.config = config
        self.encoder = ATLEncoder(config, rngs=rngs)
        self.film = FiLMDistiller(config.hidden, config.teacher_dim, rngs=rngs)
        self.decoder = nnx.List([_layer(config, rngs) for _ in range(config.n_dec)])
        self.readout = nnx.Linear(config.hidden, VOCAB, rngs=rngs)

    def decode(self, h: jax.Array, graph: dict[str, jax.Array], key: jax.Array | None = None,
               tau: float | jax.Array | None = None) -> tuple[jax.Array, jax.Array]:
        """The shared decoder + readout R: (logits [B, L, 4], gates [n_dec, B, L, K])."""
        gates = []
        for layer, layer_key in zip(self.decoder, _keys(key, len(self.decoder)), strict=True):
            h, g = layer(h, graph["e"], graph["nbr_idx"], graph["nbr_mask"], graph["sequential"], layer_key, tau)
            gates.append(g)
        empty = jnp.zeros((0, *graph["nbr_mask"].shape), jnp.float32)
        return self.readout(h), (jnp.stack(gates) if gates else empty)

    def __call__(self, X: jax.Array, mask: jax.Array, teacher: jax.Array | None = None, *,
                 key: jax.Array | None = None, tau: float | jax.Array | None = None
                 ) -> tuple[jax.Array, dict[str, jax.Array]]:
        """Logits [B, L, 4] and the aux dict; `tau` replaces every gate's temperature config.gate_tau (the value
        of an annealing schedule at this step; objective rna_inverse_folding's `anneal_steps`)."""
        check_backbone(X, mask)
        if teacher is not None and teacher.shape[:2] != mask.shape:
            raise ValueError(f"teacher must be [B, L, teacher_dim] with B, L = {list(mask.shape)}, got shape "
                             f"{list(teacher.shape)}")
        encoder_key, student_key, teacher_key = _keys(key, 3)
        h, graph, encoder_gates = self.encoder(X, mask, encoder_key, tau)
        h_s, gamma_s, beta_s = self.film.student(h)
        logits, decoder_gates = self.decode(h_s, graph, student_key, tau)
        aux = {"gates": jnp.concatenate([encoder_gates, decoder_gates]), "nbr_idx": graph["nbr_idx"],
               "nbr_mask": graph["nbr_mask"], "sequential": graph["sequential"], "gamma_s": gamma_s,
               "beta_s": beta_s, "h": h, "h_s": h_s}
        if teacher is not None:
            h_t, gamma_t, beta_t = self.film.teacher(h, teacher)
            teacher_logits, teacher_gates = self.decode(h_t, graph, teacher_key, tau)
            aux |= {"h_t": h_t, "gamma_t": gamma_t, "beta_t": beta_t, "teacher_logits": teacher_logits,
                    "teacher_gates": jnp.concatenate([encoder_gates, teacher_gates])}
        return logits, aux


@register_model("atl_fgd")
class ATLFGD(ATLFGDModel):
    """The registered model: ATLFGDConfig from ModelConfig (hidden = d_model, n_enc = num_layers) and
    model_options; called by the trainer on feature batches (module docstring)."""

    LANGUAGE_MODEL = False
    options_class = ATLFGDConfig

    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs) -> None:
        options = parse_model_options(ATLFGDConfig, cfg, owner="atl_fgd model")
        given = {name for name, _ in cfg.model_options}
        for name in ("hidden", "n_enc"):
            if name in given:
                raise ValueError(f"{MODEL_OPTIONS_FIELD}: atl_fgd option {name!r} comes from ModelConfig "
                                 f"(d_model, num_layers), not model_options")
        super().__init__(dataclasses.replace(options, hidden=cfg.d_model, n_enc=cfg.num_layers), rngs=rngs)

    def forward_points(self, points: jax.Array, features: jax.Array, weights: jax.Array, *,
                       key: jax.Array | None = None, tau: float | jax.Array | None = None
                       ) -> tuple[jax.Array, dict[str, jax.Array]]:
        """points [B, L, 18] (6 atoms x 3), features [B, L, F] (teacher embeddings, F = 0: none), weights [B, L];
        `tau` as in `ATLFGDModel.__call__`."""
        if points.ndim != 3 or points.shape[-1] != 18:
            raise ValueError(f"points must be [B, L, 18] (6 backbone atoms x 3 per nucleotide), got shape "
                             f"{list(points.shape)}")
        X = points.reshape(*points.shape[:2], 6, 3).astype(jnp.float32)
        mask = (weights > 0).astype(jnp.float32)
        teacher = features if features.shape[-1] else None
        return ATLFGDModel.__call__(self, X, mask, teacher, key=key, tau=tau)
