"""Unit and property tests of the row layout and row filling (no datasets needed)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from icml26zoo.train.data import bytes_codec
from icml26zoo.train.data.pipeline import Layout, build_row


class ListDocuments:
    """Documents held in memory: weights are 1 except where the token is odd (to see them move)."""

    def __init__(self, token_lists):
        self.docs = [np.asarray(tokens, np.int32) for tokens in token_lists]

    def get(self, index):
        tokens = self.docs[index]
        return tokens, (tokens % 2 == 0).astype(np.float32)


def epoch_pieces(layout, epoch):
    rows = range(epoch * layout.rows_per_epoch, (epoch + 1) * layout.rows_per_epoch)
    return [layout.pieces(row) for row in rows]


@settings(max_examples=60, deadline=None)
@given(counts=st.lists(st.integers(0, 40), min_size=1, max_size=25), seq_len=st.integers(1, 32),
       seed=st.integers(0, 3), epoch=st.integers(0, 2))
def test_concat_layout_covers_every_pair_once_in_order(counts, seq_len, seed, epoch):
    counts = np.array(counts, np.int64)
    if counts.sum() == 0:
        with pytest.raises(ValueError):
            Layout(counts, seq_len, "concat", seed)
        return
    layout = Layout(counts, seq_len, "concat", seed)
    rows = epoch_pieces(layout, epoch)
    sizes = [sum(stop - start for _, start, stop in row) for row in rows]
    # Every row is full except possibly the epoch's last one.
    assert all(size == seq_len for size in sizes[:-1]) and 0 < sizes[-1] <= seq_len
    flat = [piece for row in rows for piece in row]
    docs_in_order, previous_stop = [], 0
    for doc, start, stop in flat:
        if start == 0:
            docs_in_order.append(doc)
        else:  # A continuation starts exactly where the same document's previous piece stopped.
            assert docs_in_order[-1] == doc and previous_stop == start
        assert 0 <= start < stop <= counts[doc]
        previous_stop = stop
    assert sorted(docs_in_order) == sorted(np.flatnonzero(counts > 0).tolist())
    ends = {doc: stop for doc, _, stop in flat}
    assert all(ends[doc] == counts[doc] for doc in docs_in_order)


def test_shuffle_differs_between_epochs_and_seeds_but_repeats_exactly():
    layout = Layout(np.full(50, 3), 7, "single", seed=1)
    first = [p[0][0] for p in epoch_pieces(layout, 0)]
    second = [p[0][0] for p in epoch_pieces(layout, 1)]
    assert sorted(first) == sorted(second) == list(range(50)) and first != second
    other_seed = [p[0][0] for p in epoch_pieces(Layout(np.full(50, 3), 7, "single", seed=2), 0)]
    assert other_seed != first
    assert [p[0][0] for p in epoch_pieces(Layout(np.full(50, 3), 7, "single", seed=1), 0)] == first
    assert [p[0][0] for p in epoch_pieces(Layout(np.full(50, 3), 7, "single", None), 3)] == list(range(50))


def test_whole_layout_never_splits_examples():
    layout = Layout(np.full(10, 7), 22, "whole", seed=0)
    assert layout.per_row == 3 and layout.rows_per_epoch == 4
    rows = epoch_pieces(layout, 0)
    assert [len(row) for row in rows] == [3, 3, 3, 1]
    assert all(start == 0 and stop == 7 for row in rows for _, start, stop in row)
    with pytest.raises(ValueError, match="seq_len"):
        Layout(np.full(10, 7), 6, "whole", seed=0)


def test_single_layout_truncates_and_skips_short_documents():
    layout = Layout(np.array([5, 0, 12]), 8, "single", seed=None)
    assert epoch_pieces(layout, 0) == [[(0, 0, 5)], [(2, 0, 8)]]


@settings(max_examples=40, deadline=None)
@given(lengths=st.lists(st.integers(2, 30), min_size=1, max_size=12), seq_len=st.integers(1, 24))
def test_packed_rows_are_consistent(lengths, seq_len):
    rng = np.random.default_rng(len(lengths))
    documents = ListDocuments([rng.integers(0, 256, n) for n in lengths])
    layout = Layout(np.array(lengths) - 1, seq_len, "concat", seed=0)
    pairs = []
    for pieces in epoch_pieces(layout, 0):
        row = build_row(pieces, documents, seq_len)
        seg, pos = row["segment_ids"], row["positions"]
        real = seg > 0
        # Padding only at the end, with zeros everywhere and weight 0.
        assert np.all(np.diff(real.astype(int)) <= 0)
        for name in ("inputs", "targets", "positions", "weights"):
            assert np.all(row[name][~real] == 0)
        # Segments are numbered 1, 2, ... and positions restart at 0 on each.
        starts = np.flatnonzero(real & np.concatenate([[True], seg[1:] != seg[:-1]]))
        assert seg[starts].tolist() == list(range(1, len(starts) + 1))
        assert np.all(pos[starts] == 0)
        same = real[1:] & (seg[1:] == seg[:-1])
        assert np.all(pos[1:][same] == pos[:-1][same] + 1)
        # Within a segment the target is the next input.
        assert np.all(row["targets"][:-1][same] == row["inputs"][1:][same])
        pairs += list(zip(row["inputs"][real], row["targets"][real], row["weights"][real], strict=True))
    expected = [(d[i], d[i + 1], float(d[i + 1] % 2 == 0)) for d in documents.docs for i in range(len(d) - 1)]
    assert sorted(pairs) == sorted(expected)


def test_byte_codec_round_trips_and_replaces_invalid_bytes():
    text = "héllo, wörld — ∑ 🐍"
    tokens = bytes_codec.encode(text)
    assert tokens.dtype == np.int32 and len(tokens) == len(text.encode()) and tokens.max() < 256
    assert bytes_codec.decode(tokens) == text
    raw = b"\xff\xfeok"
    assert bytes_codec.encode(raw, np.uint8).tobytes() == raw
    assert bytes_codec.decode(bytes_codec.encode(raw)) == "\ufffd\ufffdok"
    assert bytes_codec.decode(tokens[:-1]).endswith("\ufffd")  # A cut multi-byte character.
    with pytest.raises(ValueError, match="tokens"):
        bytes_codec.decode([0, 256])
    with pytest.raises(ValueError, match="text"):
        bytes_codec.encode(3)
