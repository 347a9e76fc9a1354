"""Binary PCFGs in Chomsky normal form: random grammars and sampling (`grammar`), exact inside, outside,
prefix probabilities, next-token distributions and probe targets (`exact`), and the token layout shared by
the `pcfg` dataset and the `pcfg_lm` objective (`rows`); see docs/papers/pcfg_probing.md.

Paper: "How Transformers Represent Hierarchies: A Local-to-Global Mechanism" (ICML 2026); see
docs/papers/pcfg_probing.md.
"""

from icml26zoo.pcfg.exact import (
    inside,
    length_distribution,
    next_token_distributions,
    outside,
    prefix_inside,
    prefix_probabilities,
    probe_targets,
    sentence_probability,
    span_marginals,
)
from icml26zoo.pcfg.grammar import Grammar, RandomGrammarSpec, random_grammar, sample_sentences
from icml26zoo.pcfg.rows import BOS, EOS, FIRST_TERMINAL, PAD, ExactDistributions, exact_rows_of_sentence, vocab_size

__all__ = [
    "BOS",
    "EOS",
    "FIRST_TERMINAL",
    "PAD",
    "ExactDistributions",
    "Grammar",
    "RandomGrammarSpec",
    "exact_rows_of_sentence",
    "inside",
    "length_distribution",
    "next_token_distributions",
    "outside",
    "prefix_inside",
    "prefix_probabilities",
    "probe_targets",
    "random_grammar",
    "sample_sentences",
    "sentence_probability",
    "span_marginals",
    "vocab_size",
]
