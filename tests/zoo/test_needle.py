"""The needle task of icml26zoo.longctx.needle, built from a given text: needles and questions where the docstring
puts them, deterministic in its seed, and bad text rejected."""

from __future__ import annotations

import numpy as np
import pytest

from icml26zoo.longctx.needle import answers_at_questions, isa_layout, make_needle_task, retrieval_metrics

TEXT = bytes(range(256)) * 8


def test_the_task_plants_needles_before_the_questions():
    task = make_needle_task(TEXT, 256, n_needles=4, needle_len=8, seed=1)
    assert task.q.shape == (1, 256, 2, 64) and list(task.questions) == [252, 253, 254, 255]
    # Each question's nearest value code is its needle's answer when the output is exactly that code.
    out = np.zeros((1, 256, 2, 64), np.float32)
    out[0, task.questions] = task.codes[task.answers]
    np.testing.assert_array_equal(answers_at_questions(out, task), task.answers)
    assert retrieval_metrics(out, out, task) == {"accuracy": 1.0, "agree_with_dense": 1.0, "rel_error": 0.0}
    again = make_needle_task(np.frombuffer(TEXT, np.uint8), 256, n_needles=4, needle_len=8, seed=1)
    np.testing.assert_array_equal(np.asarray(again.k), np.asarray(task.k))
    rotated = isa_layout(task)
    assert list(rotated.questions) == [0, 1, 2, 3]
    np.testing.assert_array_equal(np.asarray(rotated.q[0, :4]), np.asarray(task.q[0, -4:]))


@pytest.mark.parametrize(("text", "length", "message"), [
    (TEXT, 64, r"`length` = 64, expected >= 4 \* n_needles \* needle_len = 128"),
    (b"short", 128, r"text must be bytes or uint8 \[n\] with n > length = 128"),
    (np.zeros(1000, np.int32), 128, r"text must be bytes or uint8"),
])
def test_bad_text_or_length_raise(text, length, message):
    with pytest.raises(ValueError, match=message):
        make_needle_task(text, length, n_needles=4, needle_len=8)
