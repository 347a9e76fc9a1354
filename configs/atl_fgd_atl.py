"""ATL (icml26zoo.bio.rna_design, model atl_fgd) without the FGD teacher on synthetic RNA hairpins (rna_hairpins).

Sizes shrunk for a 2-core CPU (the spec's: d = 128, 3 + 3 layers, k_max = 48, 4k structures): width 32, 2
encoder + 2 decoder gated MPNN layers, a candidate pool of k_max = 24 nearest nucleotides with target density
ρ = 8 / 24 (concrete gates, τ = 0.5, gate_mean aggregation), RBF range 24 Å (pair partners sit near 17-18 Å,
close to the default 20 Å cut-off), chains of 24-48 nucleotides. Objective rna_inverse_folding.
`python -m icml26zoo.train --config atl_fgd_atl --workdir /tmp/atl`. Siblings: atl_fgd_distill (ATL + FGD),
atl_fgd_knn (RDesign-style static kNN, k = 8).
"""

from icml26zoo.models.config import ModelConfig
from icml26zoo.train.config import DataConfig, OptimConfig, TrainConfig

MAX_LENGTH = 48


def get_config() -> TrainConfig:
    model = ModelConfig(name="atl_fgd", d_model=32, num_layers=2, max_seq_len=MAX_LENGTH,
                        model_options=(("n_dec", 2), ("k", 8), ("k_max", 24), ("rbf_max", 24.0),
                                       ("gate_kind", "concrete"), ("aggregation", "gate_mean")))
    data = DataConfig(name="rna_hairpins", task_options=(("min_length", 24), ("max_length", MAX_LENGTH),
                                                         ("train_examples", 1024), ("eval_examples", 128)))
    return TrainConfig(model=model, data=data, objective="rna_inverse_folding",
                       optim=OptimConfig(learning_rate=1e-3, warmup_steps=20, weight_decay=0.0),
                       batch_size=16, seq_len=MAX_LENGTH, num_steps=400, log_every=25, eval_every=200,
                       eval_batches=0, checkpoint_every=0, sample_length=0, tensorboard=False)
