"""Tests of the helper's JSON conversion of call results (``jsonconv.to_json``).

Run from the workspace root:  python -m pytest crates/ipython-mcp-kernel/python/tests -q
"""

import collections
import math

import pytest

from harness import load_helper


class Widget:
    """A widget."""

    size = 3

    def __init__(self, size=1):
        self.size = size


def test_to_json_keeps_json_data():
    helper = load_helper()
    value = {"a": [1, 2.5, None, True, "s"], "b": (1, 2), "c": {"d": False}}
    assert helper.jsonconv.to_json(value, 6, 100, 100) == ({"a": [1, 2.5, None, True, "s"], "b": [1, 2], "c": {"d": False}}, False)
    Point = collections.namedtuple("Point", "x y")

    class Text(str):
        def __str__(self):
            raise AssertionError("never called")

    data, truncated = helper.jsonconv.to_json([Point(1, 2), collections.OrderedDict(k=Text("v")), True, 3], 6, 100, 100)
    assert (data, truncated) == ([[1, 2], {"k": "v"}, True, 3], False)
    assert type(data[1]["k"]) is str and type(data[2]) is bool


def test_to_json_bounds_set_truncated():
    helper = load_helper()
    assert helper.jsonconv.to_json(list(range(10)), 6, 3, 100) == ([0, 1, 2], True)
    assert helper.jsonconv.to_json({str(i): i for i in range(5)}, 6, 2, 100) == ({"0": 0, "1": 1}, True)
    assert helper.jsonconv.to_json("abcdef", 6, 100, 4) == ("abcd", True)
    assert helper.jsonconv.to_json([[[1]], [[]]], 2, 100, 100) == ([[[]], [[]]], True)
    assert helper.jsonconv.to_json([[[]]], 2, 100, 100) == ([[[]]], False)  # an empty cut loses nothing
    assert helper.jsonconv.to_json({"a": {"b": {"c": 1}}}, 2, 100, 100) == ({"a": {"b": {}}}, True)
    assert helper.jsonconv.to_json([1], 0, 100, 100) == ([], True)
    assert helper.jsonconv.to_json({"k" * 10: 1}, 6, 100, 4) == ({"kkkk": 1}, True)
    cycle = []
    cycle.append(cycle)
    assert helper.jsonconv.to_json(cycle, 3, 100, 100) == ([[[[]]]], True)  # levels 1-3 kept, the 4th cut
    # Shared children cannot multiply the work: the number of values is bounded.
    wide = [list(range(100))] * 100
    nested = [wide] * 100
    data, truncated = helper.jsonconv.to_json(nested, 6, 100, 100)
    assert truncated and sum(len(row) for block in data for row in block) < 100_000
    # Strings share one budget of max_chars * max_items characters.
    data, truncated = helper.jsonconv.to_json(["x" * 10] * 5, 6, 2, 10)
    assert truncated and data == ["x" * 10, "x" * 10]


@pytest.mark.parametrize(
    "value, where",
    [
        ({1, 2}, "the result is a set"),
        ([1, float("nan")], "the result[1] is the float nan"),
        ({"a": [math.inf]}, "the result['a'][0] is the float inf"),
        ({1: "x"}, "the result is a dict with a key of type int"),
        ([b"bytes"], "the result[0] is a bytes"),
        ({"w": Widget()}, "the result['w'] is a %s.Widget" % __name__),
        (10 ** 5000, "the result is an int of"),
    ],
    ids=["set", "nan", "inf", "int-key", "bytes", "object", "huge-int"],
)
def test_to_json_refuses_what_json_cannot_carry(value, where):
    helper = load_helper()
    with pytest.raises(helper.jsonconv.NotJson) as raised:
        helper.jsonconv.to_json(value, 6, 100, 100)
    assert str(raised.value).startswith(where), str(raised.value)
