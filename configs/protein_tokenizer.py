"""The global, coarse-to-fine protein tokenizer (icml26zoo.bio.tokenizer) on synthetic Cα chains (zoo_backbones).

A small tokenizer for a 2-core CPU: width 64, 2 encoder and 2 decoder blocks, 4 heads, FSQ
levels (8, 5, 5, 5) (1000 codes), 32 tokens per chain, chains of 32-64 residues; trained with nested dropout by
objective protein_reconstruction (random rotation augmentation, coordinate MSE). `python -m icml26zoo.train
--config protein_tokenizer --workdir /tmp/tok`; `protein_tokenizer_baseline` is the same without nested dropout.
"""

from icml26zoo.models.config import ModelConfig
from icml26zoo.train.config import DataConfig, OptimConfig, TrainConfig

MAX_LENGTH = 64


def get_config() -> TrainConfig:
    model = ModelConfig(name="protein_tokenizer", d_model=64, num_layers=2, num_heads=4, mlp_dim=128,
                        max_seq_len=MAX_LENGTH,
                        model_options=(("levels", (8, 5, 5, 5)), ("n_tokens", 32), ("decoder_layers", 2),
                                       ("nested_dropout", True)))
    data = DataConfig(name="zoo_backbones", task_options=(("min_length", 32), ("max_length", MAX_LENGTH),
                                                          ("train_examples", 1024), ("eval_examples", 128)))
    return TrainConfig(model=model, data=data, objective="protein_reconstruction",
                       optim=OptimConfig(learning_rate=1e-3, warmup_steps=30, weight_decay=0.01),
                       batch_size=32, seq_len=MAX_LENGTH, num_steps=600, log_every=25, eval_every=200,
                       eval_batches=0, checkpoint_every=0, sample_length=0, tensorboard=False)
