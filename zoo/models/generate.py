"""Kept for existing imports: sampling and the decoding loop now live in `icml26zoo.decode`."""

from icml26zoo.decode.loop import generate
from icml26zoo.decode.sampling import sample_logits

__all__ = ["generate", "sample_logits"]
