"""Builders shared by the small presets in configs/: one architecture shape, any registered mixer.

Every `<mixer>_tiny.py` preset is a 2-layer, 64-wide LM on the built-in byte corpus and every
`<mixer>_mqar.py` preset the same model on multi-query associative recall, so runs of different mixers
differ only in the mixer. `classify_tiny.py` trains the same model as a sequence classifier.

The `eden_<arch>_<size>.py` presets (`eden_lm`) are the EDEN comparison (ICML 2026, docs/papers.md): Llama, Mamba
and Hyena backbones with matched parameter counts per size, on the synthetic nucleotide dataset or the
byte corpus, all with one recipe (the experiment `eden` trains the grid at an equal token budget).
"""

from __future__ import annotations

from typing import Any

from icml26zoo.models.config import ModelConfig
from icml26zoo.train.config import DataConfig, OptimConfig, TrainConfig

Options = tuple[tuple[str, Any], ...]


def tiny_model(mixer: str, mixer_options: Options = (), *, vocab_size: int, max_seq_len: int) -> ModelConfig:
    """d_model 64, 2 layers, 4 query heads sharing 2 key/value heads."""
    return ModelConfig(
        name="llama", mixer=mixer, mixer_options=mixer_options, vocab_size=vocab_size, d_model=64, num_layers=2,
        num_heads=4, num_kv_heads=2, max_seq_len=max_seq_len,
    )


def stdlib_lm(model: ModelConfig, *, warmup_steps: int, learning_rate: float = 3e-3, **run: Any) -> TrainConfig:
    """`model` as a byte LM on the stdlib corpus (AdamW at `learning_rate`, warmup then cosine); `run` holds the
    other TrainConfig fields."""
    return TrainConfig(model=model, data=DataConfig(name="pystdlib"),
                       optim=OptimConfig(learning_rate=learning_rate, warmup_steps=warmup_steps), **run)


def tiny_byte_lm(mixer: str, mixer_options: Options = ()) -> TrainConfig:
    """50 steps of 8 x 64 bytes of the stdlib corpus: a quick smoke run, with a generated sample."""
    model = tiny_model(mixer, mixer_options, vocab_size=256, max_seq_len=256)
    return stdlib_lm(model, warmup_steps=10, batch_size=8, seq_len=64, num_steps=50, log_every=5, eval_batches=4,
                     checkpoint_every=25, sample_length=32)


def tiny_task(mixer: str, mixer_options: Options, data: DataConfig, **run: Any) -> TrainConfig:
    """The tiny model on a synthetic task (vocabulary <= 64): learning rate 1e-2, batches of 16, no samples.

    `run` holds the other TrainConfig fields.
    """
    return TrainConfig(model=tiny_model(mixer, mixer_options, vocab_size=64, max_seq_len=64), data=data,
                       optim=OptimConfig(learning_rate=1e-2, warmup_steps=10), batch_size=16, log_every=10,
                       sample_length=0, **run)


def tiny_mqar(mixer: str, mixer_options: Options = ()) -> TrainConfig:
    """120 steps of MQAR: 16 keys, 16 values, 4 pairs per example, 32 tokens per row.

    The vocabulary (64) covers padding + keys + values (33); the sizes match the trainer's own MQAR tests.
    """
    data = DataConfig(name="mqar", mqar_num_keys=16, mqar_num_values=16, mqar_num_pairs=4,
                      mqar_train_examples=2000, mqar_eval_examples=64)
    return tiny_task(mixer, mixer_options, data, seq_len=32, num_steps=120, eval_batches=2, checkpoint_every=60)


def tiny_classifier(mixer: str, mixer_options: Options = ()) -> TrainConfig:
    """150 steps of sequence classification on `topics` (4 classes, 65 tokens per row; chance 25%).

    The objective mean-pools the model's logits over each row and reads the class from output columns
    0 .. 3, which the dataset keeps out of its inputs (zoo.losses.objectives.classification_objective).
    """
    return tiny_task(mixer, mixer_options, DataConfig(name="topics", topics_length=65), objective="classification",
                     seq_len=64, num_steps=150, eval_every=50, eval_batches=0, checkpoint_every=75)


EDEN_ARCHS = {"llama": "attention", "mamba": "mamba", "hyena": "hyena"}
EDEN_MIXER_OPTIONS: dict[str, Options] = {
    "attention": (),
    "mamba": (("expand", 2), ("state_size", 16), ("conv_size", 4)),
    "hyena": (("order", 2), ("filter_order", 64), ("emb_dim", 5), ("short_filter_order", 3)),
}
# (d_model, num_layers) per size and architecture, widths tuned so the total parameter counts (embedding
# included) match Llama's within 6% (tests/train/test_eden.py prints them). As in EDEN, a
# Mamba block is the mixer alone (no MLP, `mlp_dim=0`) and Mamba gets twice the layers; Llama and Hyena
# blocks keep the zoo's SwiGLU MLP. A Hyena layer (4·D² plus a ~9k-parameter filter FFN) costs more than
# attention (4·D²), so Hyena gets a narrower residual stream.
EDEN_SHAPES = {
    "tiny": {"llama": (32, 1), "mamba": (28, 2), "hyena": (24, 1)},
    "small": {"llama": (48, 2), "mamba": (40, 4), "hyena": (32, 2)},
    "medium": {"llama": (96, 3), "mamba": (84, 6), "hyena": (88, 3)},
}
EDEN_DATASETS = ("nucleotide", "pystdlib")
EDEN_LEARNING_RATE = 3e-3
# Hyena's implicit-filter FFN (its Linear layers and Sin frequencies) trains in its own optimizer group, as
# in safari: learning rate 1e-3 and no weight decay (the design notes). The group's rate is a multiple of the peak,
# so it follows the shared warmup-cosine schedule (and scales with an overridden optim.learning_rate).
HYENA_FILTER_LEARNING_RATE = 1e-3
HYENA_FILTER_GROUP = (r"mixer/filter_(layers|freqs|out)/", HYENA_FILTER_LEARNING_RATE / EDEN_LEARNING_RATE, 0.0)


def eden_model(arch: str, size: str, *, max_seq_len: int) -> ModelConfig:
    """The `arch` backbone at `size` (EDEN): Llama (MHA, RoPE, head_dim 16), Mamba1 or Hyena."""
    if arch not in EDEN_ARCHS:
        raise ValueError(f"arch must be one of {list(EDEN_ARCHS)}, got {arch!r}")
    if size not in EDEN_SHAPES:
        raise ValueError(f"size must be one of {list(EDEN_SHAPES)}, got {size!r}")
    d_model, num_layers = EDEN_SHAPES[size][arch]
    mixer = EDEN_ARCHS[arch]
    # Heads matter to attention only; the other mixers ignore them (2 keeps ModelConfig's checks happy).
    heads = d_model // 16 if mixer == "attention" else 2
    return ModelConfig(
        name="llama", mixer=mixer, mixer_options=EDEN_MIXER_OPTIONS[mixer], vocab_size=256, d_model=d_model,
        num_layers=num_layers, num_heads=heads, num_kv_heads=heads, max_seq_len=max_seq_len,
        mlp_dim=0 if arch == "mamba" else None,
    )


def eden_lm(arch: str, size: str, dataset: str = "nucleotide", *, num_steps: int = 120, batch_size: int = 8,
            seq_len: int = 128) -> TrainConfig:
    """One cell of the EDEN comparison: `arch` at `size` on `dataset`, with a recipe shared by all cells.

    On "nucleotide" each sequence holds seq_len + 1 bases, so every row is exactly one whole sequence and
    the generator's Bayes-optimal loss on the eval rows is exact (icml26zoo.repro.eden). The same
    backbones run on the built-in byte corpus with dataset="pystdlib" (the vocabulary is 256 bytes in both).
    Hyena's filter FFN gets its own optimizer group (`HYENA_FILTER_GROUP`).
    """
    if dataset not in EDEN_DATASETS:
        raise ValueError(f"dataset must be one of {list(EDEN_DATASETS)}, got {dataset!r}")
    nucleotide = dataset == "nucleotide"
    return TrainConfig(
        model=eden_model(arch, size, max_seq_len=seq_len),
        data=DataConfig(name=dataset, nucleotide_length=seq_len + 1),
        optim=OptimConfig(learning_rate=EDEN_LEARNING_RATE, warmup_steps=max(1, num_steps // 10),
                          param_groups=(HYENA_FILTER_GROUP,) if arch == "hyena" else ()),
        batch_size=batch_size,
        seq_len=seq_len,
        num_steps=num_steps,
        log_every=10,
        # The whole nucleotide validation split (128 sequences); 16 batches of the much larger byte corpus.
        eval_batches=0 if nucleotide else 16,
        checkpoint_every=num_steps // 2,
        # The loop's sample starts from the bytes "def ", a Python prompt.
        sample_length=0 if nucleotide else 32,
    )
