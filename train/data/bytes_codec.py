"""Byte-level tokenizer: a token is one byte of the UTF-8 encoding, so the vocabulary has 256 entries.

Nothing is learned and nothing is out of vocabulary: any text (or raw bytes that are not valid UTF-8)
round-trips exactly through `encode`, and `decode` of an arbitrary token sequence (e.g. a model sample
that cuts a multi-byte character in half) never fails: invalid UTF-8 becomes U+FFFD.
"""

from __future__ import annotations

import numpy as np

VOCAB_SIZE = 256


def encode(text: str | bytes, dtype: type = np.int32) -> np.ndarray:
    """Encodes `text` as its UTF-8 bytes.

    Args:
      text: a str (encoded as UTF-8) or bytes (taken as they are).
      dtype: integer dtype of the result (np.uint8 for storage, np.int32 for model inputs).

    Returns:
      [n] array of byte values in [0, 256), n = number of UTF-8 bytes.
    """
    if isinstance(text, str):
        text = text.encode("utf-8")
    elif not isinstance(text, bytes | bytearray | memoryview):
        raise ValueError(f"text must be str or bytes, got {type(text).__name__}")
    return np.frombuffer(bytes(text), dtype=np.uint8).astype(dtype)


def decode(tokens: np.ndarray | list[int]) -> str:
    """Decodes byte tokens ([n] ints in [0, 256)) to text; invalid UTF-8 becomes U+FFFD."""
    array = np.asarray(tokens)
    if array.ndim != 1:
        raise ValueError(f"tokens must be 1-D, got shape {array.shape}")
    if array.size and (array.min() < 0 or array.max() >= VOCAB_SIZE):
        raise ValueError(f"tokens must lie in [0, {VOCAB_SIZE}), got range [{array.min()}, {array.max()}]")
    return array.astype(np.uint8).tobytes().decode("utf-8", errors="replace")
