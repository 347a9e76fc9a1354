"""ConGLUDe's ligand featurisation from SMILES (the [chem] extra, RDKit, imported lazily): a Morgan/ECFP
fingerprint ⊕ a few RDKit descriptors, the small-model analogue of the paper's ECFP4 (2048 bits) ⊕ 210
robust-scaled descriptors (ml-jku/conglude conglude/utils/data_processing.py). The descriptors here are raw
(not robust-scaled: there is no training-set scaler in the zoo).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from icml26zoo.extras import require_extras
from icml26zoo.validation import check_int

__all__ = ["DESCRIPTOR_NAMES", "ligand_features_from_smiles"]

# RDKit descriptor functions (rdkit.Chem.Descriptors), in the output's order.
DESCRIPTOR_NAMES = ("MolWt", "MolLogP", "TPSA", "NumHDonors", "NumHAcceptors", "NumRotatableBonds", "RingCount",
                    "HeavyAtomCount")


def ligand_features_from_smiles(smiles: Sequence[str], *, bits: int = 128, radius: int = 2) -> np.ndarray:
    """float32 [M, bits + 8]: the Morgan fingerprint of `radius` (2: ECFP4) folded to `bits` bits, then the
    DESCRIPTOR_NAMES descriptors, one row per SMILES string. ValueError naming `smiles` for an empty list, a
    string that is not text, empty, unparsable, or a molecule with no atoms."""
    check_int("bits", bits)
    check_int("radius", radius, minimum=0)
    if isinstance(smiles, str) or not isinstance(smiles, Sequence) or not smiles:
        raise ValueError(f"smiles must be a non-empty sequence of SMILES strings, got {smiles!r}")
    require_extras("chem", what="ligand_features_from_smiles")
    from rdkit import Chem, RDLogger
    from rdkit.Chem import Descriptors, rdFingerprintGenerator

    RDLogger.DisableLog("rdApp.*")  # an unparsable SMILES is reported below, not on stderr
    generator = rdFingerprintGenerator.GetMorganGenerator(radius=radius, fpSize=bits)
    rows = []
    for index, text in enumerate(smiles):
        molecule = Chem.MolFromSmiles(text) if isinstance(text, str) and text.strip() else None
        if molecule is None or molecule.GetNumAtoms() == 0:
            raise ValueError(f"smiles[{index}] must be a valid SMILES string of a molecule with at least one atom, "
                             f"got {text!r}")
        fingerprint = generator.GetFingerprintAsNumPy(molecule).astype(np.float32)
        descriptors = [float(getattr(Descriptors, name)(molecule)) for name in DESCRIPTOR_NAMES]
        rows.append(np.concatenate([fingerprint, np.asarray(descriptors, np.float32)]))
    return np.stack(rows)
