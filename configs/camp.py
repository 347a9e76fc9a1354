"""CAMP (icml26zoo.multimodal.camp, a reconstruction) on the synthetic complementary task (zoo_complementary:
class (z1 + z2) mod 3, two frozen random-MLP embeddings of width 32, 30% of the modalities missing).

Sphere dimension D = 64, J = 5 prototypes per class and modality, τ = 0.1; objective camp with the spec's
starting weights (λ_OT 0.1, λ_dom 0.01, λ_uni 0.01, ε = 0.05); Adam 3e-3, 300 steps of 64 samples.
`python -m icml26zoo.train --config camp --workdir /tmp/camp`. `camp_digits` is the same on the digits halves,
`camp_concat` the late-fusion MLP baseline.
"""

from icml26zoo.models.config import ModelConfig
from icml26zoo.train.config import DataConfig, OptimConfig, TrainConfig

FEATURE_DIMS = (32, 32)
NUM_CLASSES = 3
DATA_OPTIONS = (("raw_dim", 8), ("embed_dim", 32), ("noise", 0.5), ("missing_rate", 0.3),
                ("train_examples", 2048), ("eval_examples", 512))


def get_config() -> TrainConfig:
    model = ModelConfig(name="camp", d_model=64, num_layers=1, num_heads=1, num_kv_heads=1,
                        model_options=(("feature_dims", FEATURE_DIMS), ("num_classes", NUM_CLASSES),
                                       ("prototypes", 5), ("temperature", 0.1)))
    data = DataConfig(name="zoo_complementary", task_options=DATA_OPTIONS)
    optim = OptimConfig(name="adam", learning_rate=3e-3, warmup_steps=0, end_lr_fraction=1.0, weight_decay=0.0,
                        grad_clip_norm=0.0)
    return TrainConfig(model=model, data=data, optim=optim, objective="camp",
                       objective_options=(("ot_weight", 0.1), ("dominance_weight", 0.01),
                                          ("uniformity_weight", 0.01), ("epsilon", 0.05)),
                       batch_size=64, seq_len=2, num_steps=300, log_every=25, eval_every=0, eval_batches=0,
                       checkpoint_every=0, sample_length=0, tensorboard=False)
