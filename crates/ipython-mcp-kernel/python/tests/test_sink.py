"""Tests of the helper's terminal sink (``sink.TerminalSink``), against an unbounded reference
model and the cases shared with the server's ``terminal.rs`` (output crate) (``sink_cases.json``).

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
    return sink.kept()[:4]


def expected_from_reference(limit, head_chars, events):
    """The view of the whole rendering: all of it when it fits, else a head and a tail cut at
    line boundaries when one is near, and the exact counts between them."""
    rendered = reference_render(events)
    total = len(rendered)
    if total <= limit:
        return rendered, "", 0, 0
    head = rendered[:head_chars]
    newline = head.rfind("\n")
    if newline >= 0 and 2 * (newline + 1) >= len(head):
        head = head[: newline + 1]
    tail_chars = limit - head_chars
    tail = rendered[total - tail_chars :] if tail_chars else ""
    if tail_chars and rendered[total - tail_chars - 1] != "\n":
        newline = tail.find("\n")
        if newline >= 0 and 2 * (newline + 1) <= tail_chars:
            tail = tail[newline + 1 :]
    omitted_lines = rendered.count("\n") - head.count("\n") - tail.count("\n")
    return head, tail, total - len(head) - len(tail), omitted_lines


def case_expectation(case):
    return case["head"], case["tail"], case["omitted"], case["omitted_lines"]


class SmallChunkSink(helper.sink.TerminalSink):
    """Splits every write into 3-character slices, to exercise slice boundaries."""

    _CHUNK = 3


def test_fixture_has_the_promised_coverage():
    assert len(SINK_CASES) >= 25
    assert len({case["name"] for case in SINK_CASES}) == len(SINK_CASES)


@pytest.mark.parametrize("case", SINK_CASES, ids=[case["name"] for case in SINK_CASES])
def test_fixture_expectations_match_the_reference_model(case):
    assert expected_from_reference(case["limit"], case["head_chars"], case_events(case)) == case_expectation(case)


@pytest.mark.parametrize("case", SINK_CASES, ids=[case["name"] for case in SINK_CASES])
@pytest.mark.parametrize("sink_class", [helper.sink.TerminalSink, SmallChunkSink])
def test_sink_matches_fixture(case, sink_class):
    sink = sink_class(case["limit"], case["head_chars"])
    assert run_sink(sink, case_events(case)) == case_expectation(case)


@pytest.mark.parametrize("sink_class", [helper.sink.TerminalSink, SmallChunkSink])
def test_sink_matches_reference_on_random_input(sink_class):
    rng = random.Random(20261201)
    alphabet = ["a", "b", "\r", "\n", "€", "𝄞", "\r\n"]
    for _ in range(6000):
        limit = rng.randint(0, 12)
        head_chars = rng.choice([limit, rng.randint(0, limit)])
        events = []
        for _ in range(rng.randint(0, 8)):
            if rng.random() < 0.05:
                events.append(CLEAR)
            else:
                events.append("".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12))))
        sink = sink_class(limit, head_chars)
        expected = expected_from_reference(limit, head_chars, events)
        assert run_sink(sink, events) == expected, (limit, head_chars, events)
        assert len(sink.text()) <= limit


def test_sink_counts_raw_characters_and_clear_resets_them():
    sink = helper.sink.TerminalSink(4)
    sink.write("ab\rc\n")
    assert sink.total_written() == 5
    sink.clear()
    assert (sink.text(), sink.omitted(), sink.total_written()) == ("", 0, 0)


def test_line_numbers_count_the_whole_stream_across_clears_until_reset():
    sink = helper.sink.TerminalSink(10, 4)
    sink.write("a\nb\n")
    sink.clear()
    sink.write("".join("%d\n" % i for i in range(3, 10)))
    # Line 3 of the stream is the first line after the clear; the head keeps 3 and 4.
    assert sink.kept() == ("3\n4\n", "7\n8\n9\n", 4, 2, 5)
    sink.reset()
    sink.write("x\n" * 10)
    assert sink.kept()[4] == 3


def test_a_hundred_thousand_lines_keep_their_first_and_last_lines():
    sink = helper.sink.TerminalSink(8192, 8192 // 5)
    text = "\n".join("line %d" % i for i in range(100_000)) + "\n"
    sink.write(text)
    head, tail, omitted, omitted_lines, first = sink.kept()
    assert head.startswith("line 0\nline 1\n") and head.endswith("\n")
    assert tail.endswith("line 99998\nline 99999\n")
    assert tail.split("\n")[0].startswith("line ")  # whole lines only
    assert omitted == len(text) - len(head) - len(tail)
    assert omitted_lines == 100_000 - head.count("\n") - tail.count("\n")
    assert first == head.count("\n") + 1
    assert len(head) + len(tail) <= 8192 and len(tail) > 4 * len(head) - 100


def test_sink_memory_stays_bounded():
    sink = helper.sink.TerminalSink(100, 20)
    for _ in range(1000):
        sink.write("y" * 1000 + "\r" + "z" * 500 + "\n")
        sink.write("w" * 300)
    stored = sum(map(len, sink._head)) + len(sink._line)
    assert stored <= 100
    stored_tail = sum(map(len, sink._tail_parts)) + len(sink._tail_line)
    assert stored_tail <= 3 * 81
    assert sink.omitted() == 1001 + 999 * 1301 + 300 - 100


def test_sink_is_fast_on_huge_writes():
    sink = helper.sink.TerminalSink(8192)
    huge = "x" * 200_000_000
    started = time.perf_counter()
    sink.write(huge)
    one_line = time.perf_counter() - started
    assert sink.omitted() == 200_000_000 - 8192

    sink = helper.sink.TerminalSink(8192, 1638)
    started = time.perf_counter()
    sink.write(huge)
    one_line_with_tail = time.perf_counter() - started
    assert sink.omitted() == 200_000_000 - 8192

    sink = helper.sink.TerminalSink(8192, 1638)
    many = "".join("line %d of a lot of output\n" % i for i in range(50_000))
    started = time.perf_counter()
    for line in many.splitlines(keepends=True):
        sink.write(line)
    sink.write(many)
    many_lines = time.perf_counter() - started
    head, tail, omitted = sink.kept()[:3]
    assert omitted == 2 * len(many) - len(head) - len(tail)
    assert tail.endswith("line 49999 of a lot of output\n")

    sink = helper.sink.TerminalSink(8192, 1638)
    bars = "\r 42%|####      | 420/1000" * 1_000_000
    started = time.perf_counter()
    sink.write(bars)
    progress = time.perf_counter() - started
    assert sink.text() == " 42%|####      | 420/1000"
    # Catches quadratic behaviour only (that would take minutes); typical times are far below
    # a second, and a loaded 2-core machine must not fail this.
    times = (one_line, one_line_with_tail, many_lines, progress)
    assert max(times) < 30.0, times
