"""Long-context attention at inference: PBS-Attn block-sparse prefill, HARD-KV cache compression, ISA routing.

Specs: mixers-07-pbs-attn, mixers-12-hard-kv, mixers-13-isa. The block-sparse attention op they share is
`icml26zoo.kernels.block_sparse_attention`.
"""
