"""Binary probabilistic context-free grammars in Chomsky normal form: the grammar, random grammars, sampling.

A grammar over nonterminals 0 .. N-1 (start symbol S = `start`) and terminals 0 .. Σ-1 has rules A -> B C
with probability binary[A, B, C] and A -> a with probability emission[A, a]; every left-hand side's rules
sum to 1. It terminates (every derivation is finite with probability 1, so the string probabilities sum
to 1) when the expected-offspring matrix M[A, B] = Σ_C P(A -> B C) + P(A -> C B) has spectral radius < 1
(a subcritical multi-type branching process); `Grammar` rejects any other with a ValueError naming the field.

Random grammars are the zoo's reconstruction of the ICML 2026 paper's generator, which is not published
(docs/papers/pcfg_probing.md): the start symbol has only binary rules and never appears on a right-hand
side (so every sentence has at least two words); every other nonterminal gets `binary_rules` binary rules over the
non-start nonterminals with total mass `binary_probability` and `terminal_rules` terminal rules with the
rest, each group's probabilities ~ Dirichlet(concentration). The offspring matrix of the non-start
nonterminals then has every row sum equal to 2 · binary_probability, so the grammar terminates exactly
when binary_probability < 1/2.

Sampling expands top-down and emits leaves left to right; a derivation with more than `max_length`
leaves is abandoned and redrawn (rejection), so samples follow the grammar conditioned on length <=
max_length (`exact.length_distribution` gives the rejected mass). Each sample keeps two facts of its
parse tree for probing: the depth of every word (binary nodes above its preterminal) and whether a
constituent of two or more words ends at it.
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np

from icml26zoo.validation import check_int, check_interval, check_positive

# Rows of a valid grammar sum to 1 within this (float64 rounding of user-given probabilities).
SUM_TOLERANCE = 1e-9
# A derivation abandoned after this many nodes per allowed leaf (guards against near-critical grammars).
NODES_PER_LEAF = 4


@dataclasses.dataclass(frozen=True, eq=False)
class Grammar:
    """binary [N, N, N] float64 P(A -> B C), emission [N, Σ] float64 P(A -> a), start symbol index."""

    binary: np.ndarray
    emission: np.ndarray
    start: int = 0

    def __post_init__(self) -> None:
        binary = np.asarray(self.binary, np.float64)
        emission = np.asarray(self.emission, np.float64)
        object.__setattr__(self, "binary", binary)
        object.__setattr__(self, "emission", emission)
        check_grammar(binary, emission, self.start)

    @property
    def num_nonterminals(self) -> int:
        return self.binary.shape[0]

    @property
    def num_terminals(self) -> int:
        return self.emission.shape[1]

    def left_corner(self) -> np.ndarray:
        """P_L [N, N]: P_L[A, B] = Σ_C P(A -> B C), the probability that B is A's left child."""
        return self.binary.sum(axis=2)

    def left_closure(self) -> np.ndarray:
        """R_L = (I - P_L)^{-1} [N, N]: expected number of times B lies on A's left spine (A itself included)."""
        return np.linalg.inv(np.eye(self.num_nonterminals) - self.left_corner())


def offspring_matrix(binary: np.ndarray) -> np.ndarray:
    """M [N, N]: M[A, B] = expected number of B children of one A node (left plus right)."""
    return binary.sum(axis=2) + binary.sum(axis=1)


def spectral_radius(matrix: np.ndarray) -> float:
    return float(np.max(np.abs(np.linalg.eigvals(matrix))))


def check_grammar(binary: np.ndarray, emission: np.ndarray, start: int) -> None:
    """ValueError naming grammar.binary / grammar.emission / grammar.start unless the grammar is a valid,
    terminating CNF grammar (shapes, finite non-negative probabilities, rows summing to 1, radius < 1)."""
    if binary.ndim != 3 or binary.shape[0] == 0 or binary.shape[1:] != (binary.shape[0],) * 2:
        raise ValueError(f"grammar.binary must have shape [N, N, N] with N >= 1, got {binary.shape}")
    if emission.ndim != 2 or emission.shape[0] != binary.shape[0] or emission.shape[1] == 0:
        raise ValueError(f"grammar.emission must have shape [N={binary.shape[0]}, Σ >= 1], got {emission.shape}")
    if not isinstance(start, int | np.integer) or not 0 <= start < binary.shape[0]:
        raise ValueError(f"grammar.start must be a nonterminal index in [0, {binary.shape[0]}), got {start!r}")
    for name, array in (("grammar.binary", binary), ("grammar.emission", emission)):
        if not np.all(np.isfinite(array)) or np.any(array < 0):
            raise ValueError(f"{name} must hold finite non-negative probabilities, got min {np.min(array)!r}")
    totals = binary.sum(axis=(1, 2)) + emission.sum(axis=1)
    if np.any(np.abs(totals - 1.0) > SUM_TOLERANCE):
        worst = int(np.argmax(np.abs(totals - 1.0)))
        raise ValueError(f"grammar.binary and grammar.emission: the rules of each nonterminal must sum to 1, "
                         f"nonterminal {worst} sums to {totals[worst]!r}")
    radius = spectral_radius(offspring_matrix(binary))
    # A critical grammar (radius exactly 1, e.g. binary_probability = 1/2) comes out of eigvals as 1 - 2e-16.
    if radius >= 1.0 - SUM_TOLERANCE:
        raise ValueError(f"grammar.binary: the grammar does not terminate: its expected-offspring matrix has "
                         f"spectral radius {radius:.4g} >= 1 (expected derivation length is infinite); "
                         "expected a subcritical grammar (radius < 1)")


def random_grammar(num_nonterminals: int, num_terminals: int, *, binary_rules: int, terminal_rules: int,
                   binary_probability: float, concentration: float, seed: int) -> Grammar:
    """A random sparse CNF grammar (module docstring), drawn from SeedSequence([seed, 3]).

    Raises the `Grammar` ValueError (naming grammar.binary) when binary_probability >= 1/2.
    """
    rng = np.random.default_rng(np.random.SeedSequence([seed, 3]))
    n, inner = num_nonterminals, num_nonterminals - 1
    binary = np.zeros((n, n, n))
    emission = np.zeros((n, num_terminals))
    pairs = [(b, c) for b in range(1, n) for c in range(1, n)]
    for lhs in range(n):
        chosen = rng.choice(len(pairs), size=min(binary_rules, inner * inner), replace=False)
        mass = 1.0 if lhs == 0 else binary_probability
        weights = mass * rng.dirichlet(np.full(chosen.size, concentration))
        for index, weight in zip(chosen, weights, strict=True):
            binary[lhs, pairs[index][0], pairs[index][1]] = weight
        if lhs != 0:
            words = rng.choice(num_terminals, size=min(terminal_rules, num_terminals), replace=False)
            emission[lhs, words] = (1.0 - mass) * rng.dirichlet(np.full(words.size, concentration))
    return Grammar(binary, emission, start=0)


@dataclasses.dataclass(frozen=True)
class RandomGrammarSpec:
    """Everything that defines a random grammar (`random_grammar`'s arguments, its seed named `grammar_seed` as in
    the `pcfg` dataset's options); `grammar()` builds it (cached). Each field is validated (ValueError naming
    it), and so is termination (binary_probability >= 1/2 never terminates)."""

    num_nonterminals: int = 8
    num_terminals: int = 16
    binary_rules: int = 4
    terminal_rules: int = 4
    binary_probability: float = 0.4
    concentration: float = 1.0
    grammar_seed: int = 0

    def __post_init__(self) -> None:
        for name, minimum in (("num_nonterminals", 2), ("num_terminals", 1), ("binary_rules", 1),
                              ("terminal_rules", 1), ("grammar_seed", 0)):
            check_int(name, getattr(self, name), minimum=minimum)
        check_interval("binary_probability", self.binary_probability, 0, 1, closed="neither")
        check_positive("concentration", self.concentration, finite=True)
        try:
            self.grammar()
        except ValueError as error:
            raise ValueError(f"binary_probability = {self.binary_probability!r} gives an impossible grammar: "
                             f"{error}") from None

    def grammar(self) -> Grammar:
        return _cached_grammar(self)


@functools.lru_cache(maxsize=16)
def _cached_grammar(spec: RandomGrammarSpec) -> Grammar:
    return random_grammar(spec.num_nonterminals, spec.num_terminals, binary_rules=spec.binary_rules,
                          terminal_rules=spec.terminal_rules, binary_probability=float(spec.binary_probability),
                          concentration=float(spec.concentration), seed=spec.grammar_seed)


@dataclasses.dataclass(frozen=True)
class Sample:
    """One sampled sentence: words int64 [n] (terminal indices), depth int64 [n], boundary int64 [n]."""

    words: np.ndarray
    depth: np.ndarray
    boundary: np.ndarray


class Sampler:
    """Draws sentences from a grammar: each rule choice is one uniform number and a cumulative-table lookup."""

    def __init__(self, grammar: Grammar, max_length: int) -> None:
        n, sigma = grammar.num_nonterminals, grammar.num_terminals
        # Per nonterminal: one table over all its rules, binary ones first (index B * N + C), then terminals.
        rules = np.concatenate([grammar.binary.reshape(n, n * n), grammar.emission], axis=1)
        self.cumulative = np.cumsum(rules, axis=1)
        self.cumulative /= self.cumulative[:, -1:]
        self.n, self.sigma, self.start, self.max_length = n, sigma, grammar.start, max_length

    def _rule(self, lhs: int, u: float) -> int:
        return min(int(np.searchsorted(self.cumulative[lhs], u, side="right")), self.n * self.n + self.sigma - 1)

    def _attempt(self, rng: np.random.Generator) -> Sample | None:
        words: list[int] = []
        depth: list[int] = []
        boundary: list[int] = []
        # ("node", symbol, depth) expands a symbol; ("close",) marks the end of a binary constituent.
        stack: list[tuple] = [("node", self.start, 0)]
        budget = NODES_PER_LEAF * self.max_length
        while stack:
            item = stack.pop()
            if item[0] == "close":
                boundary[-1] = 1
                continue
            budget -= 1
            if budget < 0:
                return None
            _, symbol, level = item
            rule = self._rule(symbol, rng.random())
            if rule >= self.n * self.n:
                if len(words) == self.max_length:
                    return None
                words.append(rule - self.n * self.n)
                depth.append(level)
                boundary.append(0)
                continue
            left, right = divmod(rule, self.n)
            stack.extend([("close",), ("node", right, level + 1), ("node", left, level + 1)])
        return Sample(np.array(words, np.int64), np.array(depth, np.int64), np.array(boundary, np.int64))

    def sample(self, rng: np.random.Generator) -> Sample:
        """One sentence of at most max_length words (longer derivations are redrawn)."""
        while True:
            drawn = self._attempt(rng)
            if drawn is not None:
                return drawn


def sample_sentences(grammar: Grammar, num: int, seed: np.random.SeedSequence | int, max_length: int) -> list[Sample]:
    """`num` sentences of at most `max_length` words, drawn deterministically from `seed`."""
    rng = np.random.default_rng(seed)
    sampler = Sampler(grammar, max_length)
    return [sampler.sample(rng) for _ in range(num)]
