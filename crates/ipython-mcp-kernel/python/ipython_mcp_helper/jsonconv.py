"""JSON conversion of values a call returns (``call_function`` and dynamic tools).

``to_json`` keeps JSON data as it is, cut to the configured bounds (which set ``truncated``,
never an error), and refuses everything else with ``NotJson`` naming where and what it is.
``call_for_json`` calls once and converts, turning a raise into an ``execution_error``.
"""

import inspect
import itertools
import math

from .bounds import guarded_value, safe_str, sanitize_text, type_label
from .rpc import RequestError, execution_error

# An int this long has over 3900 decimal digits: near Python's default int-to-str limit (4300),
# past which the reply could not even be serialized.
_MAX_JSON_INT_BITS = 13_000
# Values (of any kind, at any depth) converted at most, whatever the per-container bounds: a
# structure that shares its children could otherwise cost max_results ** max_json_depth.
_MAX_JSON_VALUES = 100_000


class NotJson(Exception):
    """A value ``to_json`` cannot represent; the message says where and what type it is."""


def to_json(value, max_depth, max_items, max_chars):
    """Converts a call result to JSON data; returns ``(data, truncated)``.

    Kept: None, bool, int, finite float, str (cut to ``max_chars``), list and tuple (as lists),
    dict with str keys; subclasses are converted to the base type without calling their
    overrides. Bounds cut, set ``truncated`` and are never an error: at most ``max_items``
    items per list/dict (in order), containers nested deeper than ``max_depth`` become empty
    (the top-level container is depth 1), at most ``_MAX_JSON_VALUES`` values and
    ``max_chars * max_items`` string characters in all. Raises ``NotJson`` for NaN/infinity,
    a non-str dict key, and every other type (sets, bytes, objects...).
    """
    converter = _JsonConverter(max_depth, max_items, max_chars)
    data = converter.convert(value, 0)
    return data, converter.truncated


class _JsonConverter:
    def __init__(self, max_depth, max_items, max_chars):
        self.max_depth = max_depth
        self.max_items = max_items
        self.max_chars = max_chars
        self.chars_left = max_chars * max(max_items, 1)
        self.values_left = _MAX_JSON_VALUES
        self.truncated = False
        self.path = []  # keys and indexes from the top, for error messages

    def fail(self, what):
        where = "the result" + "".join(
            "[%d]" % part if isinstance(part, int) else "[%r]" % (part[:40] + "..." if len(part) > 40 else part)
            for part in self.path
        )
        raise NotJson("%s is %s, which JSON cannot represent" % (where, what))

    def convert(self, value, depth):
        self.values_left -= 1
        if value is None or value is True or value is False:
            return value
        if isinstance(value, int):
            if int.bit_length(value) > _MAX_JSON_INT_BITS:
                self.fail("an int of %d bits" % int.bit_length(value))
            return int.__int__(value)
        if isinstance(value, float):
            number = float.__float__(value)
            if not math.isfinite(number):
                self.fail("the float %r" % number)
            return number
        if isinstance(value, str):
            return self.text(str.__str__(value))
        if isinstance(value, (list, tuple)):
            base = list if isinstance(value, list) else tuple
            if depth >= self.max_depth:
                self.truncated = self.truncated or base.__len__(value) > 0
                return []
            return self.items(enumerate(base.__getitem__(value, slice(0, self.max_items))), base.__len__(value), depth, [])
        if isinstance(value, dict):
            for key in dict.keys(value):
                if not isinstance(key, str):
                    self.fail("a dict with a key of type %s (JSON object keys are strings)" % type_label(key))
            if depth >= self.max_depth:
                self.truncated = self.truncated or dict.__len__(value) > 0
                return {}
            pairs = itertools.islice(dict.items(value), self.max_items)
            return self.items(pairs, dict.__len__(value), depth, {})
        self.fail("a %s" % type_label(value))

    def text(self, text):
        limit = min(self.max_chars, max(self.chars_left, 0))
        if len(text) > limit:
            text = text[:limit]
            self.truncated = True
        self.chars_left -= len(text)
        return sanitize_text(text)

    def items(self, pairs, count, depth, out):
        if count > self.max_items:
            self.truncated = True
        for key, item in pairs:
            if self.values_left <= 0:
                self.truncated = True
                break
            if isinstance(out, list):
                self.path.append(key)
                out.append(self.convert(item, depth + 1))
            else:
                key = str.__str__(key)
                key_text = sanitize_text(key[: self.max_chars])
                if len(key) > self.max_chars or key_text in out:
                    self.truncated = True
                    if key_text in out:
                        continue
                self.path.append(key)
                out[key_text] = self.convert(item, depth + 1)
            self.path.pop()
        return out


def call_for_json(function, name, arguments, config):
    """Calls ``function(**arguments)`` once and converts the result with ``to_json``:
    ``{"result", "truncated"}``, or ``execution_error`` (it raised), or ``result_not_json``
    (a coroutine, closed without running, or anything JSON cannot carry)."""
    try:
        result = function(**arguments)
    except BaseException as error:  # incl. SystemExit, and KeyboardInterrupt on a timeout
        tb = error.__traceback__
        raise execution_error(error, "calling %r raised" % name, config, tb.tb_next if tb is not None else None) from None
    if inspect.iscoroutine(result):
        guarded_value(result.close, None)
        raise RequestError(
            "result_not_json",
            "%r returned a coroutine, which is not awaited here and is not JSON; it was closed without running" % name,
        )
    try:
        data, truncated = to_json(result, config["max_json_depth"], config["max_results"], config["max_text_chars"])
    except NotJson as error:
        raise RequestError("result_not_json", safe_str(error)) from None
    except Exception as error:  # a subclass whose storage cannot be read
        raise RequestError(
            "result_not_json", "the result (a %s) could not be converted: %s" % (type_label(result), type(error).__name__)
        ) from None
    return {"result": data, "truncated": truncated}
