"""ConGLUDe (icml26zoo.bio.conglude) on synthetic protein–ligand complexes (zoo_pockets), trained by objective
`conglude` (Dice, VN position, confidence and the three InfoNCE losses, plus the in-batch ligand-based BCE).

The spec's small faithful model: node width 32, 3 VN-EGNN layers, K = 4 virtual nodes, projection 32 (ligand MLP
136 → 64 → 64, split 32/32); proteins of 60-150 residues. AdamW with warm-up and cosine decay.
`python -m icml26zoo.train --config conglude --workdir /tmp/conglude`; `conglude_baseline` is the same with the
message passing removed (a per-residue MLP encoder, mean-pooled, no coordinates).
"""

from icml26zoo.models.config import ModelConfig
from icml26zoo.train.config import DataConfig, OptimConfig, TrainConfig

MAX_LENGTH = 150


def get_config() -> TrainConfig:
    model = ModelConfig(name="conglude", d_model=32, num_layers=3, num_heads=1, num_kv_heads=1, mlp_dim=0,
                        max_seq_len=MAX_LENGTH,
                        model_options=(("num_virtual_nodes", 4), ("projection", 32), ("encoder", "egnn")))
    data = DataConfig(name="zoo_pockets", task_options=(("min_length", 60), ("max_length", MAX_LENGTH),
                                                         ("train_examples", 512), ("eval_examples", 64)))
    return TrainConfig(model=model, data=data, objective="conglude",
                       optim=OptimConfig(learning_rate=1e-3, warmup_steps=20, weight_decay=0.01),
                       batch_size=16, seq_len=MAX_LENGTH, num_steps=300, log_every=25, eval_every=100,
                       eval_batches=0, checkpoint_every=0, sample_length=0, tensorboard=False)
