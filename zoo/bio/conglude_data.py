"""Synthetic proteins with planted pockets and ligands of matching pocket types, for ConGLUDe (offline, NumPy).

A fixed "world" (drawn once from WORLD_SEED, shared by every split and evaluation) holds what stays constant
across examples: per-residue-type feature vectors (the stand-in for ESM-2 embeddings), one feature signature per
pocket type, and per pocket type a Bernoulli fingerprint profile and a descriptor mean.

    protein   N residues as a compact random walk of 3.8 Å steps: each step's direction is a random unit vector
              plus a pull towards the centroid that grows with the distance from it (the compaction), redrawn
              while it comes closer than 3 Å to an earlier residue. Residue types uniform over 20.
    pockets   1 or 2 per protein, of distinct types out of 4: a centre is the mean of the residues within 8 Å of
              a surface residue (one of the 30% farthest from the centroid; a second pocket's centre lies
              >= 16 Å from the first). Residues within 8 Å of a centre are that pocket's binding site and get its
              type's signature added to their features.
    features  type vector + 0.3·N(0, 1) noise (+ signature): float32 [N, RESIDUE_FEATURES].
    ligand    FINGERPRINT_BITS Bernoulli bits from its pocket type's profile (0.05 background, 0.6 on 20 bits of
              the type) ⊕ DESCRIPTORS descriptors N(μ_type, 1); a decoy (type −1) has background bits and N(0, 1)
              descriptors.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import numpy as np

__all__ = ["DESCRIPTORS", "FINGERPRINT_BITS", "LIGAND_FEATURES", "NUM_POCKET_TYPES", "RESIDUE_FEATURES",
           "TARGET_WIDTH", "Protein", "World", "ligands", "pack_targets", "protein",
           "unpack_targets", "world"]

WORLD_SEED = 34_020_826
RESIDUE_TYPES, RESIDUE_FEATURES, NUM_POCKET_TYPES = 20, 32, 4
FINGERPRINT_BITS, DESCRIPTORS = 128, 8
LIGAND_FEATURES = FINGERPRINT_BITS + DESCRIPTORS
CA_STEP, CLASH, POCKET_RADIUS, POCKET_SEPARATION = 3.8, 3.0, 8.0, 16.0
FEATURE_NOISE, SIGNATURE_SCALE = 0.3, 1.0
BACKGROUND_BIT, TYPE_BIT, TYPE_BITS = 0.05, 0.6, 20
STEP_TRIES, CHAIN_TRIES = 32, 200
COMPACTNESS = 3.6  # Å; the pull's length scale is COMPACTNESS · N^(1/3), about a globule's radius


@dataclasses.dataclass(frozen=True)
class World:
    """The fixed tables: residue_vectors [20, F], signatures [4, F], profiles [4, bits], descriptor_means [4, 8]."""

    residue_vectors: np.ndarray
    signatures: np.ndarray
    profiles: np.ndarray
    descriptor_means: np.ndarray


@functools.cache
def world() -> World:
    rng = np.random.default_rng(WORLD_SEED)
    signatures = rng.normal(size=(NUM_POCKET_TYPES, RESIDUE_FEATURES))
    signatures *= SIGNATURE_SCALE * np.sqrt(RESIDUE_FEATURES) / np.linalg.norm(signatures, axis=1, keepdims=True)
    profiles = np.full((NUM_POCKET_TYPES, FINGERPRINT_BITS), BACKGROUND_BIT)
    for kind in range(NUM_POCKET_TYPES):
        profiles[kind, rng.choice(FINGERPRINT_BITS, TYPE_BITS, replace=False)] = TYPE_BIT
    return World(rng.normal(size=(RESIDUE_TYPES, RESIDUE_FEATURES)), signatures, profiles,
                 rng.normal(size=(NUM_POCKET_TYPES, DESCRIPTORS)))


@dataclasses.dataclass(frozen=True)
class Protein:
    """coordinates [N, 3] Å, features [N, F], centres [P, 3] Å, types int [P], sites bool [P, N] (P = 1 or 2)."""

    coordinates: np.ndarray
    features: np.ndarray
    centres: np.ndarray
    types: np.ndarray
    sites: np.ndarray


def compact_walk(length: int, rng: np.random.Generator) -> np.ndarray:
    """Cα coordinates [length, 3] (Å) of a clash-free compact random walk (module docstring)."""
    target_radius = COMPACTNESS * length ** (1.0 / 3.0)
    for _ in range(CHAIN_TRIES):
        points = np.zeros((length, 3))
        for index in range(1, length):
            pull = (points[:index].mean(axis=0) - points[index - 1]) / target_radius
            directions = rng.normal(size=(STEP_TRIES, 3))
            directions = directions / np.linalg.norm(directions, axis=1, keepdims=True) + pull
            candidates = points[index - 1] + CA_STEP * directions / np.linalg.norm(directions, axis=1, keepdims=True)
            gaps = np.linalg.norm(candidates[:, None] - points[None, :index], axis=-1).min(axis=1)
            free = np.flatnonzero(gaps >= CLASH)
            if not free.size:
                break
            points[index] = candidates[free[0]]
        else:
            return points
    raise RuntimeError(f"no clash-free walk of {length} residues in {CHAIN_TRIES} tries")


def _pocket_centre(coordinates: np.ndarray, rng: np.random.Generator, avoid: np.ndarray | None) -> np.ndarray | None:
    radial = np.linalg.norm(coordinates - coordinates.mean(axis=0), axis=1)
    surface = np.argsort(radial)[int(0.7 * len(coordinates)):]
    rng.shuffle(surface)
    for index in surface:
        near = np.linalg.norm(coordinates - coordinates[index], axis=1) < POCKET_RADIUS
        centre = coordinates[near].mean(axis=0)
        if avoid is None or np.linalg.norm(centre - avoid) >= POCKET_SEPARATION:
            return centre
    return None


def protein(length: int, num_pockets: int, rng: np.random.Generator) -> Protein:
    """One protein of `length` residues with `num_pockets` (1 or 2) pockets of distinct random types, centred at
    the origin (a second pocket that finds no surface residue 16 Å from the first is dropped)."""
    tables = world()
    coordinates = compact_walk(length, rng)
    coordinates = coordinates - coordinates.mean(axis=0)
    residue_types = rng.integers(RESIDUE_TYPES, size=length)
    features = tables.residue_vectors[residue_types] + FEATURE_NOISE * rng.normal(size=(length, RESIDUE_FEATURES))
    types = rng.choice(NUM_POCKET_TYPES, num_pockets, replace=False)
    centres, sites = [], []
    for kind in types:
        centre = _pocket_centre(coordinates, rng, centres[0] if centres else None)
        if centre is None:
            break
        site = np.linalg.norm(coordinates - centre, axis=1) < POCKET_RADIUS
        features[site] += tables.signatures[kind]
        centres.append(centre)
        sites.append(site)
    return Protein(coordinates.astype(np.float32), features.astype(np.float32), np.asarray(centres, np.float32),
                   np.asarray(types[: len(centres)], np.int32), np.asarray(sites))


def ligands(types: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Ligand vectors float32 [L, FINGERPRINT_BITS + DESCRIPTORS] for pocket types int [L] (−1: a decoy)."""
    tables = world()
    types = np.asarray(types)
    decoy = types < 0
    profiles = np.where(decoy[:, None], BACKGROUND_BIT, tables.profiles[np.maximum(types, 0)])
    bits = (rng.random(profiles.shape) < profiles).astype(np.float32)
    means = np.where(decoy[:, None], 0.0, tables.descriptor_means[np.maximum(types, 0)])
    descriptors = means + rng.normal(size=means.shape)
    return np.concatenate([bits, descriptors.astype(np.float32)], axis=1)


# The dataset's per-residue `targets` [N, TARGET_WIDTH] of one complex (protein + one ligand of one of its pockets):
# column SITE on every residue: 1 on the binding site of the complex's pocket; row 0 only, the complex's fields:
# CENTRE (3, Å), TYPES (2: the complex's pocket type, then the protein's other pocket type or −1), LIGAND.
SITE, CENTRE, TYPES, LIGAND = 0, slice(1, 4), slice(4, 6), slice(6, 6 + LIGAND_FEATURES)
TARGET_WIDTH = 6 + LIGAND_FEATURES


def pack_targets(chain: Protein, pocket: int, ligand: np.ndarray) -> np.ndarray:
    """targets float32 [N, TARGET_WIDTH] of `chain` with its pocket `pocket` and that pocket's ligand vector."""
    targets = np.zeros((len(chain.coordinates), TARGET_WIDTH), np.float32)
    targets[:, SITE] = chain.sites[pocket]
    targets[0, CENTRE] = chain.centres[pocket]
    others = [int(t) for i, t in enumerate(chain.types) if i != pocket]
    targets[0, TYPES] = [chain.types[pocket], others[0] if others else -1]
    targets[0, LIGAND] = ligand
    return targets


def unpack_targets(targets: Any) -> tuple[Any, Any, Any, Any]:
    """(site [B, N], centre [B, 3], types [B, 2] (−1: none), ligand [B, LIGAND_FEATURES]) of batched targets
    [B, N, TARGET_WIDTH] (NumPy or JAX arrays)."""
    return targets[..., SITE], targets[:, 0, CENTRE], targets[:, 0, TYPES], targets[:, 0, LIGAND]
