"""Tests of the helper's terminal sink (``sink.TerminalSink``), against an unbounded reference
model and the cases shared with the server's ``sink.rs`` (``sink_cases.json``).

Run from the workspace root:  python -m pytest crates/ipython-mcp-kernel/python/tests -q
"""

import json
import os
import random
import time

import pytest

from harness import HERE, load_helper

with open(os.path.join(HERE, "sink_cases.json"), encoding="utf-8") as _file:
    SINK_CASES = json.load(_file)["cases"]

helper = load_helper()


# --------------------------------------------------------------------------------------------
# The terminal sink
# --------------------------------------------------------------------------------------------

CLEAR = object()


def reference_render(events):
    """The obviously correct, unbounded model: one character at a time."""
    lines, line, cursor = [], [], 0
    for event in events:
        if event is CLEAR:
            lines, line, cursor = [], [], 0
            continue
        for char in event:
            if char == "\n":
                lines.append("".join(line))
                line, cursor = [], 0
            elif char == "\r":
                cursor = 0
            else:
                if cursor < len(line):
                    line[cursor] = char
                else:
                    line.append(char)
                cursor += 1
    return "".join(text + "\n" for text in lines) + "".join(line)


def case_events(case):
    """A fixture case as a list of writes (str) and CLEARs; see "_format" in the JSON."""
    clear_after = set(case.get("clear_after", []))
    events = []
    for index, write in enumerate(case["writes"]):
        if isinstance(write, str):
            events.append(write)
        else:
            text, times = write["repeat"]
            events.extend([text] * times)
        if index in clear_after:
            events.append(CLEAR)
    return events


def run_sink(sink, events):
    for event in events:
        if event is CLEAR:
            sink.clear()
        else:
            sink.write(event)
    return sink.text(), sink.omitted()


def expected_from_reference(limit, events):
    rendered = reference_render(events)
    return rendered[:limit], len(rendered) - min(len(rendered), limit)


class SmallChunkSink(helper.sink.TerminalSink):
    """Splits every write into 3-character slices, to exercise slice boundaries."""

    _CHUNK = 3


def test_fixture_has_the_promised_coverage():
    assert len(SINK_CASES) >= 25
    assert len({case["name"] for case in SINK_CASES}) == len(SINK_CASES)


@pytest.mark.parametrize("case", SINK_CASES, ids=[case["name"] for case in SINK_CASES])
def test_fixture_expectations_match_the_reference_model(case):
    assert expected_from_reference(case["limit"], case_events(case)) == (case["text"], case["omitted"])


@pytest.mark.parametrize("case", SINK_CASES, ids=[case["name"] for case in SINK_CASES])
@pytest.mark.parametrize("sink_class", [helper.sink.TerminalSink, SmallChunkSink])
def test_sink_matches_fixture(case, sink_class):
    text, omitted = run_sink(sink_class(case["limit"]), case_events(case))
    assert (text, omitted) == (case["text"], case["omitted"])


@pytest.mark.parametrize("sink_class", [helper.sink.TerminalSink, SmallChunkSink])
def test_sink_matches_reference_on_random_input(sink_class):
    rng = random.Random(20261201)
    alphabet = ["a", "b", "\r", "\n", "€", "𝄞", "\r\n"]
    for _ in range(3000):
        limit = rng.randint(0, 12)
        events = []
        for _ in range(rng.randint(0, 8)):
            if rng.random() < 0.05:
                events.append(CLEAR)
            else:
                events.append("".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12))))
        sink = sink_class(limit)
        assert run_sink(sink, events) == expected_from_reference(limit, events), (limit, events)
        assert len(sink.text()) <= limit


def test_sink_counts_raw_characters_and_clear_resets_them():
    sink = helper.sink.TerminalSink(4)
    sink.write("ab\rc\n")
    assert sink.total_written() == 5
    sink.clear()
    assert (sink.text(), sink.omitted(), sink.total_written()) == ("", 0, 0)


def test_sink_memory_stays_bounded():
    sink = helper.sink.TerminalSink(100)
    for _ in range(1000):
        sink.write("y" * 1000 + "\r" + "z" * 500 + "\n")
    stored = sum(map(len, sink._head)) + len(sink._line)
    assert stored <= 100
    assert sink.omitted() == 1000 * 1001 - 100


def test_sink_is_fast_on_huge_writes():
    sink = helper.sink.TerminalSink(8192)
    huge = "x" * 200_000_000
    started = time.perf_counter()
    sink.write(huge)
    one_line = time.perf_counter() - started
    assert sink.omitted() == 200_000_000 - 8192

    sink = helper.sink.TerminalSink(8192)
    many = "".join("line %d of a lot of output\n" % i for i in range(50_000))
    started = time.perf_counter()
    for line in many.splitlines(keepends=True):
        sink.write(line)
    sink.write(many)
    many_lines = time.perf_counter() - started
    assert sink.omitted() == 2 * len(many) - 8192

    sink = helper.sink.TerminalSink(8192)
    bars = "\r 42%|####      | 420/1000" * 1_000_000
    started = time.perf_counter()
    sink.write(bars)
    progress = time.perf_counter() - started
    assert sink.text() == " 42%|####      | 420/1000"
    # Catches quadratic behaviour only (that would take minutes); typical times are far below
    # a second, and a loaded 2-core machine must not fail this.
    assert max(one_line, many_lines, progress) < 30.0, (one_line, many_lines, progress)
