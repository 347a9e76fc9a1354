"""`zoo_nucleotide`: synthetic DNA from a known hidden-Markov generator, as a TFDS dataset.

Each example is one sequence of `length` bases over A, C, G, T drawn by `nucleotide_hmm` (background
states with their own base compositions, and motifs planted as inverted-repeat pairs: see that module
for the generator). Features:

    "text"        the bases as an ASCII string, e.g. "ACGGT..." (read by the loader as bytes)
    "background"  int8 [length]  hidden background state of each base (0 AT-rich, 1 GC-rich, 2 uniform)
    "variant"     int8 [length]  motif variant covering each base (v < M forward motif v, v >= M reverse
                                 complement of motif v − M), −1 outside motifs
    "offset"      int8 [length]  offset of the base inside its motif, −1 outside

Tokenization is byte-level, like the stdlib corpus: a base is one ASCII byte, the model vocabulary stays
256 and the trainer's bits per byte *is* bits per base. That reuses the byte pipeline unchanged (packing,
the unigram baseline, samples) at the cost of 252 unused embedding rows, the same for every architecture.

Generation is a pure function of (length, examples per split, seed): the motifs come from
SeedSequence([seed, 1000]), the splits from SeedSequence([seed, split index]) (train 0, validation 1)
and the entropy-rate estimate from SeedSequence([seed, 2]), so the splits and the estimate use disjoint
random streams. The builder config name spells out every parameter (e.g. "l257_n4096_128_s0").
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np
import tensorflow_datasets as tfds

from icml26zoo.train.data import nucleotide_hmm
from icml26zoo.train.data.generated import SPLITS, Examples, GeneratedBuilder, GeneratedConfig, split_seed, split_size
from icml26zoo.validation import check_int

ASCII_CODES = np.frombuffer(nucleotide_hmm.BASES.encode("ascii"), np.uint8)
LABELS = ("background", "variant", "offset")


def to_text(codes: np.ndarray) -> bytes:
    """[n] base codes (0..3) -> b"ACGT..."."""
    return ASCII_CODES[np.asarray(codes, np.int64)].tobytes()


def to_codes(text: bytes | str | np.ndarray) -> np.ndarray:
    """ASCII bases (bytes, str or byte tokens [n]) -> [n] int64 codes; anything but A/C/G/T is a ValueError."""
    if isinstance(text, str):
        text = text.encode("ascii", errors="replace")
    tokens = np.frombuffer(text, np.uint8) if isinstance(text, bytes) else np.asarray(text)
    lookup = np.full(256, -1, np.int64)
    lookup[ASCII_CODES] = np.arange(nucleotide_hmm.NUM_BASES)
    codes = lookup[tokens.astype(np.int64)]
    if codes.size and codes.min() < 0:
        raise ValueError(f"text must hold only the bases {nucleotide_hmm.BASES!r}, got byte {tokens[codes < 0][0]}")
    return codes


def check_params(length: int, train_examples: int, eval_examples: int) -> None:
    """Raises ValueError unless the sizes are usable (a sequence needs 2 bases to give one target)."""
    for name, value, minimum in (("nucleotide_length", length, 2), ("nucleotide_train_examples", train_examples, 1),
                                 ("nucleotide_eval_examples", eval_examples, 1)):
        check_int(f"data.{name}", value, minimum=minimum)


@dataclasses.dataclass(kw_only=True)
class NucleotideConfig(GeneratedConfig):
    """Sequence length (plus sizes and seed); `name` must be `make_config(...)`'s name for them."""

    length: int


def make_config(length: int = 257, train_examples: int = 4096, eval_examples: int = 128,
                seed: int = 0) -> NucleotideConfig:
    """A config whose name encodes all its parameters."""
    check_params(length, train_examples, eval_examples)
    name = f"l{length}_n{train_examples}_{eval_examples}_s{seed}"
    return NucleotideConfig(name=name, length=length, train_examples=train_examples, eval_examples=eval_examples,
                            seed=seed, description="Synthetic DNA from a known hidden-Markov generator.")


def spec(config: NucleotideConfig) -> nucleotide_hmm.HmmSpec:
    """The generator of `config` (its motifs depend on the seed only)."""
    return nucleotide_hmm.make_spec(config.seed)


def generate_split(config: NucleotideConfig, split: str) -> dict[str, np.ndarray]:
    """The sequences and labels of `split` ({"codes": uint8 [N, length], ...}, see nucleotide_hmm.sample)."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {list(SPLITS)}, got {split!r}")
    return nucleotide_hmm.sample(spec(config), split_size(config, split), config.length, split_seed(config, split))


@functools.lru_cache(maxsize=8)
def entropy_rate(seed: int = 0) -> tuple[float, float]:
    """(bits per base, standard error) of the generator of `seed`: the lowest loss any model can reach."""
    return nucleotide_hmm.entropy_rate(nucleotide_hmm.make_spec(seed), seed)


def optimal_bits(seed: int, rows: list[np.ndarray]) -> tuple[float, int]:
    """(total bits, targets) of the Bayes-optimal predictor on `rows`: lists of base codes, each a piece of
    one sequence seen without earlier context (the first base of each row is not predicted)."""
    generator = nucleotide_hmm.make_spec(seed)
    total, count = 0.0, 0
    for length in sorted({len(row) for row in rows if len(row) > 1}):
        same = np.stack([row for row in rows if len(row) == length])
        bits = nucleotide_hmm.conditional_bits(generator, same)
        total, count = total + float(bits.sum()), count + bits.size
    return total, count


def motif_occurrences(variant: np.ndarray, offset: np.ndarray, motif_length: int,
                      num_motifs: int) -> dict[str, np.ndarray]:
    """Every planted motif that lies wholly inside its row, from a split's "variant" and "offset" labels.

    Args:
      variant, offset: int [N, n] labels of `generate_split` (or the TFDS features), −1 outside motifs.
      motif_length, num_motifs: the generator's L and M (`spec(config).motif_length`, `.num_motifs`).

    Returns:
      int64 [K] "row", "start" (offset-0 position) and "variant" (v < M: forward motif v; v >= M: the
      reverse complement of motif v − M, the second arm of a pair) per occurrence, in row-major order, and
      bool [K] "paired": a second arm whose first arm starts earlier in the same row, so that the context
      alone fixes which motif it is (a recall of the first arm rather than of the motif list).
    """
    variant, offset = np.asarray(variant, np.int64), np.asarray(offset, np.int64)
    if variant.shape != offset.shape or variant.ndim != 2:
        raise ValueError(f"variant and offset must be [N, n] label arrays of one shape, got {variant.shape} "
                         f"and {offset.shape}")
    rows, starts = np.nonzero(offset == 0)
    steps = np.arange(motif_length)
    whole = starts + motif_length <= variant.shape[1]
    rows, starts = rows[whole], starts[whole]
    window = starts[:, None] + steps
    kinds = variant[rows, starts]
    # A whole occurrence runs offsets 0 .. L−1 of one variant (a row's end would cut it short).
    complete = (offset[rows[:, None], window] == steps).all(axis=1) & (variant[rows[:, None], window] ==
                                                                      kinds[:, None]).all(axis=1)
    rows, starts, kinds = rows[complete], starts[complete], kinds[complete]
    paired = np.zeros(rows.size, bool)
    for index in np.flatnonzero(kinds >= num_motifs):
        earlier = np.flatnonzero(offset[rows[index], : starts[index]] == 0)
        paired[index] = earlier.size > 0 and variant[rows[index], earlier[-1]] == kinds[index] - num_motifs
    return {"row": rows, "start": starts, "variant": kinds, "paired": paired}


class ZooNucleotide(GeneratedBuilder):
    """Synthetic DNA sequences with their hidden labels; splits "train" and "validation"."""

    BUILDER_CONFIGS = [make_config()]

    def _features(self) -> dict[str, tfds.features.FeatureConnector]:
        length = self.builder_config.length
        labels = {name: tfds.features.Tensor(shape=(length,), dtype=np.int8) for name in LABELS}
        return {"text": tfds.features.Text(), **labels}

    def _generate_examples(self, split: str) -> Examples:
        sequences = generate_split(self.builder_config, split)
        for index, codes in enumerate(sequences["codes"]):
            labels = {name: sequences[name][index] for name in LABELS}
            yield f"{index:08d}", {"text": to_text(codes), **labels}
