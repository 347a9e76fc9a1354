"""PCFG next-token prediction ("How Transformers Represent Hierarchies: A Local-to-Global
Mechanism", ICML 2026): sentences sampled from a random binary PCFG in Chomsky normal form, one per row.

The grammar is a pure function of the grammar options (`grammar_of`: nonterminals, terminals, rules per
nonterminal, binary mass, Dirichlet concentration, grammar_seed), so the dataset and the `pcfg_lm`
objective, which computes the exact grammar-induced next-token distribution of every prefix
(`icml26zoo.pcfg.exact`), agree on it; `seed` only drives the sampling of the splits
(SeedSequence([seed, split])). A grammar that does not terminate (binary_probability >= 1/2) is a
ValueError naming data.task_options option 'binary_probability'. Sentences longer than `max_length` words
are redrawn (rejection sampling): `icml26zoo.pcfg.exact.length_distribution` gives the
rejected mass, 3.2% for the defaults (mean sentence length 4.9 words). The rows thus follow the grammar
conditioned on n <= max_length, while `pcfg_lm`'s exact distribution is the grammar's own (unconditioned,
the standard definition): the two differ only through that mass, mostly at long prefixes. Generator and
probe targets are reconstructions: the paper's generator is not published.

Row layout: <bos> w_1 .. w_n <eos>, padded with 0 to max_length + 2 tokens in storage; each document is
cut to its n + 2 tokens, so one sentence fills one row ("single" layout, whatever data.pack says: the exact
distribution needs every prefix from <bos>). Every target has weight 1, EOS included, so the model learns
the whole distribution P(w_{t+1} | w_1..w_t), the first word and the end of the sentence too.

Vocabulary layout (size 3 + num_terminals, `icml26zoo.pcfg.rows`): 0 padding, 1 <bos>, 2 <eos>, 3 + a terminal a.

Each example also stores its sampled parse's tree facts for probing (one entry per token, 0 on <bos>,
<eos> and padding): `depth` (binary nodes above the word's preterminal) and `boundary` (1 when a
constituent of two or more words ends at the word); its label is the sentence length n.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import tensorflow_datasets as tfds

from icml26zoo.pcfg.grammar import Grammar, RandomGrammarSpec, sample_sentences
from icml26zoo.pcfg.rows import BOS, EOS, FIRST_TERMINAL, vocab_size
from icml26zoo.train.config import DataConfig
from icml26zoo.train.data.documents import read_arrays
from icml26zoo.train.data.generated import Examples, split_seed, split_size
from icml26zoo.train.data.registry import register_dataset
from icml26zoo.train.data.tasks import FIELD, Task, TaskBuilder, TaskDataset, TaskOptions, check_option, make_config

MAX_SENTENCE = 64


@dataclasses.dataclass(frozen=True)
class PCFGOptions(TaskOptions):
    """A random CNF grammar (N nonterminals, Σ terminals, sparse rules, binary mass, Dirichlet α, grammar seed)
    and sentences of at most max_length words."""

    num_nonterminals: int = 8
    num_terminals: int = 16
    binary_rules: int = 4
    terminal_rules: int = 4
    binary_probability: float = 0.4
    concentration: float = 1.0
    grammar_seed: int = 0
    max_length: int = 24

    def __post_init__(self) -> None:
        super().__post_init__()
        check_option("max_length", self.max_length, 2, MAX_SENTENCE)
        check_option("num_terminals", self.num_terminals, 1, 256)
        check_option("num_nonterminals", self.num_nonterminals, 2, 64)
        check_option("binary_rules", self.binary_rules, 1, (self.num_nonterminals - 1) ** 2)
        check_option("terminal_rules", self.terminal_rules, 1, self.num_terminals)
        check_option("grammar_seed", self.grammar_seed, 0)
        try:
            self.grammar_spec()
        except ValueError as error:
            name = str(error).split()[0]
            raise ValueError(f"{FIELD} option {name!r}: {error}") from None

    def grammar_spec(self) -> RandomGrammarSpec:
        """The options that define the grammar (not the sampling seed, split sizes or max_length)."""
        return RandomGrammarSpec(self.num_nonterminals, self.num_terminals, self.binary_rules, self.terminal_rules,
                                 self.binary_probability, self.concentration, self.grammar_seed)


def grammar_of(options: PCFGOptions) -> Grammar:
    """The grammar the options define (cached; ValueError naming grammar.binary if it does not terminate)."""
    return options.grammar_spec().grammar()


def sample_rows(options: PCFGOptions, num_examples: int, seed) -> dict[str, np.ndarray]:
    """tokens, depth, boundary int32 [N, max_length + 2] and lengths int32 [N] (words per sentence)."""
    width = options.max_length + 2
    rows = {name: np.zeros((num_examples, width), np.int32) for name in ("tokens", "depth", "boundary")}
    lengths = np.zeros(num_examples, np.int32)
    for index, sample in enumerate(sample_sentences(grammar_of(options), num_examples, seed, options.max_length)):
        n = sample.words.size
        rows["tokens"][index, : n + 2] = np.concatenate([[BOS], FIRST_TERMINAL + sample.words, [EOS]])
        rows["depth"][index, 1 : n + 1] = sample.depth
        rows["boundary"][index, 1 : n + 1] = sample.boundary
        lengths[index] = n
    return rows | {"lengths": lengths}


class PCFG(Task):
    options_class = PCFGOptions

    @staticmethod
    def length(options: PCFGOptions) -> int:
        return options.max_length + 2

    @staticmethod
    def vocab_size(options: PCFGOptions) -> int:
        return vocab_size(options.num_terminals)

    @staticmethod
    def loss_weights(options: PCFGOptions) -> np.ndarray:
        return np.ones(PCFG.length(options), np.float32)

    @staticmethod
    def generate(options: PCFGOptions, num_examples: int, seed) -> tuple[np.ndarray, np.ndarray]:
        rows = sample_rows(options, num_examples, seed)
        return rows["tokens"], rows["lengths"]


class ZooPCFG(TaskBuilder):
    """PCFG sentences with their parse-tree probe targets."""

    task = PCFG
    BUILDER_CONFIGS = [make_config(PCFGOptions())]

    def _features(self) -> dict[str, tfds.features.FeatureConnector]:
        row = tfds.features.Tensor(shape=(None,), dtype=np.int32)
        return {"tokens": row, "depth": row, "boundary": row,
                "label": tfds.features.Tensor(shape=(), dtype=np.int32)}

    def _generate_examples(self, split: str) -> Examples:
        config = self.builder_config
        rows = sample_rows(config.options, split_size(config, split), split_seed(config, split))
        for index in range(rows["lengths"].size):
            yield f"{index:08d}", {"tokens": rows["tokens"][index], "depth": rows["depth"][index],
                                   "boundary": rows["boundary"][index], "label": rows["lengths"][index]}


class SentenceDocuments:
    """Variable-length documents from padded rows: tokens int32 [N, L] and sentence lengths int32 [N]."""

    labels = None

    def __init__(self, tokens: np.ndarray, lengths: np.ndarray) -> None:
        self.tokens, self.sizes = tokens, lengths.astype(np.int64) + 2

    def __len__(self) -> int:
        return self.tokens.shape[0]

    def get(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        """Document `index`: (<bos> words <eos> int32 [n + 2], weights of 1 float32 [n + 2])."""
        size = int(self.sizes[index])
        return self.tokens[index, :size], np.ones(size, np.float32)

    def lengths(self) -> np.ndarray:
        return self.sizes.copy()


@register_dataset("pcfg")
class PCFGDataset(TaskDataset):
    """One sentence per row, every target (EOS included) weighted 1."""

    builder_class, name = ZooPCFG, "pcfg"

    def documents(self, builder: tfds.core.DatasetBuilder, split: str, data: DataConfig) -> SentenceDocuments:
        arrays = read_arrays(builder.as_data_source(split=split), (builder.data_dir, split), ("tokens", "label"))
        return SentenceDocuments(arrays["tokens"], arrays["label"])

    def layout(self, data: DataConfig) -> str:
        return "single"
