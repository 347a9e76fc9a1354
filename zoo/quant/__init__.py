"""Post-training weight quantisation of the zoo's LMs: round-to-nearest, GPTQ / LDLQ (layer-proxy Hessian) and
YAQA (Kronecker-factored Hessian of the full-model KL; Tseng, Sun, De Sa, ICML 2026, arXiv 2505.22988), on
uniform 2-4 bit per-row grids. See docs/papers/yaqa.md."""

from icml26zoo.quant.grid import BITS, check_bits, codes, grid_values, round_to_grid, row_steps
from icml26zoo.quant.hessians import input_moments, kl_sketch_a, kl_sketch_b, sketch_a_from_tokens, token_statistics
from icml26zoo.quant.model import METHODS, output_kl, quantize_model, quantize_weight
from icml26zoo.quant.rounding import (
    gptq_round,
    kron_proxy_loss,
    ldl_lower,
    ldlq_round,
    prepare_hessian,
    proxy_loss,
    rtn_round,
    yaqa_round,
)
from icml26zoo.quant.sites import LinearSite, linear_sites

__all__ = ["BITS", "METHODS", "LinearSite", "check_bits", "codes", "gptq_round", "grid_values", "input_moments",
           "kl_sketch_a", "kl_sketch_b", "kron_proxy_loss", "ldl_lower", "ldlq_round", "linear_sites", "output_kl",
           "prepare_hessian", "proxy_loss", "quantize_model", "quantize_weight", "round_to_grid", "row_steps",
           "rtn_round", "sketch_a_from_tokens", "token_statistics", "yaqa_round"]
