"""Neural collapse by design on scikit-learn's digits: NONL with learned prototypes (the paper's default loss).

A 2-layer, 32-wide attention classifier reads each 8x8 image as 64 pixel tokens; its mean-pooled, L2-normalised
final hidden state is trained against the normalised output-head columns 0 .. 9 (the class prototypes) with
NONL at τ = 0.1 (`icml26zoo.losses.nc_objectives`). Other losses: `objective=nc_ntce_k10`,
`nc_normface_k10`, `nc_nonl_etf_k10` (fixed simplex-ETF prototypes), `nc_scl_k10`, or `classification`
(cross-entropy); presets nc_digits_ntce and nc_digits_ce. Needs the `sklearn` extra.

    python -m icml26zoo.train --config nc_digits --workdir /tmp/nc_digits
"""

from icml26zoo.models.config import ModelConfig
from icml26zoo.train.config import DataConfig, OptimConfig, TrainConfig

OBJECTIVE = "nc_nonl_k10"


def digits_classifier(objective: str, *, num_steps: int = 600) -> TrainConfig:
    """`objective` on digits: batches of 128 images (every class in nearly every batch), AdamW 3e-3."""
    model = ModelConfig(name="llama", mixer="attention", vocab_size=32, d_model=32, num_layers=2, num_heads=4,
                        num_kv_heads=2, max_seq_len=64)
    data = DataConfig(name="digits", eval_split="test")
    optim = OptimConfig(learning_rate=3e-3, warmup_steps=30, weight_decay=1e-4)
    return TrainConfig(model=model, data=data, optim=optim, objective=objective, batch_size=128, seq_len=64,
                       num_steps=num_steps, log_every=50, eval_every=200, eval_batches=0, checkpoint_every=300,
                       sample_length=0)


def get_config() -> TrainConfig:
    return digits_classifier(OBJECTIVE)
