"""icml26zoo.validation: every helper accepts what it documents, rejects the rest (bools, NaN, inf where it says
so) and names the field, the expectation and the value in its message."""

import math

import jax.numpy as jnp
import numpy as np
import pytest

from icml26zoo import validation
from icml26zoo.validation import (
    check_bool,
    check_choice,
    check_finite,
    check_float_array,
    check_int,
    check_int_array,
    check_interval,
    check_non_negative,
    check_number,
    check_pairs,
    check_positive,
    check_probability,
    check_shape,
    check_unit_interval,
    did_you_mean,
    is_integer,
    is_number,
)


def test_is_number_and_is_integer():
    for value in (0, 3, -2.5, np.float32(1.5), np.int64(4), jnp.float32(2.0), jnp.int32(3)):
        assert is_number(value)
    for value in (True, False, np.bool_(True), "1", None, [1], np.ones(2), jnp.ones(2), 1j):
        assert not is_number(value)
    for value in (0, -3, np.int64(4), jnp.int32(3)):
        assert is_integer(value)
    for value in (True, np.bool_(False), 1.0, np.float32(2.0), "1", None, np.ones(2, dtype=int)):
        assert not is_integer(value)


def test_check_number():
    assert check_number("x", 2) == 2.0 and isinstance(check_number("x", 2), float)
    assert check_number("x", -math.inf) == -math.inf
    assert check_number("x", np.float32(0.5)) == 0.5
    for bad in (True, math.nan, "1", None):
        with pytest.raises(ValueError, match=f"x must be a number, got {bad!r}"):
            check_number("x", bad)
    with pytest.raises(ValueError, match="x must be a real, got 'a'"):
        check_number("x", "a", expected="a real")


def test_check_int():
    assert check_int("n", 1) == 1
    assert check_int("n", np.int64(5)) == 5 and type(check_int("n", np.int64(5))) is int
    assert check_int("n", -4, minimum=None) == -4
    assert check_int("n", 0, minimum=0) == 0
    assert check_int("n", 7, minimum=2, maximum=7) == 7
    with pytest.raises(ValueError, match=r"n must be an integer >= 1, got 0"):
        check_int("n", 0)
    for bad in (True, 1.0, "2", None, math.nan):
        with pytest.raises(ValueError, match=rf"n must be an integer >= 1, got {bad!r}"):
            check_int("n", bad)
    with pytest.raises(ValueError, match=r"n must be an integer in \[2, 7\], got 8"):
        check_int("n", 8, minimum=2, maximum=7)
    with pytest.raises(ValueError, match=r"n must be an integer <= 3, got 4"):
        check_int("n", 4, minimum=None, maximum=3)
    with pytest.raises(ValueError, match=r"n must be an integer, got 1.5"):
        check_int("n", 1.5, minimum=None)


def test_check_positive():
    assert check_positive("lr", 0.1) == 0.1
    assert check_positive("lr", math.inf) == math.inf
    assert check_positive("lr", 3, finite=True) == 3.0
    for bad in (0, -1, True, math.nan, "1", None):
        with pytest.raises(ValueError, match=rf"lr must be a positive number, got {bad!r}"):
            check_positive("lr", bad)
    for bad in (math.inf, 0.0, math.nan):
        with pytest.raises(ValueError, match=rf"lr must be a finite positive number, got {bad!r}"):
            check_positive("lr", bad, finite=True)


def test_check_non_negative():
    assert check_non_negative("wd", 0) == 0.0
    assert check_non_negative("wd", math.inf) == math.inf
    assert check_non_negative("wd", 2.5, finite=True) == 2.5
    for bad in (-0.1, True, math.nan, None):
        with pytest.raises(ValueError, match=rf"wd must be a non-negative number, got {bad!r}"):
            check_non_negative("wd", bad)
    for bad in (math.inf, -1):
        with pytest.raises(ValueError, match=rf"wd must be a finite non-negative number, got {bad!r}"):
            check_non_negative("wd", bad, finite=True)


def test_check_finite():
    assert check_finite("x", -3) == -3.0
    for bad in (math.inf, -math.inf, math.nan, False, "0"):
        with pytest.raises(ValueError, match=rf"x must be a finite number, got {bad!r}"):
            check_finite("x", bad)


@pytest.mark.parametrize(("closed", "inside", "outside", "text"), [
    ("both", (0, 0.5, 1), (-0.1, 1.1), r"\[0, 1\]"),
    ("left", (0, 0.5), (1, -0.1), r"\[0, 1\)"),
    ("right", (0.5, 1), (0, 1.1), r"\(0, 1\]"),
    ("neither", (0.5,), (0, 1), r"\(0, 1\)"),
])
def test_check_interval(closed, inside, outside, text):
    for value in inside:
        assert check_interval("p", value, 0, 1, closed=closed) == value
    for bad in (*outside, True, math.nan, math.inf, "0.5"):
        with pytest.raises(ValueError, match=rf"p must be a number in {text}, got {bad!r}"):
            check_interval("p", bad, 0, 1, closed=closed)


def test_check_interval_formats_bounds_and_rejects_unknown_closed():
    with pytest.raises(ValueError, match=r"m must be a number in \[0.5, 2.25\], got 3"):
        check_interval("m", 3, 0.5, 2.25)
    with pytest.raises(ValueError, match=r"closed must be one of \['both', 'left', 'right', 'neither'\], got 'open'"):
        check_interval("m", 1, 0, 2, closed="open")


def test_check_probability_and_unit_interval():
    assert check_probability("p", 0) == 0.0 and check_probability("p", 1) == 1.0
    for bad in (-0.01, 1.01, True, math.nan):
        with pytest.raises(ValueError, match=rf"p must be a number in \[0, 1\], got {bad!r}"):
            check_probability("p", bad)
    assert check_unit_interval("m", 0) == 0.0
    with pytest.raises(ValueError, match=r"m must be a number in \[0, 1\), got 1"):
        check_unit_interval("m", 1)
    assert check_unit_interval("m", 1, closed_right=True) == 1.0
    with pytest.raises(ValueError, match=r"m must be a number in \[0, 1\], got 2"):
        check_unit_interval("m", 2, closed_right=True)


def test_did_you_mean():
    assert did_you_mean("lama_tiny", ["llama_tiny", "fox_tiny"]) == " (did you mean 'llama_tiny'?)"
    assert did_you_mean("zzz", ["llama_tiny"]) == ""
    assert did_you_mean(3, ["3"]) == ""  # only strings are compared
    assert did_you_mean("fox", [1, "fix"]) == " (did you mean 'fix'?)"


def test_check_choice():
    assert check_choice("norm", "dyt", ("rmsnorm", "dyt")) == "dyt"
    assert check_choice("k", 2, {1: "a", 2: "b"}) == 2
    with pytest.raises(ValueError, match=r"norm must be one of \['rmsnorm', 'dyt'\], got 'rms_norm' "
                                         r"\(did you mean 'rmsnorm'\?\)"):
        check_choice("norm", "rms_norm", ("rmsnorm", "dyt"))
    with pytest.raises(ValueError, match=r"norm must be one of \['a', 'b'\], got 'zzz'$"):
        check_choice("norm", "zzz", ("a", "b"))
    with pytest.raises(ValueError, match=r"k must be one of \[1, 2\], got \[1\]"):
        check_choice("k", [1], frozenset((1, 2)))


def test_check_bool():
    assert check_bool("flag", True) is True and check_bool("flag", False) is False
    for bad in (0, 1, "True", None):
        with pytest.raises(ValueError, match=rf"flag must be True or False, got {bad!r}"):
            check_bool("flag", bad)


def test_check_shape():
    assert check_shape("q", np.zeros((2, 3, 4)), (2, None, 4)) == (2, 3, 4)
    with pytest.raises(ValueError, match=r"q must have shape \[B, T, K\] = \(2, \*, 5\), got \(2, 3, 4\)"):
        check_shape("q", np.zeros((2, 3, 4)), (2, None, 5), "[B, T, K]")
    with pytest.raises(ValueError, match=r"v must have shape \(3,\), got \(3, 1\)"):
        check_shape("v", jnp.zeros((3, 1)), (3,))
    with pytest.raises(ValueError, match="v must be an array, got list"):
        check_shape("v", [1, 2, 3], (3,))


def test_check_float_array():
    assert check_float_array("x", np.zeros((2, 3), np.float32), (None, 3)) == (2, 3)
    for dtype in (jnp.bfloat16, jnp.float16, jnp.float8_e4m3fn):
        assert check_float_array("x", jnp.zeros(4, dtype), (4,), "[N]") == (4,)
    with pytest.raises(ValueError, match=r"x must be a float array of shape \[B, V\] = \(\*, 3\), got int32 \(2, 3\)"):
        check_float_array("x", np.zeros((2, 3), np.int32), (None, 3), "[B, V]")
    with pytest.raises(ValueError, match=r"x must be a float array of shape \(\*, 3\), got float32 \(3,\)"):
        check_float_array("x", jnp.zeros(3), (None, 3))
    with pytest.raises(ValueError, match=r"x must be a float array of shape \(3,\), got bool \(3,\)"):
        check_float_array("x", np.zeros(3, bool), (3,))
    with pytest.raises(ValueError, match="x must be a float array, got list"):
        check_float_array("x", [1.0], (1,))


def test_check_int_array():
    assert check_int_array("ids", np.zeros((2, 3), np.int64), (2, 3), "[B, T]") == (2, 3)
    assert check_int_array("ids", jnp.zeros(4, jnp.uint8), (None,)) == (4,)
    floats = r"ids must be an integer array of shape \[B, T\] = \(2, 3\), got float32 \(2, 3\)"
    with pytest.raises(ValueError, match=floats):
        check_int_array("ids", jnp.zeros((2, 3)), (2, 3), "[B, T]")
    with pytest.raises(ValueError, match=r"ids must be an integer array of shape \(2, 3\), got int32 \(2, 4\)"):
        check_int_array("ids", jnp.zeros((2, 4), jnp.int32), (2, 3))
    with pytest.raises(ValueError, match=r"ids must be an integer array of shape \(3,\), got bool \(3,\)"):
        check_int_array("ids", np.zeros(3, bool), (3,))
    with pytest.raises(ValueError, match="ids must be an integer array, got tuple"):
        check_int_array("ids", (1, 2), (2,))


def test_check_pairs():
    assert check_pairs("opts", ()) == ()
    assert check_pairs("opts", (("a", 1), ("b", None))) == (("a", 1), ("b", None))
    for bad in ([("a", 1)], (("a", 1, 2),), ((1, "a"),), "a"):
        with pytest.raises(ValueError, match=r"opts must be a tuple of \(name, value\) pairs, got "):
            check_pairs("opts", bad)


def test_every_exported_helper_is_tested():
    tested = {name for name in globals() if name in validation.__all__}
    assert tested == set(validation.__all__)
