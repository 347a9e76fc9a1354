"""PCFG sentences as token rows, and the exact next-token distribution of every position of such rows.

Token layout (vocabulary size 3 + Σ), shared by the `pcfg` dataset and the `pcfg_lm` objective:
    0            padding (never inside a sentence)
    1, 2         <bos>, <eos>
    3 ...        the terminals: terminal a is token 3 + a
A sentence w_1 .. w_n is the document <bos> w_1 .. w_n <eos>; the model reads <bos> w_1 .. w_n and predicts
w_1 .. w_n <eos>, so input position t (0 = <bos>) is predicted from the prefix of t words.
"""

from __future__ import annotations

import collections
import threading

import numpy as np

from icml26zoo.pcfg.exact import next_token_distributions
from icml26zoo.pcfg.grammar import Grammar

PAD, BOS, EOS = 0, 1, 2
FIRST_TERMINAL = 3
_CACHE_SIZE = 65536


def vocab_size(num_terminals: int) -> int:
    """Tokens of the layout for Σ = num_terminals."""
    return FIRST_TERMINAL + num_terminals


def exact_rows_of_sentence(grammar: Grammar, words: np.ndarray) -> np.ndarray:
    """[n + 1, 3 + Σ] float64: row t is P(next token | <bos> w_1 .. w_t) over the token layout (n may be 0)."""
    terminals = grammar.num_terminals
    full = np.zeros((words.size + 1, vocab_size(terminals)))
    # The first-word row does not depend on the words; a dummy word computes it when there are none.
    grammar_rows = next_token_distributions(grammar, words if words.size else [0])[: words.size + 1]
    full[:, FIRST_TERMINAL:] = grammar_rows[:, :terminals]
    full[:, EOS] = grammar_rows[:, terminals]
    return full


class ExactDistributions:
    """Exact next-token distributions of one grammar for batches of token rows, cached per sentence (thread-safe)."""

    def __init__(self, grammar: Grammar) -> None:
        self.grammar = grammar
        self.vocab_size = vocab_size(grammar.num_terminals)
        self._cache: collections.OrderedDict[bytes, np.ndarray] = collections.OrderedDict()
        self._lock = threading.Lock()

    def sentence(self, words: np.ndarray) -> np.ndarray:
        """`exact_rows_of_sentence` of terminal indices `words` [n], cached."""
        key = words.astype(np.int64).tobytes()
        with self._lock:
            if key in self._cache:
                self._cache.move_to_end(key)
                return self._cache[key]
        rows = exact_rows_of_sentence(self.grammar, words)
        with self._lock:
            self._cache[key] = rows
            while len(self._cache) > _CACHE_SIZE:
                self._cache.popitem(last=False)
        return rows

    def rows(self, inputs: np.ndarray, segment_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(p float32 [B, T, V], mask float32 [B, T]) for input rows [B, T] and their segment ids [B, T].

        Each segment that starts with <bos> gets the exact distribution at every position up to its first
        token that is not a word; other positions (padding, a segment cut from a longer sentence) get mask 0.
        """
        batch, length = inputs.shape
        exact = np.zeros((batch, length, self.vocab_size), np.float32)
        mask = np.zeros((batch, length), np.float32)
        for row in range(batch):
            for segment in np.unique(segment_ids[row][segment_ids[row] > 0]):
                where = np.flatnonzero(segment_ids[row] == segment)
                tokens = inputs[row, where].astype(np.int64)
                if tokens[0] != BOS:
                    continue
                words = tokens[1:] - FIRST_TERMINAL
                is_word = np.concatenate([(words >= 0) & (words < self.grammar.num_terminals), [False]])
                count = int(np.argmin(is_word))
                positions = where[: count + 1]
                exact[row, positions] = self.sentence(words[:count])
                mask[row, positions] = 1.0
        return exact, mask
