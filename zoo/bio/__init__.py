"""Protein structure models (issue 34): the global, coarse-to-fine Cα tokenizer of "Adaptive Protein
Tokenization" (arXiv 2602.06418) and the structure helpers it needs.

    structure   validation (NaN coordinates are a ValueError), centring, Kabsch alignment, aligned RMSD,
                nested-dropout prefix masks
    tokenizer   the registered model `protein_tokenizer` (encoder, FSQ tokens, prefix decoder)
"""

from icml26zoo.bio import structure, tokenizer
from icml26zoo.bio.structure import aligned_rmsd, centre, check_structures, kabsch_rotation, nested_dropout_keep
from icml26zoo.bio.tokenizer import ProteinTokenizer, ProteinTokenizerOptions

__all__ = ["ProteinTokenizer", "ProteinTokenizerOptions", "aligned_rmsd", "centre", "check_structures",
           "kabsch_rotation", "nested_dropout_keep", "structure", "tokenizer"]
