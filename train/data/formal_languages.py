"""Formal-language recognition tasks (Jerad et al., "Context-free Recognition with Transformers",
arXiv 2601.01754): Dyck-k, palindromes and the Boolean formula value problem, as labelled rows (member = 1,
non-member = 0) for `objective="classification"`.

The languages (all strings of one dataset have the same length n):
  * Dyck-k ("dyck"): balanced strings over k bracket types; n even.
  * Marked palindromes w # wᴿ (n odd) and even palindromes w wᴿ (n even) over {a, b} ("palindromes").
  * BFVP ("bfvp"): Boolean formulas in prefix (Polish) notation over {0, 1, ∧, ∨, ¬} that evaluate to 1.

Positives are drawn by a generator that builds members: a random walk over open brackets (closing one
whenever the rest of the string must close them all), a random half w mirrored, a random formula shape
with exactly n symbols whose value is 1 (redrawn until it is). Negatives are near misses: a positive of
the same length with two positions holding different symbols swapped, which keeps the length and every
symbol count (redrawn until the swap leaves the language). Labels come from exact recognizers written
independently of the generators: a stack for Dyck-k, reversal for palindromes, a recursive-descent
evaluator for BFVP. Classes are exactly balanced (half of each split is positive, in random order).
The walk, formula shapes and swaps are this zoo's reconstruction: the paper names the languages, not the
papers' samplers.

Length generalization (train on short strings, test on longer ones): option `eval_length` gives the
validation split its own string length (each split has one length; a split mixing lengths is not offered).

Row layout (the looped, padded encoder's input): the n symbols, P `<pad>` tokens (compute space, not masked), `<cls>`,
`<end>`. The pipeline feeds tokens[:-1], so a model sees the string, the padding and `<cls>`.

Vocabulary layout (size 5 + number of symbols):
    0, 1                   reserved, never in an input: the classification head reads "non-member", "member"
    2, 3, 4                <pad>, <cls>, <end>
    5 ...                  symbols: Dyck-k: opens 5 .. 4 + k, closes 5 + k .. 4 + 2k (type t opens 5 + t,
                           closes 5 + k + t); palindromes: a, b, # = 5, 6, 7; BFVP: 0, 1, ∧, ∨, ¬ = 5 .. 9
"""

from __future__ import annotations

import dataclasses

import numpy as np

from icml26zoo.train.data.registry import register_dataset
from icml26zoo.train.data.tasks import FIELD, Task, TaskBuilder, TaskDataset, TaskOptions, check_option, make_config

PAD, CLS, END = 2, 3, 4
FIRST_SYMBOL = 5
# Prefix-formula symbols (offsets from FIRST_SYMBOL).
FALSE, TRUE, AND, OR, NOT = range(5)
# Evaluation recurses once per nested operator.
MAX_LENGTH = 512
# Swaps tried on one positive before a fresh positive is drawn.
SWAP_TRIES = 64


@dataclasses.dataclass(frozen=True)
class LanguageOptions(TaskOptions):
    """A formal-language recognition task: string length n, padding tokens P, validation length (0 = n)."""

    length: int = 32
    padding: int = 0
    eval_length: int = 0

    def __post_init__(self) -> None:
        super().__post_init__()
        check_option("length", self.length, 3, MAX_LENGTH)
        check_option("padding", self.padding, 0, 16 * MAX_LENGTH)
        if self.eval_length:
            check_option("eval_length", self.eval_length, 3, MAX_LENGTH)

    def lengths(self) -> dict[str, int]:
        """The option name and value of each string length in use (for parity checks)."""
        return {"length": self.length, **({"eval_length": self.eval_length} if self.eval_length else {})}


@dataclasses.dataclass(frozen=True)
class DyckOptions(LanguageOptions):
    """Dyck-k recognition: balanced strings over k bracket types, n even."""

    num_types: int = 2

    def __post_init__(self) -> None:
        super().__post_init__()
        check_option("num_types", self.num_types, 1, 16)
        for name, length in self.lengths().items():
            if length % 2:
                raise ValueError(f"{FIELD} option {name!r} must be even for Dyck-k, got {length}")


@dataclasses.dataclass(frozen=True)
class PalindromeOptions(LanguageOptions):
    """Palindrome recognition: marked w # wᴿ (n odd) or even w wᴿ (n even) over {a, b}."""

    length: int = 33
    marked: bool = True

    def __post_init__(self) -> None:
        super().__post_init__()
        for name, length in self.lengths().items():
            if length % 2 != int(self.marked):
                parity = "odd (w # wᴿ)" if self.marked else "even (w wᴿ)"
                raise ValueError(f"{FIELD} option {name!r} must be {parity} with marked={self.marked}, got {length}")


@dataclasses.dataclass(frozen=True)
class BfvpOptions(LanguageOptions):
    """Boolean formula value problem: prefix formulas over {0, 1, ∧, ∨, ¬} of n symbols that evaluate to 1."""


def is_dyck(symbols: list[int], num_types: int) -> bool:
    """Stack recognizer: symbols t < k open type t, k + t closes it."""
    stack = []
    for symbol in symbols:
        if symbol < num_types:
            stack.append(symbol)
        elif not stack or stack.pop() != symbol - num_types:
            return False
    return not stack


def is_palindrome(symbols: list[int], marked: bool) -> bool:
    """Reversal recognizer over a, b, # = 0, 1, 2: w # wᴿ (marked) or w wᴿ with w over {a, b}."""
    middle = len(symbols) // 2
    marks = [i for i, symbol in enumerate(symbols) if symbol == 2]
    expected_marks = [middle] if marked else []
    return marks == expected_marks and len(symbols) % 2 == int(marked) and symbols == symbols[::-1]


def evaluate_prefix(symbols: list[int], start: int = 0) -> tuple[int, int]:
    """(value, end) of the prefix formula starting at `start`; ValueError when it is not well formed."""
    if start >= len(symbols):
        raise ValueError("formula ends early")
    symbol = symbols[start]
    if symbol in (FALSE, TRUE):
        return symbol, start + 1
    if symbol == NOT:
        value, end = evaluate_prefix(symbols, start + 1)
        return 1 - value, end
    left, middle = evaluate_prefix(symbols, start + 1)
    right, end = evaluate_prefix(symbols, middle)
    return (left & right if symbol == AND else left | right), end


def is_true_formula(symbols: list[int]) -> bool:
    """Recursive-evaluation recognizer: a whole well-formed prefix formula whose value is 1."""
    try:
        value, end = evaluate_prefix(symbols)
    except ValueError:
        return False
    return end == len(symbols) and value == 1


def _dyck_word(rng: np.random.Generator, options: DyckOptions) -> list[int]:
    k, n = options.num_types, options.length
    stack, word = [], []
    for position in range(n):
        # Open while the rest of the string can still close everything (depth and n - position share parity).
        if not stack or (len(stack) < n - position and rng.random() < 0.5):
            stack.append(int(rng.integers(k)))
            word.append(stack[-1])
        else:
            word.append(k + stack.pop())
    return word


def _palindrome(rng: np.random.Generator, options: PalindromeOptions) -> list[int]:
    half = rng.integers(0, 2, size=options.length // 2).tolist()
    return half + ([2] if options.marked else []) + half[::-1]


def _formula(rng: np.random.Generator, binaries: int, negations: int) -> list[int]:
    if binaries == negations == 0:
        return [int(rng.integers(2))]
    if rng.random() < negations / (binaries + negations):
        return [NOT, *_formula(rng, binaries, negations - 1)]
    left_binaries = int(rng.integers(binaries))
    left_negations = int(rng.integers(negations + 1))
    left = _formula(rng, left_binaries, left_negations)
    right = _formula(rng, binaries - 1 - left_binaries, negations - left_negations)
    return [AND + int(rng.integers(2)), *left, *right]


def _true_formula(rng: np.random.Generator, options: BfvpOptions) -> list[int]:
    # n = 2b + 1 + u symbols for b binary operators and u negations; b >= (n - 1) / 4 keeps negations to at
    # most about half of the symbols (long ¬ chains are easy).
    most = (options.length - 1) // 2
    while True:
        binaries = int(rng.integers(most // 2, most + 1))
        formula = _formula(rng, binaries, options.length - 1 - 2 * binaries)
        if evaluate_prefix(formula)[0] == 1:
            return formula


def _near_miss(rng: np.random.Generator, positive: list[int], is_member) -> list[int] | None:
    """`positive` with two different symbols swapped so that it leaves the language, or None if no try did."""
    for _ in range(SWAP_TRIES):
        i, j = rng.choice(len(positive), size=2, replace=False)
        if positive[i] == positive[j]:
            continue
        candidate = list(positive)
        candidate[i], candidate[j] = candidate[j], candidate[i]
        if not is_member(candidate):
            return candidate
    return None


def _sample(rng: np.random.Generator, draw_positive, is_member, num_examples: int) -> tuple[list, np.ndarray]:
    """Exactly balanced (strings, recognizer labels [N])."""
    wanted = rng.permutation(np.arange(num_examples) % 2)
    strings = []
    for label in wanted:
        string = draw_positive() if label else None
        while string is None:
            string = _near_miss(rng, draw_positive(), is_member)
        strings.append(string)
    labels = np.array([is_member(s) for s in strings], np.int32)
    if not np.array_equal(labels, wanted):
        raise AssertionError("a generated string's recognizer label differs from the label it was drawn for")
    return strings, labels


def _rows(strings: list[list[int]], options: LanguageOptions) -> np.ndarray:
    """[N, n + P + 2] int32: symbols, P pads, <cls>, <end>."""
    symbols = FIRST_SYMBOL + np.asarray(strings, np.int32).reshape(len(strings), options.length)
    tail = np.array([PAD] * options.padding + [CLS, END], np.int32)
    return np.concatenate([symbols, np.broadcast_to(tail, (len(strings), tail.size))], axis=1)


class _Language(Task):
    @staticmethod
    def split_options(options: LanguageOptions, split: str) -> LanguageOptions:
        if split == "train" or not options.eval_length:
            return options
        return dataclasses.replace(options, length=options.eval_length, eval_length=0)

    @staticmethod
    def length(options: LanguageOptions) -> int:
        return options.length + options.padding + 2

    @staticmethod
    def loss_weights(options: LanguageOptions) -> np.ndarray:
        return np.ones(options.length + options.padding + 2, np.float32)


class Dyck(_Language):
    options_class = DyckOptions

    @staticmethod
    def vocab_size(options: DyckOptions) -> int:
        return FIRST_SYMBOL + 2 * options.num_types

    @staticmethod
    def generate(options: DyckOptions, num_examples: int, seed) -> tuple[np.ndarray, np.ndarray]:
        rng = np.random.default_rng(seed)
        strings, labels = _sample(rng, lambda: _dyck_word(rng, options),
                                  lambda s: is_dyck(s, options.num_types), num_examples)
        return _rows(strings, options), labels


class Palindromes(_Language):
    options_class = PalindromeOptions

    @staticmethod
    def vocab_size(options: PalindromeOptions) -> int:
        return FIRST_SYMBOL + 3

    @staticmethod
    def generate(options: PalindromeOptions, num_examples: int, seed) -> tuple[np.ndarray, np.ndarray]:
        rng = np.random.default_rng(seed)
        strings, labels = _sample(rng, lambda: _palindrome(rng, options),
                                  lambda s: is_palindrome(s, options.marked), num_examples)
        return _rows(strings, options), labels


class Bfvp(_Language):
    options_class = BfvpOptions

    @staticmethod
    def vocab_size(options: BfvpOptions) -> int:
        return FIRST_SYMBOL + 5

    @staticmethod
    def generate(options: BfvpOptions, num_examples: int, seed) -> tuple[np.ndarray, np.ndarray]:
        rng = np.random.default_rng(seed)
        strings, labels = _sample(rng, lambda: _true_formula(rng, options), is_true_formula, num_examples)
        return _rows(strings, options), labels


class ZooDyck(TaskBuilder):
    """Dyck-k recognition rows."""

    task = Dyck
    BUILDER_CONFIGS = [make_config(DyckOptions())]


class ZooPalindromes(TaskBuilder):
    """Palindrome recognition rows."""

    task = Palindromes
    BUILDER_CONFIGS = [make_config(PalindromeOptions())]


class ZooBfvp(TaskBuilder):
    """Boolean formula value problem rows."""

    task = Bfvp
    BUILDER_CONFIGS = [make_config(BfvpOptions())]


@register_dataset("dyck")
class DyckDataset(TaskDataset):
    """Dyck-k membership, labelled rows for objective="classification"."""

    builder_class, labelled, name = ZooDyck, True, "dyck"


@register_dataset("palindromes")
class PalindromesDataset(TaskDataset):
    """Marked or even palindrome membership, labelled rows."""

    builder_class, labelled, name = ZooPalindromes, True, "palindromes"


@register_dataset("bfvp")
class BfvpDataset(TaskDataset):
    """Boolean formula value problem membership, labelled rows."""

    builder_class, labelled, name = ZooBfvp, True, "bfvp"
