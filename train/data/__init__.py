"""Data layer: TFDS datasets (array_record, no TensorFlow) read through deterministic Grain loaders.

Public API:
  make_train_iterator(data, *, batch_size, seq_len, seed, process_index=None, process_count=None)
  make_eval_iterator(data, *, batch_size, seq_len, process_index=None, process_count=None, max_batches=0)
  num_eval_batches(data, *, batch_size, seq_len, max_batches=0)
  prepare(data), data_dir(data), vocab_size(data), bytes_per_token(data)
  unigram_bits_per_byte(data, split)
  encode(text), decode(tokens)  (the byte codec)

See pipeline.py for the batch format and the packing scheme; pystdlib.py, mqar.py and nucleotide.py for the
datasets.
"""

from icml26zoo.train.data.baseline import unigram_bits_per_byte
from icml26zoo.train.data.bytes_codec import decode, encode
from icml26zoo.train.data.pipeline import make_eval_iterator, make_train_iterator, num_eval_batches
from icml26zoo.train.data.sources import bytes_per_token, data_dir, prepare, vocab_size

__all__ = [
    "bytes_per_token",
    "data_dir",
    "decode",
    "encode",
    "make_eval_iterator",
    "make_train_iterator",
    "num_eval_batches",
    "prepare",
    "unigram_bits_per_byte",
    "vocab_size",
]
