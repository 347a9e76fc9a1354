"""`conglude`: ConGLUDe's contrastive geometric model (ICML 2026; official code ml-jku/conglude, PyTorch), small.

Protein encoder: VN-EGNN with a global protein node (ml-jku/conglude conglude/modules/vnegnn.py at commit
71c7113823e1ef1f0f81b1b8235b2e25dc71c1cc). Residues sit at their Cα coordinates; K virtual pocket nodes (VNs)
start on a Fibonacci sphere around the protein centroid with radius the largest residue distance from it
(`virtual_node_init`, optionally randomly rotated); VNs and the protein node start from the mean residue feature.
Coordinates are divided by coordinate_scale (5) inside the network and multiplied back at the end. One shared
Linear(F_in → F) maps residues, VNs and the protein node; each of num_layers layers (no weight sharing) applies,
in order: residue→residue EGNN (edges between residues within edge_cutoff = 10 Å), residue→VN EGNN (VN
coordinates updated), VN→residue EGNN, residue→protein GNN,
protein→residue GNN (complete bipartite edges). The layers run in their dense form (icml26zoo.bio.egnn: the
same function as the edge list, the edges a mask [B, N_dst, N_src]), which avoids the gathers and scatters that
dominate an edge list's cost on CPU. Residue coordinates are never updated (the official
update_coords=False). Heads: a residue segmentation logit and a VN confidence (Linear–SiLU–Linear → 1 each).
Contrastive part: pocket and protein projections Linear(F → P), L2-normalised; the ligand encoder, a 2-layer MLP
(L → 2P → 2P, GELU), whose output is split into ℓ_p (protein half) and ℓ_b (binding-site half), each
L2-normalised. Scores: ⟨P, ℓ_p⟩ (protein), ⟨b_k, ℓ_b⟩ (pocket), their sum (combined, in [−2, 2]).

encoder="mlp" is the non-geometric baseline (not in the paper): the same model with every message-passing layer
replaced by a per-residue residual MLP; VNs keep their initial positions and the mean residue feature, the
protein node is the mean residue feature after the layers (mean pooling), no coordinate is read.

Deviations (docs/papers/conglude.md): no dropout; sizes are the
spec's small faithful model (F = 32, 3 layers, K = 4, P = 32, ligands 136-d).
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from icml26zoo.bio.egnn import EGNNLayer, GNNLayer, TwoLayerMLP
from icml26zoo.bio.structure import check_structures
from icml26zoo.geometric.common import random_rotation
from icml26zoo.models.config import MODEL_OPTIONS_FIELD, ModelConfig, parse_model_options
from icml26zoo.registry import register_model
from icml26zoo.validation import check_choice, check_float_array, check_int, check_positive

__all__ = ["ConGLUDe", "ConGLUDeOptions", "ProteinOutput", "fibonacci_sphere", "radius_adjacency"]

ENCODERS = ("egnn", "mlp")
_TINY = 1e-12


@dataclasses.dataclass(frozen=True)
class ConGLUDeOptions:
    """conglude's options (ModelConfig.model_options); d_model is the node width F = H, num_layers the layers."""

    residue_features: int = 32  # F_in, the per-residue input features (ESM-2's 1280 in the paper)
    ligand_features: int = 136  # fingerprint bits + descriptors (2048 + 210 in the paper)
    num_virtual_nodes: int = 4  # K (8 in the paper)
    projection: int = 32  # P, the contrastive width (256 in the paper); the ligand MLP is 2P wide
    coordinate_scale: float = 5.0
    edge_cutoff: float = 10.0  # Å
    encoder: str = "egnn"  # or "mlp", the non-geometric baseline

    def __post_init__(self) -> None:
        owner = f"{MODEL_OPTIONS_FIELD}: conglude option"
        for name in ("residue_features", "ligand_features", "num_virtual_nodes", "projection"):
            check_int(f"{owner} {name!r}", getattr(self, name))
        check_positive(f"{owner} 'coordinate_scale'", self.coordinate_scale, finite=True)
        check_positive(f"{owner} 'edge_cutoff'", self.edge_cutoff, finite=True)
        check_choice(f"{owner} 'encoder'", self.encoder, ENCODERS)


class ProteinOutput(NamedTuple):
    """residue_logits [B, N], vn_positions [B, K, 3] Å, confidence [B, K], pockets [B, K, P] and protein [B, P]
    (unit norm), protein_features [B, F] (the protein node before its projection)."""

    residue_logits: jax.Array
    vn_positions: jax.Array
    confidence: jax.Array
    pockets: jax.Array
    protein: jax.Array
    protein_features: jax.Array


def fibonacci_sphere(count: int) -> np.ndarray:
    """count points [count, 3] of a unit Fibonacci sphere (golden-angle spiral, polar angles at (i + ½)/count)."""
    golden = (1.0 + np.sqrt(5.0)) / 2.0
    index = np.arange(count, dtype=np.float64)
    theta, phi = 2 * np.pi * index / golden, np.arccos(1 - 2 * (index + 0.5) / count)
    return np.stack([np.sin(phi) * np.cos(theta), np.sin(phi) * np.sin(theta), np.cos(phi)], 1).astype(np.float32)


def _unit(x: jax.Array) -> jax.Array:
    return x / jnp.sqrt(jnp.maximum(jnp.sum(jnp.square(x), axis=-1, keepdims=True), _TINY))


def radius_adjacency(points: jax.Array, mask: jax.Array, cutoff: float) -> jax.Array:
    """The residue graph of a padded batch as a mask [B, N, N]: 1 for two distinct real residues (mask [B, N] > 0)
    closer than cutoff (the official radius graph, both directions)."""
    distance = jnp.sqrt(jnp.sum(jnp.square(points[:, :, None] - points[:, None]), axis=-1))
    real = (mask[:, :, None] > 0) & (mask[:, None] > 0) & ~jnp.eye(points.shape[1], dtype=bool)[None]
    return (real & (distance < cutoff)).astype(jnp.float32)


class _Layer(nnx.Module):
    """One VN-EGNN layer: residue→residue, residue→VN, VN→residue EGNN, residue→protein, protein→residue GNN."""

    def __init__(self, width: int, *, rngs: nnx.Rngs) -> None:
        self.residue_residue = EGNNLayer(width, width, update_coords=False, rngs=rngs)
        self.residue_vn = EGNNLayer(width, width, update_coords=True, rngs=rngs)
        self.vn_residue = EGNNLayer(width, width, update_coords=False, rngs=rngs)
        self.residue_protein = GNNLayer(width, width, rngs=rngs)
        self.protein_residue = GNNLayer(width, width, rngs=rngs)

    def __call__(self, nodes: tuple, residue_graph: jax.Array, mask: jax.Array) -> tuple:
        """nodes = (h [B, N, F], x [B, N, 3], hv [B, K, F], xv [B, K, 3], hp [B, 1, F]); residue_graph [B, N, N];
        mask [B, N] (real residues; every VN and the protein node link to all of them)."""
        h, x, hv, xv, hp = nodes
        to_nodes = jnp.broadcast_to(mask[:, None, :], (mask.shape[0], hv.shape[1], mask.shape[1]))
        h, x = self.residue_residue.dense(h, x, h, x, residue_graph)
        hv, xv = self.residue_vn.dense(h, x, hv, xv, to_nodes)
        h, x = self.vn_residue.dense(hv, xv, h, x, jnp.swapaxes(to_nodes, 1, 2))
        hp = self.residue_protein.dense(h, hp, mask[:, None, :])
        h = self.protein_residue.dense(hp, h, mask[:, :, None])
        return h, x, hv, xv, hp


@register_model("conglude")
class ConGLUDe(nnx.Module):
    """VN-EGNN protein encoder, ligand encoder, contrastive projections (module docstring)."""

    LANGUAGE_MODEL = False
    options_class = ConGLUDeOptions

    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs) -> None:
        self.options = options = parse_model_options(ConGLUDeOptions, cfg, owner="conglude model")
        width, projection = cfg.d_model, options.projection
        init = nnx.initializers.xavier_normal()
        self.input_map = nnx.Linear(options.residue_features, width, kernel_init=init, rngs=rngs)
        if options.encoder == "egnn":
            self.layers = nnx.List([_Layer(width, rngs=rngs) for _ in range(cfg.num_layers)])
        else:
            self.layers = nnx.List([TwoLayerMLP(width, width, width, rngs=rngs) for _ in range(cfg.num_layers)])
        self.segmentation = TwoLayerMLP(width, width, 1, rngs=rngs)
        self.confidence = TwoLayerMLP(width, width, 1, rngs=rngs)
        self.pocket_projection = nnx.Linear(width, projection, rngs=rngs)
        self.protein_projection = nnx.Linear(width, projection, rngs=rngs)
        self.ligand_in = nnx.Linear(options.ligand_features, 2 * projection, rngs=rngs)
        self.ligand_out = nnx.Linear(2 * projection, 2 * projection, rngs=rngs)

    def virtual_node_init(self, points: jax.Array, weights: jax.Array, key: jax.Array | None = None) -> jax.Array:
        """Initial VN positions [B, K, 3]: the Fibonacci sphere at each protein's centroid, radius its largest
        residue distance from the centroid; rotated by a random rotation per row when `key` is given."""
        mask = (weights > 0).astype(jnp.float32)[..., None]
        centroid = jnp.sum(points * mask, axis=1) / jnp.maximum(jnp.sum(mask, axis=1), 1.0)
        radius = jnp.max(jnp.sqrt(jnp.sum(jnp.square(points - centroid[:, None]), -1)) * mask[..., 0], axis=1)
        sphere = jnp.broadcast_to(jnp.asarray(fibonacci_sphere(self.options.num_virtual_nodes)),
                                  (points.shape[0], self.options.num_virtual_nodes, 3))
        if key is not None:
            sphere = jnp.einsum("bij,bkj->bki", random_rotation(key, (points.shape[0],)), sphere)
        return centroid[:, None] + radius[:, None, None] * sphere

    def _check(self, points: jax.Array, features: jax.Array, weights: jax.Array, vn_positions: jax.Array) -> None:
        check_structures(points, weights, "points")
        check_float_array("features", features, (*points.shape[:2], self.options.residue_features),
                          f"[B, N, {self.options.residue_features}]")
        check_structures(vn_positions, jnp.ones(vn_positions.shape[:2]), "vn_positions")
        if vn_positions.shape[:2] != (points.shape[0], self.options.num_virtual_nodes):
            raise ValueError(f"vn_positions must have shape [B, K, 3] = [{points.shape[0]}, "
                             f"{self.options.num_virtual_nodes}, 3], got {list(vn_positions.shape)}")

    def encode_protein(self, points: jax.Array, features: jax.Array, weights: jax.Array,
                       vn_positions: jax.Array) -> ProteinOutput:
        """Protein side (module docstring) from points [B, N, 3] Å, features [B, N, F_in], weights [B, N] (> 0
        on real residues) and initial VN positions [B, K, 3] Å."""
        self._check(points, features, weights, vn_positions)
        k, scale = self.options.num_virtual_nodes, self.options.coordinate_scale
        mask = (weights > 0).astype(jnp.float32)
        mean = jnp.sum(features * mask[..., None], 1) / jnp.maximum(jnp.sum(mask, 1, keepdims=True), 1.0)
        h = self.input_map(features)
        hv = jnp.repeat(self.input_map(mean)[:, None], k, axis=1)
        hp = self.input_map(mean)[:, None]
        x, xv = points / scale, vn_positions / scale
        if self.options.encoder == "egnn":
            graph = radius_adjacency(points, mask, self.options.edge_cutoff)
            for layer in self.layers:
                h, x, hv, xv, hp = layer((h, x, hv, xv, hp), graph, mask)
            hp = hp[:, 0]
        else:
            for layer in self.layers:
                h = h + layer(h)
            hp = jnp.sum(h * mask[..., None], 1) / jnp.maximum(jnp.sum(mask, 1, keepdims=True), 1.0)
        return ProteinOutput(
            residue_logits=self.segmentation(h)[..., 0],
            vn_positions=xv * scale,
            confidence=self.confidence(hv)[..., 0],
            pockets=_unit(self.pocket_projection(hv)),
            protein=_unit(self.protein_projection(hp)),
            protein_features=hp)

    def encode_ligands(self, ligands: jax.Array) -> tuple[jax.Array, jax.Array]:
        """(ℓ_p, ℓ_b), each [L, P] of unit norm, from ligand vectors [L, ligand_features]."""
        check_float_array("ligands", ligands, (None, self.options.ligand_features),
                          f"[L, {self.options.ligand_features}]")
        out = self.ligand_out(jax.nn.gelu(self.ligand_in(ligands), approximate=False))
        half = self.options.projection
        return _unit(out[:, :half]), _unit(out[:, half:])

    def project_protein(self, protein_features: jax.Array) -> jax.Array:
        """The unit protein embedding [B, P] from protein-node features [B, F] (for a stopped-gradient encoder)."""
        return _unit(self.protein_projection(protein_features))

    def __call__(self, points: jax.Array, features: jax.Array, weights: jax.Array, *,
                 vn_positions: jax.Array | None = None, key: jax.Array | None = None) -> ProteinOutput:
        """encode_protein with VNs from `virtual_node_init(points, weights, key)` unless vn_positions is given."""
        if vn_positions is None:
            vn_positions = self.virtual_node_init(points, weights, key)
        return self.encode_protein(points, features, weights, vn_positions)


def combined_scores(output: ProteinOutput, ligand_protein: jax.Array, ligand_pocket: jax.Array) -> jax.Array:
    """⟨P_b, ℓ_p,l⟩ + ⟨b_bk, ℓ_b,l⟩ for every protein b, VN k and ligand l: [B, K, L], in [−2, 2]."""
    protein = output.protein @ ligand_protein.T
    pocket = jnp.einsum("bkp,lp->bkl", output.pockets, ligand_pocket)
    return protein[:, None, :] + pocket


__all__ += ["combined_scores"]
