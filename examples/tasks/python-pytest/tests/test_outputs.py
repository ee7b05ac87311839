import sys

sys.path.insert(0, "/app")

from mathlib import clamp, mean  # noqa: E402


def test_mean_of_numbers():
    assert mean([1, 2, 3, 4]) == 2.5


def test_mean_of_one_number():
    assert mean([7]) == 7


def test_mean_of_nothing_is_zero():
    assert mean([]) == 0.0


def test_clamp_below_range():
    assert clamp(-5, 0, 10) == 0


def test_clamp_above_range():
    assert clamp(50, 0, 10) == 10


def test_clamp_inside_range():
    assert clamp(4, 0, 10) == 4
