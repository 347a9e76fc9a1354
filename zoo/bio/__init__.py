"""Protein structure models (issue 34): the global, coarse-to-fine Cα tokenizer of "Adaptive Protein
Tokenization" (arXiv 2602.06418) and the structure helpers it needs.

    structure   validation (NaN coordinates are a ValueError), centring, Kabsch alignment, aligned RMSD,
                nested-dropout prefix masks
    tokenizer   the registered model `protein_tokenizer` (encoder, FSQ tokens, prefix decoder)
    rna_design  ATL-FGD's registered model `atl_fgd` (3-D RNA inverse folding; rna_features, rna_layers,
                rna_teacher, rna_fold)
    conglude    ConGLUDe's registered model `conglude` (VN-EGNN protein encoder, ligand encoder; egnn layers,
                conglude_data synthetic complexes)
    geocoupling GeoCoupling's learned time coupling for co-design (arXiv 2606.01628) and the registered model
                `geocoupling_denoiser` (geocoupling_model)
"""

# Importing conglude, geocoupling and rna_design registers their models (conglude, geocoupling_denoiser, atl_fgd).
from icml26zoo.bio import conglude, geocoupling, rna_design, structure, tokenizer  # noqa: F401
from icml26zoo.bio.structure import aligned_rmsd, centre, check_structures, kabsch_rotation, nested_dropout_keep
from icml26zoo.bio.tokenizer import ProteinTokenizer, ProteinTokenizerOptions

__all__ = ["ProteinTokenizer", "ProteinTokenizerOptions", "aligned_rmsd", "centre", "check_structures",
           "kabsch_rotation", "nested_dropout_keep", "structure", "tokenizer"]
