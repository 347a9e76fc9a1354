"""Decoding with any registered LM and its cache: sampling filters, the jitted loop, Divergence Decoding, ASMC.

    from icml26zoo.decode import generate, DivergenceDecoding
    tokens = generate(model, prompt, max_new_tokens=32, key=key, temperature=0.7, top_p=0.9)
    steered = generate(base, prompt, max_new_tokens=32, key=key, temperature=0.0,
                       processor=DivergenceDecoding(base, retain_aux, forget_aux, alpha=1.5))
"""

from icml26zoo.decode.asmc import ASMCConfig, ASMCResult, asmc_decode
from icml26zoo.decode.divergence import (
    DivergenceDecoding,
    distillation_loss,
    divergence_logits,
    signed_log_divergence_logits,
    steered_logits,
    top_k_suppression,
)
from icml26zoo.decode.loop import LogitsProcessor, check_cache, generate
from icml26zoo.decode.sampling import check_sampling, sample_logits, sampling_logits, top_k_mask, top_p_mask

__all__ = [
    "ASMCConfig",
    "ASMCResult",
    "DivergenceDecoding",
    "LogitsProcessor",
    "asmc_decode",
    "check_cache",
    "check_sampling",
    "distillation_loss",
    "divergence_logits",
    "generate",
    "sample_logits",
    "sampling_logits",
    "signed_log_divergence_logits",
    "steered_logits",
    "top_k_mask",
    "top_k_suppression",
    "top_p_mask",
]
