"""`zoo_mqar`: multi-query associative recall (MQAR) as a TFDS dataset, plus its numpy generator.

Each example is a fixed-length token sequence of P key-value pairs followed by P queries:

    k_1 v_1 k_2 v_2 ... k_P v_P   q_1 a_1 q_2 a_2 ... q_P a_P        (4P tokens)

The P keys of an example are distinct (drawn without replacement from K keys), values are drawn with
replacement from V values, and the queries are the same P keys in a fresh random order; a_j is the value
paired with q_j. Trained as a language model (inputs = tokens[:-1], targets = tokens[1:]), only the
predictions of the answers a_j carry loss weight: every other token is random and unpredictable.

Vocabulary layout (size 1 + K + V):
    0                      padding (never inside an example; rows are padded with it)
    1 ... K                keys      (key i is token 1 + i)
    K + 1 ... K + V        values    (value j is token 1 + K + j)

Generation is a pure function of (K, V, P, number of examples, seed, split): a numpy Generator seeded by
SeedSequence([seed, split index]). The builder config name spells out every parameter, e.g.
"k64_v64_p8_n20000_1000_s0", so datasets with different settings never collide on disk.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import tensorflow_datasets as tfds

from icml26zoo.train.data.generated import Examples, GeneratedBuilder, GeneratedConfig, split_seed, split_size
from icml26zoo.validation import check_int


def vocab_size(num_keys: int, num_values: int) -> int:
    """Size of the MQAR vocabulary: padding + keys + values."""
    return 1 + num_keys + num_values


def sequence_length(num_pairs: int) -> int:
    """Tokens per example: P key-value pairs and P query-answer pairs."""
    return 4 * num_pairs


def answer_mask(num_pairs: int) -> np.ndarray:
    """[4P] bool: True at the positions holding an answer a_j (the tokens that should be predicted)."""
    mask = np.zeros(sequence_length(num_pairs), dtype=bool)
    mask[2 * num_pairs + 1 :: 2] = True
    return mask


def check_params(num_keys: int, num_values: int, num_pairs: int) -> None:
    """Raises ValueError unless the parameters describe a valid task (P distinct keys need P <= K)."""
    for name, value in (("mqar_num_keys", num_keys), ("mqar_num_values", num_values),
                        ("mqar_num_pairs", num_pairs)):
        check_int(f"data.{name}", value)
    if num_pairs > num_keys:
        raise ValueError(f"data.mqar_num_pairs ({num_pairs}) must be <= data.mqar_num_keys ({num_keys}): "
                         "the keys of one example are distinct")


def generate(num_keys: int, num_values: int, num_pairs: int, num_examples: int, seed: int) -> np.ndarray:
    """Generates MQAR examples deterministically from `seed`.

    Returns:
      [num_examples, 4 * num_pairs] int32 tokens in the layout of the module docstring.
    """
    check_params(num_keys, num_values, num_pairs)
    rng = np.random.default_rng(seed)
    n, p = num_examples, num_pairs
    # P distinct keys per example: the first P columns of a random permutation of all K keys.
    keys = np.argsort(rng.random((n, num_keys)), axis=1)[:, :p]
    values = rng.integers(0, num_values, size=(n, p))
    order = np.argsort(rng.random((n, p)), axis=1)
    key_tokens, value_tokens = 1 + keys, 1 + num_keys + values
    tokens = np.empty((n, sequence_length(p)), dtype=np.int32)
    tokens[:, 0 : 2 * p : 2] = key_tokens
    tokens[:, 1 : 2 * p : 2] = value_tokens
    tokens[:, 2 * p :: 2] = np.take_along_axis(key_tokens, order, axis=1)
    tokens[:, 2 * p + 1 :: 2] = np.take_along_axis(value_tokens, order, axis=1)
    return tokens


@dataclasses.dataclass(kw_only=True)
class MqarConfig(GeneratedConfig):
    """Task parameters; `name` must be `make_config(...)`'s name for them."""

    num_keys: int
    num_values: int
    num_pairs: int


def make_config(num_keys: int = 64, num_values: int = 64, num_pairs: int = 8, train_examples: int = 20_000,
                eval_examples: int = 1_000, seed: int = 0) -> MqarConfig:
    """A config whose name encodes all its parameters."""
    check_params(num_keys, num_values, num_pairs)
    name = f"k{num_keys}_v{num_values}_p{num_pairs}_n{train_examples}_{eval_examples}_s{seed}"
    return MqarConfig(name=name, num_keys=num_keys, num_values=num_values, num_pairs=num_pairs,
                      train_examples=train_examples, eval_examples=eval_examples, seed=seed,
                      description="Multi-query associative recall.")


class ZooMqar(GeneratedBuilder):
    """MQAR examples {"tokens": int32 [4P]}; splits "train" and "validation" with independent seeds."""

    BUILDER_CONFIGS = [make_config()]

    def _features(self) -> dict[str, tfds.features.FeatureConnector]:
        length = sequence_length(self.builder_config.num_pairs)
        return {"tokens": tfds.features.Tensor(shape=(length,), dtype=np.int32)}

    def _generate_examples(self, split: str) -> Examples:
        config = self.builder_config
        tokens = generate(config.num_keys, config.num_values, config.num_pairs, split_size(config, split),
                          split_seed(config, split))
        for index, row in enumerate(tokens):
            yield f"{index:08d}", {"tokens": row}
