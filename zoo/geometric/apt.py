"""APT, the Adaptive Physics Transformer (Ju, Fung, Zhang, Jacquemyn, Jackson, Settgast, Benson, Wen; "Adaptive
Physics Transformer with Fused Global-Local Attention for Subsurface Energy Systems", arXiv 2602.11208),
registered as model "apt": a neural operator on irregular / adaptively refined meshes.

RECONSTRUCTION (no code is public; the paper names a local GNO encoder, a global Perceiver branch and a gated
fusion). Per node i with coordinates x_i, fields a_i and quadrature weight w_i:
    h⁰_i    = MLP([a_i, γ(x_i)])                    γ: fixed random Fourier features of the coordinates
    h^loc   = num_layers × LocalGNOLayer(h⁰)         neighbours within `radius` (∪ mesh edges), k ≤ max_neighbours
    h^glob  = PerceiverBranch(h⁰)                     num_latents latents, logits + log w_i, latent_layers blocks
    g_i     = σ(W_g [h^loc_i; h^glob_i] + b_g)        b_g = 0 at init (equal mixing)
    h_i     = g_i ⊙ h^loc_i + (1 − g_i) ⊙ h^glob_i
    Δu_i    = MLP(LN(h_i))                            one time step: the next state is uⁿ + Δu
The two branches read h⁰ in parallel. Model option gate = "local" / "global" fixes g ≡ 1 / g ≡ 0 (a pure GNO /
a pure Perceiver, the spec's invariant 6) with the same parameters, so a trained model can be ablated.
The readout is at the input nodes (readout "point"); the spec's separate query decoder (super-resolution at
other points) is not built, so its decoder-consistency invariant holds by construction.

Every sum over nodes is a quadrature: the GNO normalizes w_j over each neighbourhood and the attentions add
log w_j to their logits, so the outputs do not change when a node is duplicated and both copies get half its
weight, nor when all weights are scaled by one constant (the contract's "weights sum to the number of real
nodes" is therefore only a convention here), nor when padding (w = 0) is added. The cap max_neighbours is the
exception by design: when a refined region has more than k nodes within `radius`, the k nearest are kept.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Literal

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from icml26zoo.geometric.apt_layers import (
    LocalGNOLayer,
    Mlp,
    PerceiverBranch,
    fourier_basis,
    fourier_features,
    neighbour_lists,
)
from icml26zoo.geometric.common import check_point_inputs, is_concrete, point_mask
from icml26zoo.models.config import MODEL_OPTIONS_FIELD, ModelConfig, parse_model_options
from icml26zoo.registry import register_model
from icml26zoo.validation import check_int

FIELD = MODEL_OPTIONS_FIELD


@dataclasses.dataclass(frozen=True)
class AptOptions:
    """The apt model's options (ModelConfig.model_options). num_layers is the number of local GNO layers."""

    # Output channels O of the per-node prediction [B, N, O].
    num_outputs: int = 1
    # Only "point" (one output per node): APT is an operator from fields to fields.
    readout: str = "point"
    # Coordinate dimension d of points [B, N, d] (2 for the zoo's meshes).
    point_dim: int = 2
    # Input field channels F of features [B, N, F] (3 for zoo_darcy_amr: p_a, k, q / SOURCE).
    feature_dim: int = 3
    # "attention" (GAOT-like, + log w_j) or "kernel" (GNO kernel integral with w-normalized sums).
    local_operator: Literal["attention", "kernel"] = "attention"
    # Neighbourhood radius r and cap k_max of the local branch (the spec's small setting: 0.08 and 32).
    radius: float = 0.08
    max_neighbours: int = 32
    # Latent tokens M and latent self-attention blocks of the global branch.
    num_latents: int = 32
    latent_layers: int = 2
    # Random Fourier features γ: count F_γ (even), frequency scale σ, and the seed of their fixed basis.
    fourier_features: int = 32
    fourier_scale: float = 2.0
    fourier_seed: int = 0
    # "learned" gate, or the ablations g ≡ 1 ("local", pure GNO) and g ≡ 0 ("global", pure Perceiver).
    gate: Literal["learned", "local", "global"] = "learned"

    def __post_init__(self) -> None:
        for name in ("num_outputs", "point_dim", "feature_dim", "max_neighbours", "num_latents",
                     "fourier_features"):
            check_int(f"{FIELD}: apt option {name!r}", getattr(self, name), minimum=0 if name == "feature_dim" else 1)
        if self.readout != "point":
            raise ValueError(f"{FIELD}: apt option 'readout' must be 'point' (APT predicts a field at the nodes; "
                             f"no pooled readout), got {self.readout!r}")
        if self.fourier_features % 2:
            raise ValueError(f"{FIELD}: apt option 'fourier_features' must be even (sin and cos pairs), "
                             f"got {self.fourier_features}")
        if not self.radius > 0 or not self.fourier_scale > 0:
            raise ValueError(f"{FIELD}: apt options 'radius' and 'fourier_scale' must be > 0, "
                             f"got {self.radius!r} and {self.fourier_scale!r}")
        if self.latent_layers < 0:
            raise ValueError(f"{FIELD}: apt option 'latent_layers' must be >= 0, got {self.latent_layers!r}")


def apt_options(cfg: ModelConfig) -> AptOptions:
    """cfg.model_options as AptOptions; ValueError naming model.model_options."""
    return parse_model_options(AptOptions, cfg, owner="apt model")


def edge_adjacency(edges: jax.Array, num_nodes: int) -> jax.Array:
    """Mesh edges [B, E, 2] int (rows of -1 unused) -> symmetric adjacency [B, N, N] bool.

    Eagerly (concrete edges) an index outside [-1, N), or a row with one -1, raises ValueError naming `edges`.
    """
    shape = getattr(edges, "shape", None)
    if shape is None or len(shape) != 3 or shape[-1] != 2 or not jnp.issubdtype(edges.dtype, jnp.integer):
        raise ValueError(f"edges must be an integer array [B, E, 2] of node index pairs, "
                         f"got {getattr(edges, 'dtype', type(edges).__name__)} {list(shape or ())}")
    if is_concrete(edges):
        values = np.asarray(edges)
        unused = values < 0
        if np.any(values < -1) or np.any(values >= num_nodes) or np.any(unused[..., 0] != unused[..., 1]):
            bad = np.argwhere((values < -1) | (values >= num_nodes) | (unused != unused[..., ::-1]))[0].tolist()
            raise ValueError(f"edges must hold node indices in [0, N = {num_nodes}) (or -1 in both entries of "
                             f"an unused row), got {values[tuple(bad)]} at index {bad} (shape {list(shape)})")
    batch = edges.shape[0]
    # Unused rows go to the extra index N, which the final slice drops.
    index = jnp.where(edges < 0, num_nodes, edges)
    rows = jnp.arange(batch)[:, None]
    adjacency = jnp.zeros((batch, num_nodes + 1, num_nodes + 1), bool)
    adjacency = adjacency.at[rows, index[..., 0], index[..., 1]].set(True)
    adjacency = adjacency.at[rows, index[..., 1], index[..., 0]].set(True)
    return adjacency[:, :num_nodes, :num_nodes]


@register_model("apt")
class AdaptivePhysicsTransformer(nnx.Module):
    """APT: (points [B, N, d], features [B, N, F], weights [B, N], edges [B, E, 2] | None) -> [B, N, O].

    Padding nodes (weight 0) influence no real output and get output 0.
    """

    LANGUAGE_MODEL = False
    options_class = AptOptions

    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs) -> None:
        options = apt_options(cfg)
        self.options = options
        self.cfg = cfg
        # Lifted by equivariance_errors on a clone to measure the uncapped quadrature invariance.
        self.max_neighbours = options.max_neighbours
        d_model = cfg.d_model
        if d_model % cfg.num_heads:
            raise ValueError(f"d_model must be divisible by num_heads for apt, got d_model={d_model}, "
                             f"num_heads={cfg.num_heads}")
        self.embed = Mlp(options.feature_dim + options.fourier_features, d_model, d_model, rngs=rngs)
        self.local_layers = nnx.List([
            LocalGNOLayer(d_model, cfg.num_heads, options.point_dim, options.local_operator, rngs=rngs)
            for _ in range(cfg.num_layers)
        ])
        self.global_branch = PerceiverBranch(d_model, cfg.num_heads, options.num_latents, options.latent_layers,
                                             options.fourier_features, rngs=rngs)
        self.gate = nnx.Linear(2 * d_model, d_model, bias_init=jax.nn.initializers.zeros, rngs=rngs)
        self.readout_norm = nnx.LayerNorm(d_model, rngs=rngs)
        self.readout = Mlp(d_model, d_model, options.num_outputs, rngs=rngs)

    def __call__(self, points: jax.Array, features: jax.Array, weights: jax.Array,
                 edges: jax.Array | None = None) -> jax.Array:
        """points [B, N, d], features [B, N, F], weights [B, N] (0 = padding), edges [B, E, 2] -> [B, N, O]."""
        options = self.options
        check_point_inputs(points, features, weights, dim=options.point_dim)
        if features.shape[-1] != options.feature_dim:
            raise ValueError(f"features must have shape [B, N, {options.feature_dim}] (model option "
                             f"feature_dim), got shape {list(features.shape)}")
        adjacency = None if edges is None else edge_adjacency(edges, points.shape[1])
        basis = fourier_basis(options.fourier_seed, options.point_dim, options.fourier_features,
                              options.fourier_scale)
        fourier = fourier_features(points, basis)
        h = self.embed(jnp.concatenate([features, fourier], axis=-1))
        fused = self._fuse(h, points, fourier, weights, adjacency)
        outputs = self.readout(self.readout_norm(fused))
        return outputs * point_mask(weights)[..., None]

    def _fuse(self, h, points, fourier, weights, adjacency) -> jax.Array:
        """The gated mix of the two branches [B, N, D] (only the kept branch runs under a fixed gate)."""
        gate = self.options.gate
        local = self.local_branch(h, points, weights, adjacency) if gate != "global" else None
        global_ = self.global_branch(h, fourier, weights) if gate != "local" else None
        if gate == "local":
            return local
        if gate == "global":
            return global_
        mix = jax.nn.sigmoid(self.gate(jnp.concatenate([local, global_], axis=-1)))
        return mix * local + (1.0 - mix) * global_

    def local_branch(self, h: jax.Array, points: jax.Array, weights: jax.Array,
                     adjacency: jax.Array | None = None) -> jax.Array:
        """h⁰ [B, N, D] -> h^loc [B, N, D]: the GNO layers over one set of neighbour lists."""
        index, valid = neighbour_lists(points, weights, self.options.radius, self.max_neighbours, adjacency)
        for layer in self.local_layers:
            h = layer(h, points, weights, index, valid)
        return h


def duplicate_nodes(points: jax.Array, features: jax.Array, weights: jax.Array, chosen: jax.Array, *,
                    halve: bool) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Appends a copy of the nodes `chosen` [C] (indices into N) to every example: [B, N + C, ·].

    halve=True gives each chosen node and its copy half the node's weight (the same quadrature: an in-group
    refinement); halve=False keeps both at full weight (the region counts twice: out of the group).
    """
    scale = 0.5 if halve else 1.0
    new_weights = weights.at[:, chosen].multiply(scale)
    return (jnp.concatenate([points, points[:, chosen]], axis=1),
            jnp.concatenate([features, features[:, chosen]], axis=1),
            jnp.concatenate([new_weights, new_weights[:, chosen]], axis=1))


def equivariance_errors(model: nnx.Module, points: jax.Array, features: jax.Array,
                        weights: jax.Array, key: jax.Array) -> dict[str, float]:
    """Max abs change of the node outputs under APT's symmetries (and one transformation outside them).

    - "permutation": a random reordering of the nodes (outputs must follow the nodes);
    - "duplication": half of the nodes (random) duplicated, each original and copy at half weight; outputs at
      the originals and the copies compared with the unduplicated ones. Measured on a clone whose neighbour cap
      is lifted (k = all nodes): the cap max_neighbours truncates dense neighbourhoods by design, which would
      otherwise count as an error of the quadrature;
    - "in_group": the max of the two;
    - "out_of_group": the same duplication WITHOUT halving the weights. Duplicating every node at full weight
      would only scale all weights by 2, which the model ignores (it normalizes every quadrature), so a
      random half is duplicated: that half then weighs twice as much as it should.
    The inputs are validated eagerly, then every forward runs compiled at one padded shape [B, N + N // 2].
    Any model of the interface works (e.g. the set_transformer baseline); only APT has a cap to lift.
    """
    check_point_inputs(points, features, weights)
    permute_key, choose_key = jax.random.split(key)
    num_nodes = points.shape[1]
    chosen = jax.random.permutation(choose_key, num_nodes)[: max(1, num_nodes // 2)]
    size = num_nodes + chosen.shape[0]
    capped = compiled_forward(model)
    # A cap of at least the node count truncates nothing: the same compiled forward serves both.
    truncates = getattr(model, "max_neighbours", size) < size
    uncapped = compiled_forward(model, max_neighbours=size) if truncates else capped
    padded = _pad_nodes(points, features, weights, size)
    reference = capped(*padded)[:, :num_nodes]
    order = jax.random.permutation(permute_key, num_nodes)
    permuted = capped(*_pad_nodes(points[:, order], features[:, order], weights[:, order], size))
    errors = {"permutation": _max_abs(permuted[:, :num_nodes], reference[:, order])}
    reference = uncapped(*padded)[:, :num_nodes]
    for name, halve in (("duplication", True), ("out_of_group", False)):
        duplicated = uncapped(*duplicate_nodes(points, features, weights, chosen, halve=halve))
        errors[name] = max(_max_abs(duplicated[:, :num_nodes], reference),
                           _max_abs(duplicated[:, num_nodes:], reference[:, chosen]))
    errors["in_group"] = max(errors["permutation"], errors["duplication"])
    return errors


def compiled_forward(model: nnx.Module, max_neighbours: int | None = None) -> Callable[..., jax.Array]:
    """The model's forward (points, features, weights) -> outputs under jit; an APT optionally with another cap."""
    if max_neighbours is not None and hasattr(model, "max_neighbours"):
        model = nnx.clone(model)
        model.max_neighbours = max_neighbours
    graphdef, state = nnx.split(model)
    forward = jax.jit(lambda state, *inputs: nnx.merge(graphdef, state)(*inputs))
    return lambda *inputs: forward(state, *inputs)


def _pad_nodes(points: jax.Array, features: jax.Array, weights: jax.Array, size: int) -> tuple[jax.Array, ...]:
    """Appends weight-0 nodes (copies of node 0) up to `size` nodes."""
    extra = size - points.shape[1]
    pad = lambda x: jnp.concatenate([x, jnp.repeat(x[:, :1], extra, axis=1)], axis=1)
    return pad(points), pad(features), jnp.concatenate([weights, jnp.zeros((weights.shape[0], extra))], axis=1)


def _max_abs(got: jax.Array, want: jax.Array) -> float:
    return float(jnp.max(jnp.abs(got - want)))
