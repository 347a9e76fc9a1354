"""RL vs SFT on sparse Boolean chains (arXiv 2511.17852): the one-layer transformer trained on 3-PARITY of
16 bits along its chain of thought by SFT
without teacher forcing (objective `boolean_chain`, mode "free_running": the context is the model's own greedy
chain, the targets the true one).

    python -m icml26zoo.train --config boolean_sft --workdir /tmp/bool_sft
    python -m icml26zoo.train --config boolean_sft --workdir /tmp/bool_tf \
        'objective_options=(("mode","teacher_forcing"),)'

eval/accuracy is the free-running step accuracy of the chain (chance 1/2 per step). `boolean_chain` (below) builds
the same run for any mode; `configs/boolean_rl.py` is the RL run.
"""

from __future__ import annotations

from icml26zoo.models.config import ModelConfig
from icml26zoo.train.config import DataConfig, OptimConfig, TrainConfig

NUM_BITS, SPARSITY = 16, 3


def spec_adam(learning_rate: float) -> OptimConfig:
    """The spec's optimizer: Adam (β2 0.999) at a constant learning rate: no warmup, decay, weight decay or
    clipping. A cosine decay had shrunk the rate to almost nothing by the time free-running SFT got its
    first step right, so its second step never moved."""
    return OptimConfig(name="adam", learning_rate=learning_rate, warmup_steps=0, end_lr_fraction=1.0, weight_decay=0.0,
                       b2=0.999, grad_clip_norm=0.0)


def boolean_chain(mode: str, learning_rate: float, num_steps: int, *, d_model: int = 64,
                  batch_size: int = 256) -> TrainConfig:
    """The spec-16 model (one layer, one head, learned absolute positions, no RoPE; MLP 4 x d_model) on
    k-PARITY chains.

    One example per row: seq_len = d + k - 2 next-token positions, the chain steps weighted 1.
    """
    data = DataConfig(name="sparse_boolean", task_options=(
        ("num_bits", NUM_BITS), ("sparsity", SPARSITY), ("train_examples", 65_536), ("eval_examples", 1024)))
    model = ModelConfig(name="one_layer", mixer="attention", mixer_options=(("position", "none"),),
                        vocab_size=3, d_model=d_model, num_layers=1, num_heads=1, num_kv_heads=1,
                        mlp_dim=4 * d_model,
                        mlp_activation="gelu", max_seq_len=NUM_BITS + SPARSITY - 2,
                        model_options=(("max_positions", NUM_BITS + SPARSITY - 2),))
    return TrainConfig(model=model, data=data, optim=spec_adam(learning_rate),
                       objective="boolean_chain", objective_options=(("mode", mode),), batch_size=batch_size,
                       seq_len=NUM_BITS + SPARSITY - 2, num_steps=num_steps, log_every=25, eval_every=100,
                       eval_batches=0, checkpoint_every=0, sample_length=0)


def get_config() -> TrainConfig:
    return boolean_chain("free_running", learning_rate=1e-3, num_steps=600)
