"""GeoCoupling's lower level on the fold-and-label toy (icml26zoo.bio.geocoupling, objective geocoupling_codesign,
dataset fold_and_label): the two-time denoiser of width 64, 2 blocks, 4 heads over 12 residues, trained at times on
a band around the coupling curve (the diagonal until a bi-level run moves it; repro/geocoupling.py) mixed with 20%
random-coupling times. `python -m icml26zoo.train --config geocoupling --workdir /tmp/geo`. The baselines are
objective_options train_times="sync" (synchronous) and "random" (MultiFlow's coupling).
"""

from icml26zoo.models.config import ModelConfig
from icml26zoo.train.config import DataConfig, OptimConfig, TrainConfig

RESIDUES = 12


def get_config() -> TrainConfig:
    model = ModelConfig(name="geocoupling_denoiser", d_model=64, num_layers=2, num_heads=4, mlp_dim=128,
                        max_seq_len=RESIDUES, model_options=(("num_tokens", 4),))
    data = DataConfig(name="fold_and_label", task_options=(("train_examples", 4096), ("eval_examples", 256)))
    return TrainConfig(model=model, data=data, objective="geocoupling_codesign",
                       objective_options=(("train_times", "band"), ("knots", 16)),
                       optim=OptimConfig(learning_rate=1e-3, warmup_steps=100, weight_decay=0.01),
                       batch_size=128, seq_len=RESIDUES, num_steps=3000, log_every=50, eval_every=500,
                       eval_batches=0, checkpoint_every=500, sample_length=0, tensorboard=False)
