"""ipython-mcp's helper, installed into every Python kernel right after start.

The Rust server executes this source (silently, in a private namespace) and calls
``install(config)``. From then on the helper:

* bounds output *inside the kernel*: ipykernel sends a huge print as one huge iopub message,
  so the only place a bound can hold is before the message is built. Each stream keeps a
  bounded model of what a Jupyter front end would show (``TerminalSink``) and forwards only a
  fixed number of raw characters per execution; display items, results and tracebacks are
  cut before ipykernel serializes them;
* reports, at the end of every execution, the bounded text and exact omitted counts on its
  comm (target ``ipython_mcp``);
* answers JSON requests on that comm (``METHODS``), among them the namespace tools (``list``,
  ``search``, ``inspect``, ``call_function``, ``reload``, ``remove``, ``reset``), which read and
  change the shell's ``user_ns`` by dict and attribute access only (nothing is ever eval'd),
  and the dynamic tools (``register_tool``, ``unregister_tool``, ``tool_catalog``,
  ``call_tool``), which publish live callables with input schemas generated from their
  signatures (string annotations are evaluated as ``inspect.signature(eval_str=True)`` does);
* applies the configured namespace at install: library paths on ``sys.path``, preloaded and
  aliased modules bound in ``user_ns`` (the "configured bindings", restored by ``reset``);
  per-module import failures are reported by the ``install_info`` method, not raised.

Messages on the comm (kernel -> server unless noted):

* on open: ``{"event": "ready", "version": HELPER_VERSION}``;
* server -> kernel: ``{"id": str, "method": str, "params": {...}}``, answered by
  ``{"id", "ok": true, "result"}`` or ``{"id", "ok": false, "error": {"code", "message", ...}}``
  (an ``execution_error`` also carries ``ename``, ``evalue`` and ``traceback``);
* at the end of each top-level execution (an ``execute_request``, silent or not, or a comm
  message handled while nothing runs), with that request as parent, after its last forwarded
  stream message and before its ``idle``: ``{"event": "execution_report", "stdout": {"text",
  "omitted_chars"}, "stderr": {...}, "display_count", "display_omitted", "raw_chars":
  {"stdout", "stderr"}}``.

Standard library only at import time (Python >= 3.9); IPython, ipykernel and comm are
imported inside ``install`` because they only exist in a running kernel.
"""

import functools
import hashlib
import importlib
import inspect
import itertools
import json
import keyword
import math
import os
import platform
import re
import sys
import threading
import time
import traceback
import types
import typing

HELPER_VERSION = "1"
COMM_TARGET = "ipython_mcp"
CONFIG_KEYS = (
    "max_text_chars",
    "max_display_items",
    "max_image_bytes",
    "max_traceback_chars",
    "max_string_chars",
    "raw_forward_chars",
    # 1: report every execution. 0: report only when the kernel held something back (stream
    # text past raw_forward_chars, displays past max_display_items); otherwise the server saw
    # every character and its own sink is exact, and a quiet cell costs no extra message.
    "report_always",
)
# Bounds of the namespace tools; optional (these defaults match the server's).
# max_repr_chars bounds every short text field (representations, signatures, list's doc);
# max_results the items per list result and per JSON array/object; max_json_depth the nesting
# kept in call_function results. inspect's documentation uses max_text_chars.
OPTIONAL_CONFIG_KEYS = (
    ("max_repr_chars", 1024),
    ("max_results", 100),
    ("max_json_depth", 6),
    # PNG and JPEG images over max_image_bytes but at most this large are sent as they are: the
    # server downscales them (one implementation, for every kernel).
    ("max_fit_input_bytes", 0),
)
# The spool (optional): the full text of each execution's stdout and stderr, written to
# ``<spool_dir>/<execute_request msg_id>.stdout`` / ``.stderr`` (UTF-8, at most spool_max_bytes
# each; the rest is counted in the report), so the server can page output it never received.
# Beside them, ``<msg_id>.outputs`` logs every output as the kernel produced it, before any
# bound, one JSON object a line in arrival order (see ``OutputLog``), so a notebook can be
# saved with what Jupyter would have saved while the server only received the bounded view.
SPOOL_FLUSH_SECONDS = 0.25
_SPOOL_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")
# config["namespace"] (optional): what install adds to the user namespace.
NAMESPACE_KEYS = ("library_paths", "preload_modules", "module_aliases")
IMAGE_MIMES = ("image/png", "image/jpeg", "image/gif", "image/webp")
# SVG is text, but a cut SVG is as useless as a cut PNG: it is kept whole or dropped, by bytes.
SVG_MIME = "image/svg+xml"


# --------------------------------------------------------------------------------------------
# Pure functions: text sanitizing, the terminal sink, bundle and traceback bounds
# --------------------------------------------------------------------------------------------

_SURROGATE = re.compile("[\ud800-\udfff]")
_ANSI_ESCAPE = re.compile(
    r"\x1b(?:"
    r"\[[0-?]*[ -/]*[@-~]"  # CSI: colours, cursor movement
    r"|\][^\x07\x1b]*(?:\x07|\x1b\\)"  # OSC: titles, hyperlinks
    r"|[@-Z\\-_]"  # any other two-character escape
    r")"
)


def sanitize_text(text):
    """Replaces lone surrogates (which UTF-8 and so JSON cannot carry) with U+FFFD.

    One character in, one character out, so counts stay exact. The common cases cost O(1)
    (ASCII) or one encode; only broken text pays for the substitution.
    """
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return _SURROGATE.sub("\ufffd", text)
    return text


def strip_ansi(text):
    """Removes terminal escape sequences (IPython colours its tracebacks)."""
    return _ANSI_ESCAPE.sub("", text) if "\x1b" in text else text


class TerminalSink:
    """What a Jupyter front end shows for one output stream, in O(limit) memory.

    Rendering follows Jupyter's ``fixCarriageReturn``: ``\\n`` commits the current line, ``\\r``
    moves the cursor to column 0 of the current line and later characters overwrite from there
    (the line keeps its longer length). ``\\r\\n`` therefore renders as ``\\n``, also when split
    across writes. ``text()`` is the first ``limit`` characters of the rendering and
    ``omitted()`` counts the rest exactly, however much was written.

    Only the first ``limit`` rendered characters are stored: the committed head and the stored
    prefix of the current line. The rest is lengths and the cursor, as ints. The work is done by
    ``str`` methods (``in``, ``find``, ``split``, slicing), so a huge write costs a few C-speed
    passes, not a Python loop per character. Python-level work is per *line* only before the
    head is full, and afterwards only for lines that contain a ``\r``.
    """

    # Huge writes are processed in slices of this many characters, so the temporary lists made
    # by ``str.split`` stay small whatever one write holds.
    _CHUNK = 1 << 20

    def __init__(self, limit):
        self._limit = limit
        self.clear()

    def clear(self):
        """Forgets everything written so far, text and counts."""
        self._head = []  # stored committed text, at most `limit` characters in total
        self._committed = 0  # length of the committed rendering (may exceed `limit`)
        self._line = ""  # stored prefix of the current line
        self._line_len = 0  # length of the current line
        self._cursor = 0  # column where the next character goes
        self._written = 0

    def write(self, text):
        """Renders ``text`` after everything written before (a str; any length)."""
        self._written += len(text)
        has_cr = "\r" in text
        if not has_cr and "\n" not in text:
            self._put(text)  # the common case: more characters on the current line
            return
        start = 0
        while start < len(text):
            if not has_cr and self._committed >= self._limit:
                self._count_lines(text, start)
                return
            self._feed(text[start : start + self._CHUNK] if len(text) > self._CHUNK else text)
            start += self._CHUNK

    def text(self):
        """The first `limit` characters of the rendered output."""
        if self._committed >= self._limit:
            return "".join(self._head)
        return "".join(self._head) + self._line

    def omitted(self):
        """How many rendered characters ``text()`` leaves out."""
        total = self._committed + self._line_len
        return total - min(total, self._limit)

    def total_written(self):
        """Raw characters written since creation or the last ``clear()``."""
        return self._written

    def _feed(self, text):
        if "\r" in text:
            # "\r\n" renders exactly as "\n" (the "\r" only moves the cursor and "\n" commits
            # the line intact); replacing it keeps ordinary CRLF output on the fast paths.
            text = text.replace("\r\n", "\n")
        has_cr = "\r" in text
        if not has_cr and self._committed >= self._limit:
            self._count_lines(text, 0)
            return
        lines = text.split("\n")
        self._put(lines[0])
        for index in range(1, len(lines)):
            self._commit()
            if self._committed >= self._limit:
                # Nothing more can be stored: the remaining complete lines only add lengths.
                middle = lines[index:-1]
                width = _rendered_width if has_cr else len
                self._committed += sum(map(width, middle)) + len(middle)
                self._put(lines[-1])
                return
            self._put(lines[index])

    def _count_lines(self, text, start):
        """Counts ``text[start:]``, which has no "\\r", once the head is full: arithmetic on
        the positions of its first and last newline, without copying or splitting it."""
        first = text.find("\n", start)
        if first < 0:
            self._cursor += len(text) - start
            self._line_len = max(self._line_len, self._cursor)
            return
        last = text.rfind("\n", start)
        # text[start:first] completes the current line; every character after the first
        # newline up to and including the last one is rendered as it is.
        self._committed += max(self._line_len, self._cursor + first - start) + 1 + (last - first)
        self._line = ""
        self._line_len = self._cursor = len(text) - last - 1

    def _put(self, segment):
        """Writes a segment with no newline at the cursor; each "\\r" in it returns to column 0."""
        pieces = segment.split("\r") if "\r" in segment else (segment,)
        room = self._limit - self._committed
        first = pieces[0]
        if room > 0 and self._cursor < room and first:
            end = self._cursor + len(first)
            self._line = self._line[: self._cursor] + first[: room - self._cursor] + self._line[end:]
        self._cursor += len(first)
        self._line_len = max(self._line_len, self._cursor)
        if len(pieces) == 1:
            return
        rest = pieces[1:]
        widest = max(map(len, rest))
        if room > 0 and widest > 0:
            self._line = _overlay_from_column_zero(self._line, rest, min(room, widest))
        self._line_len = max(self._line_len, widest)
        self._cursor = len(rest[-1])

    def _commit(self):
        room = self._limit - self._committed
        if room > 0:
            self._head.append(self._line)
            if self._line_len < room:
                self._head.append("\n")
        self._committed += self._line_len + 1
        self._line = ""
        self._line_len = self._cursor = 0


def _rendered_width(line):
    """Rendered length of a complete line that starts empty (its widest "\\r" piece)."""
    if "\r" not in line:
        return len(line)
    return max(map(len, line.split("\r")))


def _overlay_from_column_zero(stored, pieces, reach):
    """``stored`` after writing each piece from column 0, in order, kept to ``reach`` chars.

    A character shows the last piece that reaches its column, so walking the pieces backwards
    only the ones longer than everything after them matter, and the walk stops as soon as
    ``reach`` (the widest piece, capped at the room left) is covered. A tqdm bar rewritten
    thousands of times in one write costs one step, not thousands.
    """
    parts = []
    covered = 0
    for piece in reversed(pieces):
        if len(piece) > covered:
            end = min(len(piece), reach)
            parts.append(piece[covered:end])
            covered = end
            if covered >= reach:
                break
    return "".join(parts) + stored[covered:]


def bound_strings(value, max_chars):
    """A copy of a JSON-like value with every string cut to ``max_chars`` and sanitized.

    Bytes are cut the same way (ipykernel base64-encodes them later). Dict keys are
    sanitized but not cut, so no two keys collide.
    """
    if isinstance(value, str):
        return sanitize_text(value[:max_chars] if len(value) > max_chars else value)
    if isinstance(value, dict):
        return {
            (sanitize_text(key) if isinstance(key, str) else key): bound_strings(item, max_chars)
            for key, item in value.items()
        }
    if isinstance(value, (list, tuple)):
        return [bound_strings(item, max_chars) for item in value]
    if isinstance(value, (bytes, bytearray)) and len(value) > max_chars:
        return bytes(value[:max_chars])
    return value


def image_size(value, mime=None):
    """Decoded size of an image entry: base64 text is estimated (len * 3 // 4), not decoded;
    SVG text is measured in UTF-8 bytes."""
    if mime == SVG_MIME:
        if isinstance(value, str):
            return len(value.encode("utf-8", "replace"))
        return len(value) if isinstance(value, (bytes, bytearray, memoryview)) else None
    if isinstance(value, str):
        return len(value) * 3 // 4
    if isinstance(value, (bytes, bytearray, memoryview)):
        return len(value)
    return None


def bound_bundle(data, metadata, max_string_chars, max_image_bytes, max_fit_input_bytes=0):
    """Bounds a MIME bundle; returns new ``(data, metadata)`` and leaves the inputs alone.

    Raster images larger than ``max_image_bytes`` (decoded) are dropped and recorded as
    ``metadata["ipython_mcp"]["omitted_images"][mime] = decoded_bytes``, except PNG and JPEG
    images of at most ``max_fit_input_bytes``, which are kept for the server to downscale; kept
    images are not cut (a cut image is garbage). SVG is treated as an image measured in UTF-8
    bytes. Every other string is cut to ``max_string_chars``.
    """
    kept = {}
    omitted_images = {}
    for mime, value in data.items():
        size = image_size(value, mime) if mime in IMAGE_MIMES or mime == SVG_MIME else None
        if size is None:
            kept[sanitize_text(mime)] = bound_strings(value, max_string_chars)
        elif size > max_image_bytes and not (mime in FITTED_MIMES and size <= max_fit_input_bytes):
            omitted_images[mime] = size
        else:
            kept[mime] = sanitize_text(value) if isinstance(value, str) else value
    metadata = bound_strings(metadata, max_string_chars) if isinstance(metadata, dict) else {}
    if omitted_images:
        note = metadata.get("ipython_mcp")
        note = dict(note) if isinstance(note, dict) else {}
        note["omitted_images"] = omitted_images
        metadata["ipython_mcp"] = note
    return kept, metadata


# Images the server downscales when they are over the image bound.
FITTED_MIMES = ("image/png", "image/jpeg")


def bound_traceback(stb, max_chars):
    """Strips ANSI escapes and keeps at most ``max_chars`` characters of a traceback.

    IPython's structured traceback is a list of entries: a header first, the exception line
    last. When it is too long, a quarter of the budget keeps its beginning and the rest its end
    (the innermost frames and the exception), cutting entries at the boundaries, and one entry
    ``"... N characters of traceback omitted ..."`` stands in for the middle. Counts are in
    characters after ANSI stripping.
    """
    entries = [sanitize_text(strip_ansi(entry)) for entry in stb]
    total = sum(map(len, entries))
    if total <= max_chars:
        return entries
    head = _take_prefix(entries, max_chars // 4)
    tail = _take_prefix([entry[::-1] for entry in reversed(entries)], max_chars - max_chars // 4)
    tail = [entry[::-1] for entry in reversed(tail)]
    omitted = total - sum(map(len, head)) - sum(map(len, tail))
    return head + ["... %d characters of traceback omitted ..." % omitted] + tail


def _take_prefix(entries, budget):
    """The leading entries that fit in ``budget`` characters, the last one cut to fit."""
    taken = []
    for entry in entries:
        if budget <= 0:
            break
        taken.append(entry[:budget])
        budget -= len(entry)
    return taken


# --------------------------------------------------------------------------------------------
# Comm requests
# --------------------------------------------------------------------------------------------


class RequestError(Exception):
    """Raised by a method to answer ``{"ok": false, "error": {"code", "message", **fields}}``.

    ``fields`` are extra JSON members of the error object (e.g. ``ename``, ``evalue``,
    ``traceback``); the caller bounds them. ``partial`` (set by the raiser, default None) is
    what was worked out before the failure, sent as the reply's ``result`` beside the error.
    """

    partial = None

    def __init__(self, code, message, **fields):
        super().__init__(message)
        self.code = code
        self.message = message
        self.fields = fields


def _method_ping(params):
    return params


def _method_config(params):
    return dict(_current().config)


# name -> callable(params: dict) -> JSON-able result. The namespace methods are added below.
METHODS = {
    "ping": _method_ping,
    "config": _method_config,
}

# Error messages travel in the reply; keep them short whatever the exception says.
_MAX_ERROR_MESSAGE_CHARS = 2000


def handle_request(data):
    """Answers one comm request ``{"id", "method", "params"}``; never raises."""
    request_id = data.get("id") if isinstance(data, dict) else None
    try:
        if not isinstance(data, dict) or not isinstance(data.get("method"), str):
            raise RequestError("invalid_request", "a request is an object with a string 'method'")
        params = data.get("params", {})
        if not isinstance(params, dict):
            raise RequestError("invalid_request", "'params' must be an object")
        method = METHODS.get(data["method"])
        if method is None:
            raise RequestError("unknown_method", "unknown method %r" % data["method"][:100])
        return {"id": request_id, "ok": True, "result": method(params)}
    except RequestError as error:
        return _error_reply(request_id, error.code, error.message, error.fields, error.partial)
    except BaseException as error:  # the handler is a boundary: a raise would mean no reply
        return _error_reply(request_id, "internal_error", "%s: %s" % (type(error).__name__, error))


def _error_reply(request_id, code, message, fields=None, partial=None):
    message = bound_strings(str(message), _MAX_ERROR_MESSAGE_CHARS)
    error = dict(fields or {})
    error.update(code=code, message=message)
    reply = {"id": request_id, "ok": False, "error": error}
    if partial is not None:
        reply["result"] = partial
    return reply


# --------------------------------------------------------------------------------------------
# The namespace: visibility, descriptions, JSON conversion
# --------------------------------------------------------------------------------------------
#
# These functions take the pieces they need (a user_ns dict, IPython's user_ns_hidden, the
# configured binding names, the config), so they are tested without a kernel. Every access to
# a user object that can run user code (repr, getattr, __doc__, signatures, isinstance through
# a __class__ property) is guarded: a hostile object gives a placeholder, never a crash.

# IPython's own bindings in user_ns, protected as the README lists them.
IPYTHON_BINDINGS = frozenset(("In", "Out", "get_ipython", "exit", "quit", "open"))

_MISSING = object()


def is_protected(name, bindings):
    """True for a name ``remove`` refuses and ``reset`` keeps: a name starting with ``_``,
    IPython's bindings, and the configured module bindings (``bindings``, a set of names)."""
    return not isinstance(name, str) or name.startswith("_") or name in IPYTHON_BINDINGS or name in bindings


def is_hidden(name, value, hidden):
    """True when ``name`` still holds the value IPython itself put there (``user_ns_hidden``);
    a hidden name the user rebound (another object) is the user's."""
    return hidden.get(name, _MISSING) is value


def user_names(user_ns, hidden, bindings):
    """The user-created top-level names, sorted: not protected and not IPython's own."""
    return sorted(
        name
        for name, value in list(user_ns.items())
        if not is_protected(name, bindings) and not is_hidden(name, value, hidden)
    )


def _guarded_value(action, default):
    try:
        return action()
    except Exception:
        return default


def value_kind(value):
    """``module``, ``class``, ``function`` (functions, methods, builtins) or ``variable``."""
    if _guarded_value(lambda: isinstance(value, types.ModuleType), False):
        return "module"
    if _guarded_value(lambda: isinstance(value, type), False):
        return "class"
    if _guarded_value(lambda: inspect.isroutine(value), False):
        return "function"
    return "variable"


def callable_kind(value):
    """``list``'s kind of a value: ``function``, ``class`` or ``callable`` (any other callable
    object); None for what ``list`` does not show (non-callables and modules)."""
    kind = value_kind(value)
    if kind in ("function", "class"):
        return kind
    if kind == "module" or not callable(value):
        return None
    return "callable"


def _type_names(value):
    """``(module, qualname)`` of ``type(value)``; module None when the type has no str one."""
    kind = type(value)
    name = _guarded_value(lambda: kind.__qualname__, None)
    if not isinstance(name, str):
        name = _guarded_value(lambda: kind.__name__, None)
    name = name if isinstance(name, str) else "?"
    module = _guarded_value(lambda: kind.__module__, None)
    return (module if isinstance(module, str) else None), name


def qualified_type(value):
    """``module.QualName`` of ``type(value)``, builtins included (``builtins.int``), so a
    type is never mistaken for a user's class of the same name."""
    module, name = _type_names(value)
    return sanitize_text(name if module is None else module + "." + name)


def type_label(value):
    """The type's name for messages: ``int`` for builtins, ``module.QualName`` otherwise."""
    module, name = _type_names(value)
    return sanitize_text(name if module in (None, "builtins") else module + "." + name)


def module_name(value):
    """The module a value belongs to: a module's own ``__name__``, else its ``__module__``
    when that is a str (functions, classes, instances of user classes); else None."""
    if _guarded_value(lambda: isinstance(value, types.ModuleType), False):
        name = _guarded_value(lambda: value.__name__, None)
    else:
        name = _guarded_value(lambda: getattr(value, "__module__", None), None)
    return sanitize_text(name) if isinstance(name, str) else None


def signature_text(value):
    """``str(inspect.signature(value))``, or "" when there is none (or computing it raised)."""
    try:
        text = str(inspect.signature(value))
    except Exception:
        return ""
    return text


def documentation_text(value):
    """``inspect.getdoc(value)`` (cleaned, inherited where inspect finds it), or ""."""
    try:
        doc = inspect.getdoc(value)
    except Exception:
        return ""
    return doc if isinstance(doc, str) else ""


def first_paragraph(text):
    """The text up to its first blank line, stripped."""
    return re.split(r"\n[ \t]*\n", text.strip(), maxsplit=1)[0]


def safe_repr(value):
    """``repr(value)``, or ``<repr failed: ExcType>`` when it raises."""
    try:
        text = repr(value)
    except Exception as error:
        return "<repr failed: %s>" % type(error).__name__
    return text


def bounded_text(text, max_chars):
    """``(text cut to max_chars and sanitized, whether it was cut)``."""
    cut = len(text) > max_chars
    return sanitize_text(text[:max_chars] if cut else text), cut


def safe_str(value):
    try:
        return str(value)
    except Exception as error:
        return "<str failed: %s>" % type(error).__name__


def bounded_fields(fields, truncated):
    """Bounds ``(key, text or None, max_chars)`` triples into a dict, recording one flag per
    field in ``truncated`` (a None text stays None, not cut)."""
    result = {}
    for key, text, max_chars in fields:
        if text is None:
            result[key], truncated[key] = None, False
        else:
            result[key], truncated[key] = bounded_text(text, max_chars)
    return result


def describe_callable(name, value, kind, config):
    """One entry of ``list``."""
    limit = config["max_repr_chars"]
    truncated = {}
    texts = bounded_fields(
        (
            ("signature", signature_text(value), limit),
            ("module", module_name(value), limit),
            ("doc", first_paragraph(documentation_text(value)), limit),
        ),
        truncated,
    )
    return {"name": sanitize_text(name), "kind": kind, **texts, "truncated": truncated}


def describe_value(name, value, config):
    """One entry of ``search``."""
    limit = config["max_repr_chars"]
    truncated = {}
    texts = bounded_fields(
        (
            ("qualified_type", qualified_type(value), limit),
            ("module", module_name(value), limit),
            ("representation", safe_repr(value), limit),
        ),
        truncated,
    )
    return {"name": sanitize_text(name), "kind": value_kind(value), **texts, "truncated": truncated}


def _signature_or_empty(value):
    """``str(inspect.signature(value))``, "" for an object that has none (ValueError or
    TypeError from inspect); anything else the object's own code raised propagates."""
    try:
        return str(inspect.signature(value))
    except (ValueError, TypeError):
        return ""


def _documentation_or_empty(value):
    doc = inspect.getdoc(value)
    return doc if isinstance(doc, str) else ""


def _own_module(value):
    """Like ``module_name``, but an access that raises (other than AttributeError)
    propagates."""
    if _guarded_value(lambda: isinstance(value, types.ModuleType), False):
        name = value.__name__
    else:
        name = getattr(value, "__module__", None)
    return sanitize_text(name) if isinstance(name, str) else None


def describe_in_detail(name, value, config):
    """``inspect``'s result. A field whose computation ran the object's code and raised
    (``__repr__``, a ``__doc__``, ``__signature__`` or ``__module__`` property) is null, and a
    ``RequestError("execution_error")`` carrying the rest as its ``partial`` says which
    fields and why: a placeholder would pass for the object's own text."""
    failures = []

    def attempt(field, action):
        try:
            return action()
        except Exception as error:
            failures.append((field, error))
            return None

    is_callable = callable(value)
    repr_limit = config["max_repr_chars"]
    truncated = {}
    texts = bounded_fields(
        (
            ("qualified_type", qualified_type(value), repr_limit),
            ("signature", attempt("signature", lambda: _signature_or_empty(value)) if is_callable else "", repr_limit),
            ("module", attempt("module", lambda: _own_module(value)), repr_limit),
            ("documentation", attempt("documentation", lambda: _documentation_or_empty(value)), config["max_text_chars"]),
            ("representation", attempt("representation", lambda: repr(value)), repr_limit),
        ),
        truncated,
    )
    result = {
        "name": sanitize_text(name),
        "kind": value_kind(value),
        "callable": is_callable,
        **texts,
        "truncated": truncated,
    }
    if failures:
        fields = ", ".join(field for field, _ in failures)
        error = execution_error(failures[0][1], "computing the %s of %r raised" % (fields, name), config)
        error.partial = result
        raise error
    return result


def execution_error(error, message, config, tb=_MISSING):
    """A ``RequestError("execution_error")`` for ``error``, with ``ename``, bounded ``evalue``
    and a bounded, ANSI-free ``traceback`` (a list of entries, like an execute error's)."""
    if tb is _MISSING:
        tb = error.__traceback__
    try:
        entries = traceback.format_exception(type(error), error, tb)
    except Exception:
        entries = ["%s\n" % type(error).__name__]
    ename = sanitize_text(type(error).__name__)
    evalue = bounded_text(safe_str(error), config["max_text_chars"])[0]
    return RequestError(
        "execution_error",
        "%s: %s: %s" % (message, ename, evalue),
        ename=ename,
        evalue=evalue,
        traceback=bound_traceback(entries, config["max_traceback_chars"]),
    )


def resolve(user_ns, dotted, config):
    """The object a dotted name ``a.b.c`` names: ``user_ns["a"]``, then ``getattr`` per segment.

    Raises ``RequestError``: ``invalid_name`` (not a str, empty, or a segment that is not an
    identifier), ``name_not_found`` (the root is not in ``user_ns``, or an attribute is missing;
    the message names the segment), ``execution_error`` (an attribute access raised something
    other than AttributeError).
    """
    if not isinstance(dotted, str) or not dotted:
        raise RequestError("invalid_name", "a name is a non-empty string like 'f' or 'module.f'")
    segments = dotted.split(".")
    for segment in segments:
        if not segment.isidentifier():
            raise RequestError(
                "invalid_name", "%r is not a valid name: segment %r is not an identifier" % (dotted, segment)
            )
    root = segments[0]
    value = user_ns.get(root, _MISSING)
    if value is _MISSING:
        raise RequestError("name_not_found", "name %r is not defined in the namespace" % root)
    for index in range(1, len(segments)):
        resolved = ".".join(segments[:index])
        try:
            value = getattr(value, segments[index])
        except AttributeError:
            failure = RequestError("name_not_found", "%r has no attribute %r" % (resolved, segments[index]))
        except Exception as error:
            failure = execution_error(error, "getting %r raised" % ".".join(segments[: index + 1]), config)
        else:
            continue
        failure.resolved = resolved
        raise failure
    return value


# --------------------------------------------------------------------------------------------
# JSON conversion of call_function results
# --------------------------------------------------------------------------------------------

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


# --------------------------------------------------------------------------------------------
# Configured bindings and module reloading
# --------------------------------------------------------------------------------------------


def validated_namespace(namespace):
    """``config["namespace"]`` checked and normalized (every key present, duplicates dropped).

    Raises ValueError naming the setting: unknown keys, wrong types, a library path that is not
    an existing directory, a module name that is not dotted identifiers, a binding that is not
    an identifier (or is a keyword or one of IPython's bindings), and two configured bindings of
    one name to different modules.
    """
    where = "config['namespace']"
    if namespace is None:
        namespace = {}
    if not isinstance(namespace, dict):
        raise ValueError("%s must be a dict, got %s" % (where, type(namespace).__name__))
    unknown = sorted(repr(key) for key in namespace if key not in NAMESPACE_KEYS)
    if unknown:
        raise ValueError("%s has unknown keys %s (known: %s)" % (where, ", ".join(unknown), ", ".join(NAMESPACE_KEYS)))
    paths = _string_list(namespace.get("library_paths"), where + "['library_paths']")
    for index, path in enumerate(paths):
        if not path or "\0" in path or not os.path.isdir(path):
            raise ValueError("%s['library_paths'][%d]: %r is not an existing directory" % (where, index, path))
    preloads = _string_list(namespace.get("preload_modules"), where + "['preload_modules']")
    for index, module in enumerate(preloads):
        _check_module_name(module, "%s['preload_modules'][%d]" % (where, index))
    aliases = namespace.get("module_aliases")
    aliases = {} if aliases is None else aliases
    if not isinstance(aliases, dict):
        raise ValueError("%s['module_aliases'] must be a dict of module -> binding" % where)
    for module, binding in aliases.items():
        setting = "%s['module_aliases'][%r]" % (where, module)
        if not isinstance(module, str) or not isinstance(binding, str):
            raise ValueError("%s: modules and bindings must be strings" % setting)
        _check_module_name(module, setting)
    normalized = {
        "library_paths": list(dict.fromkeys(paths)),
        "preload_modules": list(dict.fromkeys(preloads)),
        "module_aliases": dict(aliases),
    }
    targets = {}
    for _, binding, bound, setting in _configured_imports(normalized):
        if not binding.isidentifier() or keyword.iskeyword(binding):
            raise ValueError("%s: binding %r is not an identifier" % (setting, binding))
        if binding in IPYTHON_BINDINGS:
            raise ValueError("%s: binding %r collides with IPython's own %r" % (setting, binding, binding))
        if targets.setdefault(binding, bound) != bound:
            raise ValueError(
                "%s: binding %r collides: it is configured for both %r and %r" % (setting, binding, targets[binding], bound)
            )
    return normalized


def _string_list(value, setting):
    value = [] if value is None else value
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ValueError("%s must be a list of strings" % setting)
    return value


def _check_module_name(module, setting):
    if not module or not all(part.isidentifier() and not keyword.iskeyword(part) for part in module.split(".")):
        raise ValueError("%s: %r is not a module name (dotted identifiers)" % (setting, module))


def _configured_imports(namespace):
    """``(module to import, binding, module bound, setting)`` per preload and alias, in config
    order: ``import a.b`` binds ``a`` to module ``a``; ``import m as x`` binds ``x`` to ``m``."""
    imports = []
    for index, module in enumerate(namespace["preload_modules"]):
        root = module.partition(".")[0]
        imports.append((module, root, root, "config['namespace']['preload_modules'][%d]" % index))
    for module, binding in namespace["module_aliases"].items():
        imports.append((module, binding, module, "config['namespace']['module_aliases'][%r]" % module))
    return imports


def configured_bindings(namespace):
    """The names the configured preloads and aliases bind (protected names)."""
    return frozenset(binding for _, binding, _, _ in _configured_imports(namespace))


def apply_library_paths(namespace):
    """Puts the library paths first on ``sys.path``, in order, each once."""
    paths = namespace["library_paths"]
    for path in reversed(paths):
        while path in sys.path:
            sys.path.remove(path)
        sys.path.insert(0, path)
    if paths:
        importlib.invalidate_caches()


def bind_configured(user_ns, namespace):
    """Imports every preload and alias and binds it in ``user_ns``; never raises for a module.

    Returns ``[{"module", "code": "module_not_found"|"execution_error", "message"}]`` for the
    ones that failed (their bindings are left as they were).
    """
    errors = []
    for module, binding, bound, _ in _configured_imports(namespace):
        try:
            imported = importlib.import_module(module)
            value = imported if bound == module else sys.modules[bound]
        except (Exception, SystemExit) as error:
            errors.append({"module": module, "code": _import_error_code(module, error), "message": _import_error_message(error)})
            continue
        user_ns[binding] = value
    return errors


def _import_error_code(module, error):
    """``module_not_found`` when the module itself (or a parent package) is missing; an import
    that fails inside the module's own code, even on a missing dependency, is its error."""
    missing = getattr(error, "name", None) if isinstance(error, ModuleNotFoundError) else None
    if isinstance(missing, str) and (module == missing or module.startswith(missing + ".")):
        return "module_not_found"
    return "execution_error"


def _import_error_message(error):
    return bounded_text("%s: %s" % (type(error).__name__, safe_str(error)), _MAX_ERROR_MESSAGE_CHARS)[0]


def reload_module(user_ns, name, config):
    """Reloads one module already in ``sys.modules``; returns its entry of ``reload``'s result.

    ``importlib.reload`` re-executes the module in its own dict, so names bound to the module
    object see the new code at once; they are reported in ``rebound``. Names bound by
    ``from module import x`` hold the *old* attribute: each one that is identical to an
    attribute before the reload, and either has that attribute's name or is a function or
    class defined in the module, is rebound to the attribute's new value and is reported in
    ``rebound`` too. A failed reload (a SyntaxError in the edited file, an exception at import
    time, an interrupt) restores the module's previous dict, so the old module and every
    binding to it keep working, and becomes this module's ``execution_error``.
    """
    module = sys.modules.get(name) if isinstance(name, str) else None
    if not isinstance(module, types.ModuleType):
        return _reload_entry(name, [], {
            "code": "module_not_found",
            "message": "module %r is not imported (reload only reloads modules in sys.modules)" % name,
        })
    before = dict(module.__dict__)
    _drop_stale_bytecode(module)
    try:
        reloaded = importlib.reload(module)
    except BaseException as error:
        current = module.__dict__  # compared by identity: == could run user code
        if len(current) != len(before) or any(current.get(key, _MISSING) is not value for key, value in before.items()):
            module.__dict__.clear()
            module.__dict__.update(before)
        sys.modules[name] = module
        failure = execution_error(error, "reloading %r raised" % name, config)
        if isinstance(error, ModuleNotFoundError) and getattr(error, "name", None) == name:
            failure.code = "module_not_found"
        return _reload_entry(name, [], dict(failure.fields, code=failure.code, message=failure.message))
    return _reload_entry(name, _rebind(user_ns, name, module, reloaded, before), None)


def _reload_entry(name, rebound, error):
    if error is not None and "message" in error:
        error["message"] = bounded_text(error["message"], _MAX_ERROR_MESSAGE_CHARS)[0]
    return {
        "module": sanitize_text(name) if isinstance(name, str) else name,
        "ok": error is None,
        "rebound": rebound,
        "error": error,
    }


def _rebind(user_ns, name, old_module, new_module, before):
    attributes_by_identity = {}
    for attribute, value in before.items():
        if not attribute.startswith("__"):
            attributes_by_identity.setdefault(id(value), []).append(attribute)
    new_attributes = new_module.__dict__
    rebound = []
    for user_name, value in list(user_ns.items()):
        if not isinstance(user_name, str):
            continue
        if value is old_module or value is new_module:
            user_ns[user_name] = new_module
            rebound.append(user_name)
            continue
        if value is None or value is True or value is False or value is Ellipsis:
            continue
        candidates = attributes_by_identity.get(id(value))
        if not candidates or before[candidates[0]] is not value:
            continue
        if user_name in candidates:
            attribute = user_name
        elif not user_name.startswith("_") and _defined_in(value, name):
            attribute = min(candidates)
        else:
            continue  # an unrelated name that happens to hold the same (e.g. small int) object
        new_value = new_attributes.get(attribute, _MISSING)
        if new_value is not _MISSING and new_value is not value:
            user_ns[user_name] = new_value
            rebound.append(user_name)
    return sorted(rebound)


def _defined_in(value, module):
    if not (inspect.isfunction(value) or _guarded_value(lambda: isinstance(value, type), False)):
        return False
    return _guarded_value(lambda: value.__module__, None) == module


def _drop_stale_bytecode(module):
    """Deletes the module's cached bytecode when it is not newer than the source.

    The bytecode cache is checked by the source's mtime in whole seconds and its size, so an
    edit that keeps the size within the second of the last compile (``return 1`` -> ``return 2``)
    would reload the old code. A cache written after the source is left alone.
    """
    source = _guarded_value(lambda: module.__file__, None)
    cached = _guarded_value(lambda: module.__cached__, None)
    if not (isinstance(source, str) and isinstance(cached, str)):
        return
    try:
        if os.stat(source).st_mtime_ns >= os.stat(cached).st_mtime_ns:
            os.remove(cached)
    except OSError:
        pass


# --------------------------------------------------------------------------------------------
# The namespace methods
# --------------------------------------------------------------------------------------------


def _checked_params(params, allowed):
    unknown = sorted(repr(key) for key in params if key not in allowed)
    if unknown:
        raise RequestError("invalid_request", "unknown parameters %s" % ", ".join(unknown))


def _string_list_param(params, key):
    value = params.get(key)
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise RequestError("invalid_request", "%r must be a list of strings" % key)
    return value


def _method_list(params):
    _checked_params(params, ())
    installation = _current()
    config, user_ns = installation.config, installation.shell.user_ns
    entries = []
    for name in user_names(user_ns, installation.shell.user_ns_hidden, installation.bindings):
        value = user_ns.get(name, _MISSING)
        kind = None if value is _MISSING else callable_kind(value)
        if kind is not None:
            entries.append((name, value, kind))
    limit = config["max_results"]
    return {
        "functions": [describe_callable(name, value, kind, config) for name, value, kind in entries[:limit]],
        "total": len(entries),
        "truncated": len(entries) > limit,
    }


def _method_search(params):
    _checked_params(params, ("query", "exact", "limit"))
    installation = _current()
    config, user_ns = installation.config, installation.shell.user_ns
    query = params.get("query")
    exact = params.get("exact", False)
    limit = params.get("limit")
    if not isinstance(query, str):
        raise RequestError("invalid_request", "'query' must be a string")
    if exact is None:
        exact = False
    if not isinstance(exact, bool):
        raise RequestError("invalid_request", "'exact' must be a boolean")
    if limit is None:
        limit = config["max_results"]
    if type(limit) is not int or limit < 0:
        raise RequestError("invalid_request", "'limit' must be a non-negative integer or null")
    limit = min(limit, config["max_results"])
    names = user_names(user_ns, installation.shell.user_ns_hidden, installation.bindings)
    if exact:
        matches = [name for name in names if name == query]
    else:
        folded = query.casefold()
        matches = [name for name in names if folded in name.casefold()]
    matches.sort(key=lambda name: (name != query, name))
    results = [describe_value(name, user_ns.get(name), config) for name in matches[:limit]]
    return {"results": results, "total": len(matches), "truncated": len(matches) > len(results)}


def _method_inspect(params):
    _checked_params(params, ("name",))
    installation = _current()
    name = params.get("name")
    try:
        value = resolve(installation.shell.user_ns, name, installation.config)
    except RequestError as error:
        # Keep what was resolved: the agent learns where the path broke.
        resolved = getattr(error, "resolved", None)
        if resolved is not None:
            error.partial = {"name": sanitize_text(name), "resolved": sanitize_text(resolved)}
        raise
    return describe_in_detail(name, value, installation.config)


def _method_call_function(params):
    _checked_params(params, ("name", "arguments"))
    installation = _current()
    config = installation.config
    name = params.get("name")
    arguments = params.get("arguments", {})
    function = resolve(installation.shell.user_ns, name, config)
    if not callable(function):
        raise RequestError("not_callable", "%r is not callable (it is a %s)" % (name, type_label(function)))
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict) or not all(isinstance(key, str) for key in arguments):
        raise RequestError(
            "invalid_arguments", "'arguments' must be a JSON object of keyword arguments, got %s" % type(arguments).__name__
        )
    try:
        signature = inspect.signature(function)
    except Exception:
        signature = None  # e.g. a builtin without one: the call itself will say
    if signature is not None:
        try:
            signature.bind(**arguments)
        except TypeError as error:
            raise RequestError("invalid_arguments", "%s%s: %s" % (name, signature_text(function), safe_str(error))) from None
    return _call_for_json(function, name, arguments, config)


def _call_for_json(function, name, arguments, config):
    """Calls ``function(**arguments)`` once and converts the result with ``to_json``:
    ``{"result", "truncated"}``, or ``execution_error`` (it raised), or ``result_not_json``
    (a coroutine, closed without running, or anything JSON cannot carry)."""
    try:
        result = function(**arguments)
    except BaseException as error:  # incl. SystemExit, and KeyboardInterrupt on a timeout
        tb = error.__traceback__
        raise execution_error(error, "calling %r raised" % name, config, tb.tb_next if tb is not None else None) from None
    if inspect.iscoroutine(result):
        _guarded_value(result.close, None)
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


def _method_reload(params):
    _checked_params(params, ("modules",))
    installation = _current()
    names = list(dict.fromkeys(_string_list_param(params, "modules")))
    importlib.invalidate_caches()  # a module file created since the last import is found
    results = []
    interrupted = False
    for name in names:
        if interrupted:  # the server interrupted this request: reload nothing more
            results.append(_reload_entry(name, [], {
                "code": "execution_error",
                "message": "not reloaded: the request was interrupted while reloading an earlier module",
                "ename": "KeyboardInterrupt",
                "evalue": "",
                "traceback": [],
            }))
            continue
        entry = reload_module(installation.shell.user_ns, name, installation.config)
        interrupted = (entry["error"] or {}).get("ename") == "KeyboardInterrupt"
        results.append(entry)
    return {"results": results}


def _method_remove(params):
    _checked_params(params, ("names",))
    installation = _current()
    user_ns, hidden = installation.shell.user_ns, installation.shell.user_ns_hidden
    removed, refused, unknown = [], [], []
    for name in sorted(set(_string_list_param(params, "names"))):
        value = user_ns.get(name, _MISSING)
        if is_protected(name, installation.bindings) or (value is not _MISSING and is_hidden(name, value, hidden)):
            refused.append(name)  # hidden: IPython's own binding, even if SPEC does not name it
        elif value is _MISSING:
            unknown.append(name)
        else:
            del user_ns[name]
            removed.append(name)
    return {"removed": removed, "refused": refused, "unknown": unknown}


def _method_reset(params):
    _checked_params(params, ())
    installation = _current()
    shell = installation.shell
    removed = user_names(shell.user_ns, shell.user_ns_hidden, installation.bindings)
    for name in removed:
        shell.user_ns.pop(name, None)
    installation.namespace_errors = bind_configured(shell.user_ns, installation.config["namespace"])
    tools_dropped = _catalog(installation).drop_all()
    # IPython's counter is the *next* cell's number; report the latest cell's, as execute does.
    return {
        "removed": removed,
        "execution_count": max(shell.execution_count - 1, 0),
        "tools_dropped": tools_dropped,
    }


def _method_install_info(params):
    """What ``install`` returned (the server's install cell discards it), plus the configured
    binding names; ``namespace_errors`` are those of the latest binding (install or reset)."""
    _checked_params(params, ())
    installation = _current()
    return dict(
        installation.info,
        namespace_errors=list(installation.namespace_errors),
        bindings=sorted(installation.bindings),
    )


METHODS.update(
    {
        "list": _method_list,
        "search": _method_search,
        "inspect": _method_inspect,
        "call_function": _method_call_function,
        "reload": _method_reload,
        "remove": _method_remove,
        "reset": _method_reset,
        "install_info": _method_install_info,
    }
)


# --------------------------------------------------------------------------------------------
# Dynamic tools: input schemas from signatures, the catalog and its reconciliation
# --------------------------------------------------------------------------------------------
#
# ``register_tool`` publishes a live top-level callable as an MCP tool. The helper
# owns the truth about it: the input schema is generated here from the signature, and every
# ``tool_catalog`` and ``call_tool`` revalidates the registration against the live namespace.
# The server keeps a mirror for ``tools/list`` and bumps its revision when ``changed`` says so.
#
# The methods (malformed params, e.g. an unknown key or a wrong type, are ``invalid_request``):
#
# * ``register_tool`` {name, tool_name?, description?, max_tool_name_chars?,
#   max_tool_description_chars?, max_dynamic_tools?, reserved_names?} -> {"registration":
#   {tool_name, name, description, input_schema, fingerprint}}; errors in check order:
#   invalid_name, protected_name, name_not_found, not_callable, invalid_name (tool name),
#   registration_conflict, limit_exceeded, invalid_arguments (description), unsupported_signature.
# * ``unregister_tool`` {names} -> {"unregistered": [...], "unknown": [...]}, both sorted.
# * ``tool_catalog`` {} -> {"tools": [{tool_name, name, description, input_schema, fingerprint,
#   live, reason}] sorted by tool_name, "changed": bool}.
# * ``call_tool`` {tool_name, arguments} -> {"result", "truncated"}; errors: name_not_found (no
#   such tool), stale_registration (with "reason"), invalid_arguments, execution_error,
#   result_not_json.
# * ``reset`` also drops the catalog and reports how many tools in "tools_dropped".

# Limits the server sends with every register_tool (defaults when absent).
TOOL_LIMIT_KEYS = (
    ("max_tool_name_chars", 64),
    ("max_tool_description_chars", 1024),
    ("max_dynamic_tools", 100),
)
_TOOL_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]*")
# Ints a JSON default or Literal may hold: the server parses JSON with serde_json, which keeps
# an integer exact only within i64/u64 (a larger one would become a float and the server
# could not recompute the fingerprint).
_MIN_JSON_INT = -(2**63)
_MAX_JSON_INT = 2**64 - 1
# Nesting kept in a default value and followed in a signature token (a cycle stops here).
_MAX_NESTING = 32
_UNION_TYPE = getattr(types, "UnionType", None)  # ``int | None`` (Python >= 3.10)
_SIGNATURE_EVAL_STR = sys.version_info >= (3, 10)


class UnsupportedSignature(Exception):
    """A callable that cannot be published as a tool; the message names the parameter and says
    why (it becomes the ``unsupported_signature`` error and a stale entry's reason)."""


class _Unsupported(Exception):
    """An annotation or default that has no JSON schema; the caller adds the parameter name."""


class ArgumentError(Exception):
    """A tool call's JSON arguments do not match the input schema (``invalid_arguments``)."""


def _json_type_name(value):
    if value is None:
        return "null"
    if value is True or value is False:
        return "boolean"
    if type(value) is int:
        return "integer"
    if type(value) is float:
        return "number"
    if type(value) is str:
        return "string"
    if type(value) is list:
        return "array"
    if type(value) is dict:
        return "object"
    return type_label(value)


def _argument_path(path):
    """``xs[2]['key']`` for the parameter ``xs``, its item 2 and that item's member ``key``."""
    return path[0] + "".join("[%d]" % part if isinstance(part, int) else "[%r]" % part for part in path[1:])


# ---- annotation -> (JSON schema, argument check and conversion) ------------------------------
#
# One node per annotation. ``schema`` is its JSON Schema; ``convert(value, path, lenient)``
# checks a JSON value (None, bool, int, float, str, list, dict as json.loads makes them) and
# returns the Python value the function gets: sets, frozensets and tuples are built from JSON
# arrays as annotated, recursively. ``lenient`` lets an integer stand for a float (converted
# to float) and an integral float for an integer (JSON Schema counts 2.0 as an integer;
# converted to int); a union first looks for an exact match in every branch, then a lenient
# one, so ``float | int`` keeps an integer an int. Literal values match with their JSON type
# (true is not 1, 1.0 is not 1). ``hashable``: whether the converted value can be a set item.


class _Scalar:
    _EXPECTED = {"string": str, "integer": int, "number": float, "boolean": bool}

    def __init__(self, json_type):
        self.json_type = json_type
        self.schema = {"type": json_type}
        self.hashable = True

    def convert(self, value, path, lenient):
        if self.json_type == "null":
            if value is None:
                return None
        elif self.json_type == "number":
            if type(value) is float:
                return value
            if lenient and type(value) is int:
                try:
                    return float(value)
                except OverflowError:
                    raise ArgumentError("argument %s: the integer is too large for a float" % _argument_path(path)) from None
        elif self.json_type == "integer" and lenient and type(value) is float and value.is_integer():
            return int(value)  # JSON Schema: 2.0 is an integer (a client may have written it so)
        elif type(value) is self._EXPECTED[self.json_type]:
            return value
        raise ArgumentError(
            "argument %s: expected %s, got %s" % (_argument_path(path), self.json_type, _json_type_name(value))
        )


class _Array:
    """list[T], set[T], frozenset[T] and tuple[T, ...]: a JSON array of T."""

    def __init__(self, item, container):
        self.item = item
        self.container = container
        self.schema = {"type": "array", "items": item.schema}
        if container in (set, frozenset):
            self.schema["uniqueItems"] = True
        self.hashable = container in (tuple, frozenset) and item.hashable

    def convert(self, value, path, lenient):
        if type(value) is not list:
            raise ArgumentError("argument %s: expected array, got %s" % (_argument_path(path), _json_type_name(value)))
        items = [self.item.convert(item, path + [index], lenient) for index, item in enumerate(value)]
        if self.container is list:
            return items
        converted = self.container(items)
        if self.container is not tuple and len(converted) != len(items):
            raise ArgumentError("argument %s: the items must be unique (it is a %s)" % (_argument_path(path), self.container.__name__))
        return converted


class _FixedTuple:
    """tuple[A, B, ...]: a JSON array of exactly these items."""

    def __init__(self, items):
        self.items = items
        self.schema = {
            "type": "array",
            "prefixItems": [item.schema for item in items],
            "items": False,
            "minItems": len(items),
            "maxItems": len(items),
        }
        self.hashable = all(item.hashable for item in items)

    def convert(self, value, path, lenient):
        if type(value) is not list:
            raise ArgumentError("argument %s: expected array, got %s" % (_argument_path(path), _json_type_name(value)))
        if len(value) != len(self.items):
            raise ArgumentError(
                "argument %s: expected an array of exactly %d items, got %d" % (_argument_path(path), len(self.items), len(value))
            )
        return tuple(node.convert(item, path + [index], lenient) for index, (node, item) in enumerate(zip(self.items, value)))


class _Mapping:
    """dict[str, T]: a JSON object whose members are T."""

    def __init__(self, value):
        self.value = value
        self.schema = {"type": "object", "additionalProperties": value.schema}
        self.hashable = False

    def convert(self, value, path, lenient):
        if type(value) is not dict:
            raise ArgumentError("argument %s: expected object, got %s" % (_argument_path(path), _json_type_name(value)))
        return {key: self.value.convert(item, path + [key], lenient) for key, item in value.items()}


class _AnyOf:
    """Union[A, B], A | B, Optional[A]: the first branch (in annotation order) that takes the
    value exactly, else the first that takes it leniently."""

    def __init__(self, options):
        self.options = options
        self.schema = {"anyOf": [option.schema for option in options]}
        self.hashable = all(option.hashable for option in options)

    def convert(self, value, path, lenient):
        for attempt in (False, True) if lenient else (False,):
            for option in self.options:
                try:
                    return option.convert(value, path, attempt)
                except ArgumentError:
                    continue
        expected = " or ".join(_schema_summary(option.schema) for option in self.options)
        raise ArgumentError("argument %s: expected %s; got %s" % (_argument_path(path), expected, _json_type_name(value)))


class _Enum:
    """Literal[...] of JSON scalars: the function gets the literal object itself. JSON types
    are kept apart (true is not 1, 1.0 is not 1), as JSON Schema's enum does for booleans."""

    def __init__(self, values):
        self.values = values
        self.schema = {"enum": list(values)}
        self.hashable = True

    def convert(self, value, path, lenient):
        for literal in self.values:
            if type(literal) is type(value) and literal == value:
                return literal
        raise ArgumentError(
            "argument %s: expected one of %s, got %s"
            % (_argument_path(path), json.dumps(self.values, ensure_ascii=False)[1:-1], _short_json(value))
        )


def _short_json(value):
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError):
        text = _json_type_name(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _schema_summary(schema):
    if "type" in schema:
        return schema["type"]
    if "enum" in schema:
        return "one of " + json.dumps(schema["enum"], ensure_ascii=False)
    return "anyOf"


def annotation_text(annotation):
    """A short readable form of an annotation for messages (``int``, ``list[int]``)."""
    if isinstance(annotation, type) and not typing.get_args(annotation):
        text = _guarded_value(lambda: annotation.__qualname__, None)
        if isinstance(text, str):
            module = _guarded_value(lambda: annotation.__module__, None)
            return text if module in (None, "builtins") else "%s.%s" % (module, text)
    text = safe_repr(annotation).replace("typing.", "")
    return text if len(text) <= 200 else text[:197] + "..."


_SUPPORTED = (
    "supported: str, int, float, bool, None, list[T], set[T], frozenset[T], tuple[T, ...], "
    "tuple[A, B], dict[str, T], unions and Optional of these, Literal of JSON scalars"
)
_BARE = {
    list: "bare list (say list[T])",
    set: "bare set (say set[T])",
    frozenset: "bare frozenset (say frozenset[T])",
    tuple: "bare tuple (say tuple[T, ...] or tuple[A, B])",
    dict: "bare dict (say dict[str, T])",
}


def annotation_node(annotation, depth=0):
    """The node (schema and argument conversion) of one parameter annotation, already
    resolved (no strings); raises ``_Unsupported`` with the reason."""
    if depth > _MAX_NESTING:
        raise _Unsupported("the annotation is nested too deeply")
    if annotation is str:
        return _Scalar("string")
    if annotation is bool:
        return _Scalar("boolean")
    if annotation is int:
        return _Scalar("integer")
    if annotation is float:
        return _Scalar("number")
    if annotation is None or annotation is type(None):
        return _Scalar("null")
    if isinstance(annotation, (str, typing.ForwardRef)):
        raise _Unsupported("the forward reference %s is not resolved" % annotation_text(annotation))
    if annotation is typing.Any:
        raise _Unsupported("Any has no JSON type (name a concrete one; %s)" % _SUPPORTED)
    if annotation is object:
        raise _Unsupported("object has no JSON type (name a concrete one; %s)" % _SUPPORTED)
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        return annotation_node(args[0], depth + 1)
    if origin is typing.Union or (_UNION_TYPE is not None and origin is _UNION_TYPE):
        return _AnyOf([annotation_node(arg, depth + 1) for arg in args])
    if origin is typing.Literal:
        return _Enum([_literal_value(value) for value in args])
    container = annotation if origin is None and _guarded_value(lambda: annotation in _BARE, False) else origin
    if container in _BARE and not args:
        raise _Unsupported("%s has no item type" % _BARE[container])
    arity = {list: 1, set: 1, frozenset: 1, dict: 2}.get(origin)
    if arity is not None and len(args) != arity:
        raise _Unsupported("%s takes %d type argument%s" % (annotation_text(annotation), arity, "s" if arity > 1 else ""))
    if origin is list:
        return _Array(annotation_node(args[0], depth + 1), list)
    if origin in (set, frozenset):
        item = annotation_node(args[0], depth + 1)
        if not item.hashable:
            raise _Unsupported("%s: set items must be hashable (not lists, sets or dicts)" % annotation_text(annotation))
        return _Array(item, origin)
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return _Array(annotation_node(args[0], depth + 1), tuple)
        if Ellipsis in args or args == ((),):
            raise _Unsupported("%s is not a supported tuple" % annotation_text(annotation))
        return _FixedTuple([annotation_node(arg, depth + 1) for arg in args])
    if origin is dict:
        if args[0] is not str:
            raise _Unsupported("%s: JSON object keys are strings, so the key type must be str" % annotation_text(annotation))
        return _Mapping(annotation_node(args[1], depth + 1))
    raise _Unsupported("%s is not supported (%s)" % (annotation_text(annotation), _SUPPORTED))


def _literal_value(value):
    if value is None or type(value) in (bool, int, str):
        return _json_default(value, "Literal value")
    raise _Unsupported("Literal value %s is a %s (only str, int, bool and None)" % (safe_repr(value)[:60], type_label(value)))


def _json_default(value, what="default", depth=0):
    """``value`` as the exact JSON data it stands for (tuples and sets become lists, sets
    sorted); raises ``_Unsupported`` when there is none."""
    if depth > _MAX_NESTING:
        raise _Unsupported("the %s is nested too deeply" % what)
    if value is None or value is True or value is False:
        return value
    kind = type(value)
    if kind is int:
        if not _MIN_JSON_INT <= value <= _MAX_JSON_INT:
            raise _Unsupported("the %s is an int outside the 64-bit range JSON tools exchange exactly" % what)
        return value
    if kind is float:
        if not math.isfinite(value):
            raise _Unsupported("the %s is the float %r, which JSON cannot represent" % (what, value))
        return value
    if kind is str:
        if sanitize_text(value) is not value:
            raise _Unsupported("the %s is a str with lone surrogates, which UTF-8 JSON cannot carry" % what)
        return value
    if kind in (list, tuple):
        return [_json_default(item, what, depth + 1) for item in value]
    if kind in (set, frozenset):
        items = [_json_default(item, what, depth + 1) for item in value]
        try:
            return sorted(items)
        except TypeError:
            raise _Unsupported("the %s is a set whose items cannot be sorted into a deterministic JSON array" % what) from None
    if kind is dict:
        out = {}
        for key, item in value.items():
            if type(key) is not str:
                raise _Unsupported("the %s is a dict with a %s key (JSON object keys are strings)" % (what, type_label(key)))
            out[_json_default(key, what, depth + 1)] = _json_default(item, what, depth + 1)
        return out
    raise _Unsupported("the %s is a %s, which is not JSON" % (what, type_label(value)))


# ---- signatures ---------------------------------------------------------------------------


class ToolSignature:
    """What ``tool_signature`` makes of a callable: ``schema`` (the tool's input schema),
    ``fingerprint`` and, per parameter in signature order, its node and whether it is
    required. ``bind(arguments)`` turns a call's JSON arguments into keyword arguments."""

    def __init__(self, params, schema):
        self.params = params  # [(name, node, required)]
        self.schema = schema
        self.fingerprint = schema_fingerprint(schema)

    def bind(self, arguments):
        """The keyword arguments for one call: only the ones given (Python applies the
        defaults), each checked and converted; raises ``ArgumentError``."""
        if not isinstance(arguments, dict):
            raise ArgumentError("'arguments' must be a JSON object of keyword arguments, got %s" % _json_type_name(arguments))
        known = {name for name, _, _ in self.params}
        unknown = sorted(key for key in arguments if key not in known)
        if unknown:
            takes = ", ".join(name for name, _, _ in self.params) or "no arguments"
            raise ArgumentError("unknown argument %s (it takes: %s)" % (", ".join(map(repr, unknown)), takes))
        missing = [name for name, _, required in self.params if required and name not in arguments]
        if missing:
            raise ArgumentError("missing required argument %s" % ", ".join(map(repr, missing)))
        return {
            name: node.convert(arguments[name], [name], True) for name, node, _ in self.params if name in arguments
        }


def schema_fingerprint(schema):
    """The registration fingerprint: the lowercase hex SHA-256 of the UTF-8 bytes of
    ``json.dumps(schema, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
    allow_nan=False)``, i.e. sorted-key compact JSON, non-ASCII characters as themselves.

    serde_json's ``to_string`` of the same value (a ``Value`` with sorted maps) gives the same
    bytes, with one caveat: floats. Python writes ``1e-07`` and ``1e+16`` where serde_json
    (ryu) writes ``1e-7`` and ``1e16``; floats without an exponent (``0.5``, ``100.0``) agree.
    Integers in schemas are bounded to the 64-bit range (see ``_json_default``).
    """
    text = json.dumps(schema, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def tool_signature(value):
    """The ``ToolSignature`` of a live callable, or ``UnsupportedSignature`` saying why not.

    Synchronous functions, classes (the constructor as ``inspect.signature`` resolves it),
    ``functools.partial`` objects, ``functools.wraps`` wrappers (followed through
    ``__wrapped__``), bound methods and callable objects with a synchronous ``__call__``.
    Every parameter must be keyword-passable (not positional-only, not ``*args`` or
    ``**kwargs``) with a supported, resolvable annotation (see ``annotation_node``); a default
    must be JSON data (see ``_json_default``) that the annotation accepts.

    The input schema is ``{"type": "object", "properties": {...}, "required": [...],
    "additionalProperties": false}``: properties in signature order, an optional parameter's
    schema plus ``"default"``; ``"required"`` lists the parameters without a default in
    signature order and is left out when there are none.
    """
    try:
        return _tool_signature(value)
    except UnsupportedSignature:
        raise
    except RecursionError:
        raise UnsupportedSignature("its signature is nested too deeply") from None
    except Exception as error:  # an object that breaks inspect: one stale tool, not a failed catalog
        raise UnsupportedSignature(
            "reading its signature raised %s: %s" % (type(error).__name__, safe_str(error))
        ) from None


def _tool_signature(value):
    _check_synchronous(value)
    signature = _resolved_signature(value)
    params = []
    properties = {}
    required = []
    for parameter in signature.parameters.values():
        name = parameter.name
        if parameter.kind is inspect.Parameter.POSITIONAL_ONLY:
            raise UnsupportedSignature(
                "parameter %r is positional-only; tool arguments are passed by keyword" % name
            )
        if parameter.kind is inspect.Parameter.VAR_POSITIONAL:
            raise UnsupportedSignature("parameter '*%s' (*args) is not supported; tools take named arguments" % name)
        if parameter.kind is inspect.Parameter.VAR_KEYWORD:
            raise UnsupportedSignature(
                "parameter '**%s' (**kwargs) is not supported; a tool's arguments are its named parameters" % name
            )
        if parameter.annotation is inspect.Parameter.empty:
            raise UnsupportedSignature(
                "parameter %r has no annotation; every parameter needs one to build the input schema" % name
            )
        try:
            node = annotation_node(parameter.annotation)
        except _Unsupported as error:
            raise UnsupportedSignature("parameter %r: %s" % (name, error)) from None
        schema = dict(node.schema)
        if parameter.default is inspect.Parameter.empty:
            required.append(name)
        else:
            try:
                default = _json_default(parameter.default)
            except _Unsupported as error:
                raise UnsupportedSignature("parameter %r: %s" % (name, error)) from None
            try:
                node.convert(default, [name], True)
            except ArgumentError:
                raise UnsupportedSignature(
                    "parameter %r: the default %s does not match the annotation %s"
                    % (name, _short_json(default), annotation_text(parameter.annotation))
                ) from None
            schema["default"] = default
        properties[name] = schema
        params.append((name, node, parameter.default is inspect.Parameter.empty))
    input_schema = {"type": "object", "properties": properties}
    if required:
        input_schema["required"] = required
    input_schema["additionalProperties"] = False
    return ToolSignature(params, input_schema)


def _check_synchronous(value):
    checks = (
        (inspect.iscoroutinefunction, "a coroutine function (async def)"),
        (inspect.isasyncgenfunction, "an async generator function"),
        (inspect.isgeneratorfunction, "a generator function"),
    )
    for check, what in checks:
        if _guarded_value(lambda: check(value), False):
            raise UnsupportedSignature("it is %s; tools call synchronous functions that return their result" % what)
    if isinstance(value, type) or inspect.isroutine(value) or isinstance(value, functools.partial):
        return
    call = _guarded_value(lambda: type(value).__call__, None)
    for check, what in checks:
        if call is not None and _guarded_value(lambda: check(call), False):
            raise UnsupportedSignature(
                "its __call__ is %s; tools call synchronous functions that return their result" % what
            )


def _resolved_signature(value):
    """``inspect.signature`` with string annotations (``from __future__ import annotations``)
    evaluated; an annotation that cannot be is reported with its parameter."""
    try:
        raw = inspect.signature(value)
    except (ValueError, TypeError) as error:
        raise UnsupportedSignature("inspect cannot read its signature: %s" % safe_str(error)) from None
    except NameError as error:
        # Python >= 3.14 evaluates annotations lazily, when inspect reads them: read them as
        # strings instead, so the evaluation below can name the parameter.
        raw = _string_annotated_signature(value)
        if raw is None:
            raise UnsupportedSignature("cannot resolve its annotations: NameError: %s" % safe_str(error)) from None
    except Exception as error:  # user code (a __signature__ property, a lazy annotation) raised
        raise UnsupportedSignature("reading its signature raised %s: %s" % (type(error).__name__, safe_str(error))) from None
    if not any(isinstance(parameter.annotation, str) for parameter in raw.parameters.values()):
        return raw
    failure = None
    if _SIGNATURE_EVAL_STR:
        try:
            return inspect.signature(value, eval_str=True)
        except Exception as error:
            failure = error
    # Python 3.9 (no eval_str), or finding which parameter failed: evaluate each string in
    # the globals of the functions the signature can come from.
    namespaces = _annotation_globals(value)
    parameters = []
    for parameter in raw.parameters.values():
        annotation = parameter.annotation
        if isinstance(annotation, str):
            annotation = _evaluate_annotation(annotation, parameter.name, namespaces)
        parameters.append(parameter.replace(annotation=annotation))
    if failure is not None:
        raise UnsupportedSignature(
            "cannot resolve its annotations: %s: %s" % (type(failure).__name__, safe_str(failure))
        )
    return raw.replace(parameters=parameters)


def _string_annotated_signature(value):
    """``inspect.signature`` with every annotation as its source string (Python >= 3.14), or
    None."""
    try:
        import annotationlib

        return inspect.signature(value, annotation_format=annotationlib.Format.STRING)
    except Exception:
        return None


def _evaluate_annotation(text, name, namespaces):
    first_error = None
    for namespace in namespaces or [{}]:
        try:
            return eval(text, namespace, None)  # what inspect's eval_str does
        except Exception as error:
            first_error = first_error or error
    raise UnsupportedSignature(
        "cannot resolve annotation %r of parameter %r: %s: %s"
        % (text, name, type(first_error).__name__, safe_str(first_error))
    )


def _annotation_globals(value, depth=0):
    """The ``__globals__`` of the functions whose annotations ``inspect.signature`` reads for
    ``value``: unwrapped through ``__wrapped__``, partials and methods; for a class its
    metaclass ``__call__``, ``__new__`` and ``__init__``; for an object its ``__call__``."""
    if depth > _MAX_NESTING:
        return []
    wrapped = _guarded_value(lambda: getattr(value, "__wrapped__", None), None)
    if wrapped is not None:
        return _annotation_globals(wrapped, depth + 1)
    if isinstance(value, functools.partial):
        return _annotation_globals(value.func, depth + 1)
    if inspect.ismethod(value):
        return _annotation_globals(value.__func__, depth + 1)
    if inspect.isfunction(value):
        return [value.__globals__]
    if isinstance(value, type):
        found = []
        for owner, attribute in ((type(value), "__call__"), (value, "__new__"), (value, "__init__")):
            function = _unwrap_descriptor(_mro_lookup(owner, attribute))
            if function is not None:
                found.extend(_annotation_globals(function, depth + 1))
        return found
    call = _unwrap_descriptor(_mro_lookup(type(value), "__call__"))
    return _annotation_globals(call, depth + 1) if call is not None else []


def _mro_lookup(owner, attribute):
    """The raw class-dict entry ``attribute`` of the first class in ``owner``'s MRO that has
    one (no descriptor is called), or None."""
    for klass in _guarded_value(lambda: type.__getattribute__(owner, "__mro__"), ()):
        entry = _guarded_value(lambda: klass.__dict__.get(attribute, _MISSING), _MISSING)
        if entry is not _MISSING:
            return entry
    return None


def _unwrap_descriptor(entry):
    if isinstance(entry, (staticmethod, classmethod)):
        return entry.__func__
    return entry


# ---- the cheap unchanged path -------------------------------------------------------------


def signature_token(value):
    """The objects ``value``'s signature depends on, compared by identity; None when there is
    no cheap token (then the schema is regenerated every time).

    Covers, recursively: a function's ``__code__``, ``__defaults__``, ``__kwdefaults__`` and
    ``__annotations__`` (the dicts and their entries), ``__signature__`` and ``__wrapped__``;
    a method's ``__self__`` and ``__func__``; a partial's ``func``, ``args`` and ``keywords``;
    a class's MRO and the metaclass ``__call__``, ``__new__`` and ``__init__`` it resolves to;
    a callable object's class and ``__call__``. There is no token when an annotation is a string
    (it is evaluated in globals that can change) or a default or bound keyword is a mutable
    container (it can change in place).
    """
    parts = []
    try:
        complete = _add_token(value, parts, 0)
    except Exception:
        return None
    return parts if complete else None


def same_token(first, second):
    return (
        first is not None
        and second is not None
        and len(first) == len(second)
        and all(a is b for a, b in zip(first, second))
    )


def _is_immutable_data(value, depth=0):
    if value is None or type(value) in (bool, int, float, str):
        return True
    if type(value) in (tuple, frozenset) and depth < _MAX_NESTING:
        return all(_is_immutable_data(item, depth + 1) for item in value)
    return False


def _add_method_token(entry, parts, depth):
    """Adds a class-dict entry (``__init__``, ``__call__``...): a Python function is followed;
    a built-in slot cannot change; anything else has no cheap token."""
    function = _unwrap_descriptor(entry)
    if inspect.isfunction(function):
        return _add_token(function, parts, depth + 1)
    return entry is None or inspect.isbuiltin(function) or inspect.ismethoddescriptor(function)


def _add_token(value, parts, depth):
    if depth > _MAX_NESTING:
        return False
    parts.append(value)
    if inspect.isfunction(value):
        annotations = value.__annotations__
        defaults = value.__defaults__ or ()
        kwdefaults = value.__kwdefaults__ or {}
        parts.extend((value.__code__, value.__defaults__, value.__kwdefaults__, annotations))
        for key, annotation in list(annotations.items()):
            if isinstance(annotation, str):
                return False
            parts.extend((key, annotation))
        for key, default in list(kwdefaults.items()):
            parts.extend((key, default))
        if not all(_is_immutable_data(default) for default in tuple(defaults) + tuple(kwdefaults.values())):
            return False
        attributes = value.__dict__
        signature = attributes.get("__signature__", _MISSING)
        wrapped = attributes.get("__wrapped__", _MISSING)
    elif inspect.ismethod(value):
        parts.append(value.__self__)
        return _add_token(value.__func__, parts, depth + 1)
    elif isinstance(value, functools.partial):
        keywords = value.keywords
        parts.extend((value.args, keywords))
        for key, bound in list(keywords.items()):
            if not _is_immutable_data(bound):
                return False
            parts.extend((key, bound))
        signature = getattr(value, "__signature__", _MISSING)
        wrapped = getattr(value, "__wrapped__", _MISSING)
        parts.extend((signature, wrapped))
        if wrapped is not _MISSING and not _add_token(wrapped, parts, depth + 1):
            return False
        return _add_token(value.func, parts, depth + 1)
    elif isinstance(value, type):
        parts.append(type.__getattribute__(value, "__mro__"))
        signature = getattr(value, "__signature__", _MISSING)
        wrapped = getattr(value, "__wrapped__", _MISSING)
        for owner, attribute in ((type(value), "__call__"), (value, "__new__"), (value, "__init__")):
            entry = _mro_lookup(owner, attribute)
            parts.append(entry)
            if not _add_method_token(entry, parts, depth):
                return False
    elif inspect.isbuiltin(value) or inspect.ismethoddescriptor(value):
        signature = _MISSING  # built-in: its signature cannot change
        wrapped = _MISSING
    else:
        entry = _mro_lookup(type(value), "__call__")
        parts.extend((type(value), entry))
        signature = getattr(value, "__signature__", _MISSING)
        wrapped = getattr(value, "__wrapped__", _MISSING)
        if not _add_method_token(entry, parts, depth):
            return False
    parts.extend((signature, wrapped))
    if wrapped is not _MISSING:
        return _add_token(wrapped, parts, depth + 1)
    return True


# ---- the catalog --------------------------------------------------------------------------


class ToolRegistration:
    """One dynamic tool: what was registered (never changed after) and a cache of the live
    binding it was last validated against (``value``, ``token``, ``signature``)."""

    def __init__(self, tool_name, name, description, signature, value, token):
        self.tool_name = tool_name
        self.name = name
        self.description = description
        self.schema = signature.schema
        self.fingerprint = signature.fingerprint
        self.value = value
        self.token = token
        self.signature = signature

    def public(self):
        return {
            "tool_name": self.tool_name,
            "name": self.name,
            "description": self.description,
            "input_schema": self.schema,
            "fingerprint": self.fingerprint,
        }

    def forget(self):
        """Drops the cached binding so a deleted or replaced object can be freed."""
        self.value = self.token = self.signature = None

    def revalidate(self, user_ns):
        """``(live, reason, signature)`` against the live namespace.

        Live iff the backing name is bound to a callable whose current input schema has the
        registered fingerprint. When it is the same object as last time with the same
        ``signature_token``, the cached signature stands; otherwise the schema is generated
        again and compared byte for byte (through the fingerprint). A body-only redefinition
        is a new object with the same schema: live, and the new object is what gets called.
        Stale reasons: ``deleted``, ``not callable``, ``signature changed``, ``no longer
        supported: <why>``. Liveness depends on nothing but the namespace: a registration
        whose name gets back a callable with exactly the registered schema is live again.
        """
        value = user_ns.get(self.name, _MISSING)
        if value is _MISSING:
            self.forget()
            return False, "deleted", None
        if not _guarded_value(lambda: callable(value), False):
            self.forget()
            return False, "not callable", None
        token = signature_token(value)
        if value is self.value and same_token(token, self.token):
            return True, None, self.signature
        try:
            signature = tool_signature(value)
        except UnsupportedSignature as error:
            self.forget()
            return False, "no longer supported: %s" % error, None
        if signature.fingerprint != self.fingerprint:
            self.forget()
            return False, "signature changed", None
        self.value, self.token, self.signature = value, token, signature
        return True, None, signature


class ToolCatalog:
    """The dynamic tools of one kernel: ``entries`` by tool name, and ``reported``, the
    liveness the server was last told (by tool_catalog, register_tool or unregister_tool), from
    which ``tool_catalog`` computes ``changed``."""

    def __init__(self):
        self.entries = {}
        self.reported = {}

    def drop_all(self):
        count = len(self.entries)
        self.entries = {}
        self.reported = {}
        return count


def _catalog(installation):
    catalog = getattr(installation, "tools", None)
    if catalog is None:
        catalog = installation.tools = ToolCatalog()
    return catalog


def _tool_limits(params):
    limits = {}
    for key, default in TOOL_LIMIT_KEYS:
        value = params.get(key)
        if value is None:
            value = default
        if type(value) is not int or value < 1:
            raise RequestError("invalid_request", "%r must be a positive integer" % key)
        limits[key] = value
    return limits


def _optional_string(params, key):
    value = params.get(key)
    if value is not None and not isinstance(value, str):
        raise RequestError("invalid_request", "%r must be a string or null" % key)
    return value


def _own_doc(value):
    """The callable's own docstring (not one inherited from ``object`` or ``partial``)."""
    if isinstance(value, functools.partial):
        return _own_doc(value.func)
    if isinstance(value, type):
        doc = _guarded_value(lambda: value.__dict__.get("__doc__"), None)
    elif inspect.isroutine(value):
        doc = _guarded_value(lambda: value.__doc__, None)
    else:
        doc = _guarded_value(lambda: type(value).__dict__.get("__doc__"), None)
    return inspect.cleandoc(doc) if isinstance(doc, str) else ""


def default_description(name, value, max_chars):
    """The docstring's first paragraph on one line, or a generated sentence; at most
    ``max_chars`` characters (a cut one ends with "…")."""
    text = " ".join(first_paragraph(_guarded_value(lambda: _own_doc(value), "")).split())
    if not text:
        if _guarded_value(lambda: isinstance(value, type), False):
            text = "Calls the Python class `%s` in the kernel (constructs an instance) and returns the result as JSON." % name
        else:
            text = "Calls the Python function `%s` in the kernel and returns its result as JSON." % name
    text = sanitize_text(text)
    return text if len(text) <= max_chars else text[: max_chars - 1] + "\u2026"


def _method_register_tool(params):
    """Publishes the callable bound to ``name`` as tool ``tool_name``.

    Checks in this order, and a rejection changes nothing: ``invalid_name`` (not a top-level
    identifier), ``protected_name``, ``name_not_found``, ``not_callable``, ``invalid_name``
    (tool name), ``registration_conflict`` (a reserved name, a tool name held by another backing
    name, the backing name held by another tool name), ``limit_exceeded``,
    ``invalid_arguments`` (explicit description too long), ``unsupported_signature``.
    Registering the same (tool_name, name) pair again replaces that registration (new schema,
    description and fingerprint), live or stale: that is how a stale tool is renewed.
    """
    _checked_params(
        params, ("name", "tool_name", "description", "reserved_names") + tuple(key for key, _ in TOOL_LIMIT_KEYS)
    )
    installation = _current()
    catalog = _catalog(installation)
    limits = _tool_limits(params)
    reserved = params.get("reserved_names")
    reserved = [] if reserved is None else _string_list_param(params, "reserved_names")
    tool_name = _optional_string(params, "tool_name")
    description = _optional_string(params, "description")
    name = params.get("name")
    if not isinstance(name, str) or not name.isidentifier() or keyword.iskeyword(name):
        raise RequestError(
            "invalid_name",
            "%r is not a top-level identifier: register_tool publishes a name bound in the namespace, like 'f'"
            % (name,),
        )
    shell = installation.shell
    user_ns = shell.user_ns
    value = user_ns.get(name, _MISSING)
    if is_protected(name, installation.bindings) or (
        value is not _MISSING and is_hidden(name, value, shell.user_ns_hidden)
    ):
        raise RequestError(
            "protected_name",
            "%r is protected (a _name, one of IPython's bindings or a configured module) and cannot back a tool" % name,
        )
    if value is _MISSING:
        raise RequestError("name_not_found", "name %r is not defined in the namespace" % name)
    if not _guarded_value(lambda: callable(value), False):
        raise RequestError("not_callable", "%r is not callable (it is a %s)" % (name, type_label(value)))
    if tool_name is None:
        tool_name = name
    max_name = limits["max_tool_name_chars"]
    if not _TOOL_NAME.fullmatch(tool_name) or len(tool_name) > max_name:
        raise RequestError(
            "invalid_name",
            "tool name %r is invalid: it must start with an ASCII letter, continue with ASCII letters, digits, "
            "'_' or '-', and have at most %d characters%s"
            % (tool_name, max_name, "" if params.get("tool_name") is not None else " (pass tool_name to choose one)"),
        )
    if tool_name in reserved:
        raise RequestError("registration_conflict", "tool name %r is one of the server's own tools" % tool_name)
    holder = catalog.entries.get(tool_name)
    if holder is not None and holder.name != name:
        raise RequestError(
            "registration_conflict", "tool name %r is already registered for %r" % (tool_name, holder.name)
        )
    for entry in catalog.entries.values():
        if entry.name == name and entry.tool_name != tool_name:
            raise RequestError(
                "registration_conflict",
                "%r is already registered as tool %r (unregister it first, or register it again under that name)"
                % (name, entry.tool_name),
            )
    if holder is None and len(catalog.entries) >= limits["max_dynamic_tools"]:
        raise RequestError(
            "limit_exceeded",
            "the catalog already has %d dynamic tools, the limit (unregister one first)" % len(catalog.entries),
        )
    max_description = limits["max_tool_description_chars"]
    if description is not None and description.strip():
        if len(description) > max_description:
            raise RequestError(
                "invalid_arguments",
                "the description has %d characters; the limit is %d" % (len(description), max_description),
            )
        description = sanitize_text(description)
    else:
        description = default_description(name, value, max_description)
    token = signature_token(value)
    try:
        signature = tool_signature(value)
    except UnsupportedSignature as error:
        raise RequestError("unsupported_signature", "%r cannot be a tool: %s" % (name, error)) from None
    registration = ToolRegistration(tool_name, name, description, signature, value, token)
    catalog.entries[tool_name] = registration
    catalog.reported[tool_name] = True
    return {"registration": registration.public()}


def _method_unregister_tool(params):
    _checked_params(params, ("names",))
    catalog = _catalog(_current())
    unregistered, unknown = [], []
    for tool_name in sorted(set(_string_list_param(params, "names"))):
        if catalog.entries.pop(tool_name, None) is None:
            unknown.append(tool_name)
        else:
            catalog.reported.pop(tool_name, None)
            unregistered.append(tool_name)
    return {"unregistered": unregistered, "unknown": unknown}


def _method_tool_catalog(params):
    """Every registration revalidated (see ``ToolRegistration.revalidate``), sorted by tool
    name, with ``changed``: whether the set of tools or any one's liveness differs from what
    the latest tool_catalog, register_tool or unregister_tool answer told the server."""
    _checked_params(params, ())
    installation = _current()
    catalog = _catalog(installation)
    user_ns = installation.shell.user_ns
    tools = []
    liveness = {}
    for tool_name in sorted(catalog.entries):
        entry = catalog.entries[tool_name]
        live, reason, _ = entry.revalidate(user_ns)
        tools.append(dict(entry.public(), live=live, reason=reason))
        liveness[tool_name] = live
    changed = liveness != catalog.reported
    catalog.reported = liveness
    return {"tools": tools, "changed": changed}


def _method_call_tool(params):
    """Revalidates one registration, checks and converts its JSON arguments against the
    registered schema, and calls the live binding once with them as keyword arguments."""
    _checked_params(params, ("tool_name", "arguments"))
    installation = _current()
    catalog = _catalog(installation)
    tool_name = params.get("tool_name")
    entry = catalog.entries.get(tool_name) if isinstance(tool_name, str) else None
    if entry is None:
        raise RequestError("name_not_found", "there is no dynamic tool %r" % (tool_name,))
    live, reason, signature = entry.revalidate(installation.shell.user_ns)
    if not live:
        raise RequestError(
            "stale_registration",
            "tool %r is stale (%s); call register_tool for %r again to publish its current signature"
            % (tool_name, reason, entry.name),
            reason=reason,
        )
    arguments = params.get("arguments")
    try:
        kwargs = signature.bind({} if arguments is None else arguments)
    except ArgumentError as error:
        raise RequestError("invalid_arguments", "tool %r: %s" % (tool_name, error)) from None
    return _call_for_json(entry.value, entry.name, kwargs, installation.config)


METHODS.update(
    {
        "register_tool": _method_register_tool,
        "unregister_tool": _method_unregister_tool,
        "tool_catalog": _method_tool_catalog,
        "call_tool": _method_call_tool,
    }
)


# --------------------------------------------------------------------------------------------
# Installation into a running ipykernel
# --------------------------------------------------------------------------------------------

_installation = None


def _current():
    if _installation is None:
        raise RequestError("not_installed", "install() has not run")
    return _installation


def install(config):
    """Installs the helper into the running kernel; safe to call again (it replaces itself).

    Also applies ``config["namespace"]``: library paths first on ``sys.path``, then every
    preload and alias imported and bound in ``user_ns``. A module that fails to import does
    not make install raise; it is listed in ``namespace_errors`` (also answered later by the
    ``install_info`` method, since the server's install cell discards this return value).
    An invalid config raises (TypeError/ValueError) before anything changes.

    Returns ``{"version", "python", "ipykernel", "namespace_errors": [{"module", "code",
    "message"}]}``.
    """
    global _installation
    import ipykernel
    from IPython import get_ipython

    config = _validated(config)
    shell = get_ipython()
    if shell is None:
        raise RuntimeError("ipython_mcp_helper.install must run inside an IPython kernel")
    previous = getattr(shell, "_ipython_mcp_installation", None)
    comm = None
    if previous is not None:
        comm = previous.comm
        previous.uninstall()
    _installation = _Installation(shell, config)
    shell._ipython_mcp_installation = _installation
    if previous is not None and getattr(previous, "tools", None) is not None:
        # Registrations name user_ns bindings, which a re-install keeps: so are they.
        _installation.tools = previous.tools
    if comm is not None:
        _installation.adopt_comm(comm)
    apply_library_paths(config["namespace"])
    _installation.namespace_errors = bind_configured(shell.user_ns, config["namespace"])
    _installation.info = {
        "version": HELPER_VERSION,
        "python": platform.python_version(),
        "ipykernel": ipykernel.__version__,
    }
    return dict(_installation.info, namespace_errors=list(_installation.namespace_errors))


def _validated(config):
    if not isinstance(config, dict):
        raise TypeError("config must be a dict")
    checked = {}
    for key in CONFIG_KEYS:
        value = config.get(key)
        if type(value) is not int or value < 0:
            raise ValueError("config[%r] must be a non-negative int, got %r" % (key, value))
        checked[key] = value
    for key, default in OPTIONAL_CONFIG_KEYS:
        value = config.get(key, default)
        if type(value) is not int or value < 0:
            raise ValueError("config[%r] must be a non-negative int, got %r" % (key, value))
        checked[key] = value
    spool_dir = config.get("spool_dir")
    if spool_dir is not None and (not isinstance(spool_dir, str) or not os.path.isabs(spool_dir)):
        raise ValueError("config['spool_dir'] must be an absolute path or None, got %r" % (spool_dir,))
    checked["spool_dir"] = spool_dir
    spool_max_bytes = config.get("spool_max_bytes", 0)
    if type(spool_max_bytes) is not int or spool_max_bytes < 0:
        raise ValueError("config['spool_max_bytes'] must be a non-negative int, got %r" % (spool_max_bytes,))
    checked["spool_max_bytes"] = spool_max_bytes
    checked["namespace"] = validated_namespace(config.get("namespace"))
    return checked


_NO_EXECUTION = object()


class _Installation:
    """Everything ``install`` changed in one kernel, and the per-execution state.

    Every hook is an instance attribute (or, for the streams, a subclass swap) recorded here,
    so ``uninstall`` undoes exactly this installation and a second ``install`` never wraps
    twice. One re-entrant lock guards the state: ipykernel's fd-capture threads write
    concurrently with the main thread, and a signal handler may print while a write holds it.
    """

    def __init__(self, shell, config):
        self.shell = shell
        self.config = config
        self.bindings = configured_bindings(config["namespace"])  # protected names
        self.namespace_errors = []  # of the latest binding of the configured modules
        self.info = {}  # install's result: helper, Python and ipykernel versions
        self.tools = ToolCatalog()  # the dynamic tools (register_tool)
        self.lock = threading.RLock()
        self.comm = None
        self._undo = []
        self._active = _NO_EXECUTION  # parent msg_id of the execution being accounted
        self._depth = 0
        self._pending_clear = False
        self.display_count = 0
        self.display_omitted = 0
        self.outputs = OutputLog(None, 0)  # the running execution's unbounded outputs
        self.channels = []
        try:
            self._hook(shell)
        except BaseException:
            self.uninstall()  # leave the kernel as it was, not half-hooked
            raise

    # ---- installing and undoing ------------------------------------------------------------

    def _hook(self, shell):
        import comm as comm_package
        from ipykernel.iostream import OutStream

        for name in ("stdout", "stderr"):
            stream = getattr(sys, name)
            if isinstance(stream, OutStream):
                self.channels.append(_StreamChannel(self, stream, name))
        self._patch(shell.events, "trigger", self._wrap_trigger)
        self._patch(shell.display_pub, "publish", self._wrap_publish)
        self._patch(shell.display_pub, "clear_output", self._wrap_clear_output)
        self._patch(shell.displayhook, "write_format_data", self._wrap_write_format_data)
        self._patch(shell, "_showtraceback", self._wrap_showtraceback)
        manager = comm_package.get_comm_manager()
        manager.register_target(COMM_TARGET, self._on_comm_open)
        self._undo.append(lambda: manager.unregister_target(COMM_TARGET, self._on_comm_open))

    def _patch(self, owner, name, make_wrapper):
        """Sets ``owner.name`` to a wrapper of its current value, remembering how to undo it."""
        previous = owner.__dict__.get(name, _MISSING)
        setattr(owner, name, make_wrapper(getattr(owner, name)))

        def undo():
            if previous is _MISSING:
                owner.__dict__.pop(name, None)
            else:
                setattr(owner, name, previous)

        self._undo.append(undo)

    def uninstall(self):
        for undo in reversed(self._undo):
            undo()
        self._undo = []
        for channel in self.channels:
            channel.detach()

    # ---- per-execution accounting ----------------------------------------------------------

    def _parent(self):
        """(msg_id, msg_type) of the request the current thread or task is serving."""
        kernel = getattr(self.shell, "kernel", None)
        header = kernel.get_parent().get("header", {}) if kernel is not None else {}
        return header.get("msg_id"), header.get("msg_type")

    def begin_execution(self):
        """``pre_execute``: starts accounting a new execution unless one is running.

        IPython fires pre/post_execute around every cell, silent or not, and the comm package
        fires them around every comm message callback too (ipykernel 7.4 may handle those while
        an async cell awaits). A new ``execute_request`` always starts afresh; a nested
        run_cell of the same request, or a comm message during a running execution, is folded
        into it.
        """
        msg_id, msg_type = self._parent()
        with self.lock:
            if self._active is not _NO_EXECUTION:
                if msg_id == self._active:
                    self._depth += 1
                    return
                if msg_type != "execute_request":
                    return
            self._active = msg_id
            self._depth = 1
            self._clear()
            self.outputs.close()
            self.outputs = OutputLog(self._spool_path(msg_id, "outputs"), self.config["spool_max_bytes"])
            for channel in self.channels:
                channel.new_execution(self._spool_path(msg_id, channel.name))

    def end_execution(self):
        """``post_execute``: reports the execution that ends here."""
        msg_id, _ = self._parent()
        with self.lock:
            if self._active is _NO_EXECUTION or msg_id != self._active:
                return
            self._depth -= 1
            if self._depth > 0:
                return
            self._active = _NO_EXECUTION
            self.outputs.close()
            for channel in self.channels:
                channel.close_spool()
            written = any(channel.written for channel in self.channels)
            held_back = self.display_omitted > 0 or any(
                channel.written > channel.forwarded for channel in self.channels
            )
            if not (held_back or self.config["report_always"]):
                return
            report = self._report()
        if written:
            self._flush_streams()
        self._send(report)

    def _spool_path(self, msg_id, name):
        """Where this execution's ``name`` stream is spooled, or None when spooling is off."""
        directory = self.config["spool_dir"]
        if directory is None or self.config["spool_max_bytes"] == 0:
            return None
        if not isinstance(msg_id, str) or not _SPOOL_NAME.match(msg_id):
            return None
        return os.path.join(directory, "%s.%s" % (msg_id, name))

    def _flush_streams(self):
        # Stream text waits up to 0.2 s in OutStream's buffer; flushing here puts every
        # forwarded stream message on iopub before the report.
        for channel in self.channels:
            try:
                channel.stream.flush()
            except Exception:
                pass  # a stream that cannot flush must not cost the report

    def _report(self):
        streams = {name: {"text": "", "omitted_chars": 0} for name in ("stdout", "stderr")}
        raw_chars = {"stdout": 0, "stderr": 0}
        spool = {}
        for channel in self.channels:
            streams[channel.name] = {
                "text": sanitize_text(channel.sink.text()),
                "omitted_chars": channel.sink.omitted(),
            }
            raw_chars[channel.name] = channel.written
            if channel.spool_path is not None:
                spool[channel.name] = {"bytes": channel.spooled, "dropped_bytes": channel.spool_dropped}
        return {
            "event": "execution_report",
            "stdout": streams["stdout"],
            "stderr": streams["stderr"],
            "display_count": self.display_count,
            "display_omitted": self.display_omitted,
            "raw_chars": raw_chars,
            "spool": spool,
        }

    def _clear(self):
        """Front-end clear: stream text and display counters (not the raw budget)."""
        self._pending_clear = False
        self.display_count = 0
        self.display_omitted = 0
        for channel in self.channels:
            channel.sink.clear()

    def note_output(self):
        """Any output applies a pending ``clear_output(wait=True)``, as front ends do."""
        if self._pending_clear:
            self._clear()

    # ---- hooks -----------------------------------------------------------------------------

    def _wrap_trigger(self, trigger):
        # Wrapping the trigger (rather than registering callbacks) puts the reset before every
        # pre_execute callback and the report after every post_execute one. matplotlib-inline
        # registers its figure-flushing callback when pyplot is first imported, i.e. after us,
        # and its figures must be counted in the report.
        def wrapped(event, *args, **kwargs):
            if event == "pre_execute":
                self._guarded(self.begin_execution)
            try:
                return trigger(event, *args, **kwargs)
            finally:
                if event == "post_execute":
                    self._guarded(self.end_execution)

        return wrapped

    def _wrap_publish(self, publish):
        def wrapped(data, metadata=None, *args, **kwargs):
            try:
                with self.lock:
                    self.note_output()
                    transient = kwargs.get("transient")
                    self.outputs.add(
                        {
                            "output_type": "update_display_data" if kwargs.get("update", False) else "display_data",
                            "data": data,
                            "metadata": metadata if metadata is not None else {},
                            "transient": transient if isinstance(transient, dict) else {},
                        }
                    )
                    if not kwargs.get("update", False):
                        self.display_count += 1
                        if self.display_count > self.config["max_display_items"]:
                            self.display_omitted += 1
                            return None
                data, metadata = self._bounded(data, metadata)
            except Exception:
                pass  # bounding failed: publish as IPython asked rather than lose the display
            return publish(data, metadata, *args, **kwargs)

        return wrapped

    def _wrap_clear_output(self, clear_output):
        def wrapped(wait=False):
            with self.lock:
                self._guarded(lambda: self.outputs.add({"output_type": "clear_output", "wait": bool(wait)}))
                if wait:
                    self._pending_clear = True
                else:
                    self._clear()
            return clear_output(wait)

        return wrapped

    def _wrap_write_format_data(self, write_format_data):
        def wrapped(format_dict, md_dict=None):
            try:
                with self.lock:
                    self.note_output()
                    self.outputs.add(
                        {
                            "output_type": "execute_result",
                            "data": format_dict,
                            "metadata": md_dict if md_dict is not None else {},
                        }
                    )
                format_dict, md_dict = self._bounded(format_dict, md_dict)
            except Exception:
                pass
            return write_format_data(format_dict, md_dict)

        return wrapped

    def _wrap_showtraceback(self, showtraceback):
        def wrapped(etype, evalue, stb):
            try:
                with self.lock:
                    self.note_output()
                    # As ipykernel's own error message has it (the traceback unbounded).
                    self.outputs.add(
                        {
                            "output_type": "error",
                            "ename": str(getattr(etype, "__name__", etype)),
                            "evalue": str(evalue),
                            "traceback": list(stb) if stb is not None else [],
                        }
                    )
                stb = bound_traceback(stb, self.config["max_traceback_chars"])
                # ipykernel puts str(evalue) in the error message; a str is its own str().
                evalue = bound_strings(str(evalue), self.config["max_string_chars"])
            except Exception:
                pass
            return showtraceback(etype, evalue, stb)

        return wrapped

    def _bounded(self, data, metadata):
        return bound_bundle(
            data,
            metadata,
            self.config["max_string_chars"],
            self.config["max_image_bytes"],
            self.config["max_fit_input_bytes"],
        )

    @staticmethod
    def _guarded(action):
        try:
            action()
        except Exception:
            pass  # accounting must never break the user's cell

    # ---- the comm --------------------------------------------------------------------------

    def _on_comm_open(self, comm, open_msg):
        self.adopt_comm(comm)
        comm.send({"event": "ready", "version": HELPER_VERSION})

    def adopt_comm(self, comm):
        """Makes ``comm`` the one reports go to (a later open replaces it) and serves it."""
        self.comm = comm

        def on_msg(msg):
            reply = handle_request(msg.get("content", {}).get("data"))
            try:
                comm.send(reply)
            except Exception as error:  # e.g. a result JSON cannot carry: still answer
                detail = "the reply could not be sent: %s: %s" % (type(error).__name__, error)
                comm.send(_error_reply(reply["id"], "internal_error", detail))

        def on_close(msg):
            if self.comm is comm:
                self.comm = None

        comm.on_msg(on_msg)
        comm.on_close(on_close)

    def _send(self, data):
        comm = self.comm
        if comm is not None:
            comm.send(data)


def _log_json_default(value):
    """What ipykernel's JSON cleaning does to the few non-JSON values a bundle may hold."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        import base64

        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    return repr(value)


class OutputLog:
    """One execution's outputs, unbounded, as nbformat outputs in arrival order, appended to
    ``path`` (one compact JSON object a line, created 0600 with O_EXCL on first use).

    Lines: ``{"output_type": "display_data" | "update_display_data", "data", "metadata",
    "transient"}``, ``{"output_type": "execute_result", "data", "metadata"}``, ``{"output_type":
    "error", "ename", "evalue", "traceback"}``, ``{"output_type": "clear_output", "wait"}``, and
    ``{"output_type": "stream", "name", "offset"}``: stream output continues here, from that byte
    offset of the stream's spool file (logged only when the stream changes, not per write).
    At most ``limit`` bytes; the first line that does not fit is replaced by ``{"output_type":
    "omitted"}`` and nothing more is logged for the execution.
    """

    def __init__(self, path, limit):
        self.path = path
        self.limit = limit
        self.file = None
        self.written = 0
        self.full = path is None
        self.last_stream = None

    def add(self, entry):
        if self.full:
            return
        if entry.get("output_type") != "stream":
            self.last_stream = None
        try:
            line = json.dumps(entry, default=_log_json_default, separators=(",", ":")) + "\n"
            line = line.encode("utf-8", "replace")
        except Exception:
            line = None  # e.g. a circular structure: say something is missing, log no more
        if line is None or self.written + len(line) > self.limit:
            self.full = True
            line = b'{"output_type":"omitted"}\n'
        try:
            if self.file is None:
                fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                self.file = os.fdopen(fd, "wb")
            self.file.write(line)
            self.written += len(line)
        except (OSError, ValueError):
            self.full = True  # unwritable: stop for this execution

    def stream(self, name, offset):
        """Stream ``name`` is written at ``offset`` of its spool file now."""
        if self.last_stream != name:
            self.add({"output_type": "stream", "name": name, "offset": offset})
            self.last_stream = name

    def close(self):
        file, self.file = self.file, None
        self.full = True
        if file is not None:
            try:
                file.close()
            except Exception:
                pass


# Attributes the helper keeps on a bounded OutStream (its class and its instance dict).
_BOUNDED_MARKER = "_ipython_mcp_bounded"
_CHANNEL = "_ipython_mcp_channel"
_INNER = "_ipython_mcp_inner"
_LOCAL = "_ipython_mcp_local"


class _StreamChannel:
    """Bounds one ipykernel ``OutStream``: a ``TerminalSink`` sees every write, and only the
    first ``raw_forward_chars`` characters per execution reach the real stream (and iopub).

    The stream's class is swapped for a subclass whose ``write`` is a property (see
    ``_bounded_stream_class``), so this channel stays the outermost writer: for Python-level
    writes, for ipykernel's fd-capture thread (which calls ``self.write``), and across IPython
    9's per-cell tee, which assigns ``stream.write`` for each cell and would otherwise record
    (and keep in memory) every unbounded write in the history.
    """

    def __init__(self, installation, stream, name):
        self.installation = installation
        self.stream = stream
        self.name = name
        self.sink = TerminalSink(installation.config["max_text_chars"])
        self.budget = installation.config["raw_forward_chars"]
        self.written = 0
        self.forwarded = 0
        self.spool_limit = installation.config["spool_max_bytes"]
        self.spool_path = None
        self.spool_file = None
        self.spooled = 0
        self.spool_dropped = 0
        self.spool_flushed_at = 0.0
        stream_class = type(stream)
        if not stream_class.__dict__.get(_BOUNDED_MARKER):
            stream.__class__ = _bounded_stream_class(stream_class)
            # A writer assigned before the swap (IPython's tee of the running cell) is still in
            # the instance dict; the property would hide it, so hand it to the setter.
            assigned = stream.__dict__.pop("write", None)
            stream.__dict__[_INNER] = None
            if assigned is not None:
                stream.write = assigned
        self.local = stream.__dict__.setdefault(_LOCAL, threading.local())
        self.base_write = type(stream).__mro__[1].write
        stream.__dict__[_CHANNEL] = self

    def detach(self):
        if self.stream.__dict__.get(_CHANNEL) is self:
            self.stream.__dict__[_CHANNEL] = None

    def new_execution(self, spool_path=None):
        self.written = 0
        self.forwarded = 0
        self.close_spool()
        self.spool_path = spool_path
        self.spooled = 0
        self.spool_dropped = 0

    def close_spool(self):
        spool_file, self.spool_file = self.spool_file, None
        if spool_file is not None:
            try:
                spool_file.close()
            except Exception:
                pass

    def _spool(self, string):
        """Appends ``string`` to this execution's spool file (opened on first write), up to
        ``spool_limit`` bytes; counts the rest. Flushed at most every SPOOL_FLUSH_SECONDS, so
        a reader sees a running execution's output without a system call per write."""
        if self.spool_path is None:
            return
        data = string.encode("utf-8", "replace")
        room = self.spool_limit - self.spooled
        if len(data) > room:
            self.spool_dropped += len(data) - max(room, 0)
            data = data[: max(room, 0)]
        if not data:
            return
        self.installation.outputs.stream(self.name, self.spooled)
        if self.spool_file is None:
            try:
                # O_EXCL: never follow or reuse a file someone else put there.
                fd = os.open(self.spool_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                self.spool_file = os.fdopen(fd, "wb")
            except OSError:
                self.spool_path = None  # unwritable: stop trying for this execution
                return
        self.spool_file.write(data)
        self.spooled += len(data)
        now = time.monotonic()
        if now - self.spool_flushed_at >= SPOOL_FLUSH_SECONDS:
            self.spool_flushed_at = now
            self.spool_file.flush()

    def write(self, string):
        if (
            getattr(self.local, "busy", False)
            or not isinstance(string, str)
            or self.stream.__dict__.get(_CHANNEL) is not self
        ):
            # Plain OutStream behaviour when called back by an inner writer (IPython's tee
            # calls the write it replaced: a channel's), for a non-str (OutStream raises
            # TypeError), or through a reference kept from before a re-install.
            return self.base_write(self.stream, string)
        # Forwarding under the lock too keeps concurrent writers (threads, the fd-capture
        # thread) in the same order in the stream as in the sink. OutStream.write only buffers
        # and schedules a flush, so nothing it does waits for this lock.
        with self.installation.lock:
            try:
                forward = self._account(string)
            except Exception:
                forward = string  # never lose output to a helper bug
            if forward:
                self._forward(forward)
        return len(string)

    def _account(self, string):
        """Feeds the sink; returns the sanitized part of ``string`` still within the budget."""
        self.installation.note_output()
        self.written += len(string)
        self.sink.write(string)
        try:
            self._spool(string)
        except Exception:
            self.spool_path = None  # a full disk must not break the user's print
        room = self.budget - self.forwarded
        if room <= 0:
            return ""
        part = string if len(string) <= room else string[:room]
        self.forwarded += len(part)
        return sanitize_text(part)

    def _forward(self, text):
        inner = self.stream.__dict__.get(_INNER)
        if inner is None:
            self.base_write(self.stream, text)
            return
        self.local.busy = True
        try:
            inner(text)
        finally:
            self.local.busy = False


def _bounded_stream_class(base):
    """A subclass of an OutStream class whose ``write`` attribute is a property.

    Reading ``stream.write`` gives the current channel's bounded write. Assigning it (IPython's
    tee does, for the duration of each cell) does not replace the channel: the assigned writer
    becomes the *inner* writer the channel forwards its bounded output to, and assigning the
    channel's own write back (the tee restoring) removes it. A property on the class wins over
    the instance dict, which is what keeps the channel outermost.
    """

    def get_write(stream):
        channel = stream.__dict__.get(_CHANNEL)
        if channel is not None:
            return channel.write
        inner = stream.__dict__.get(_INNER)
        return inner if inner is not None else base.write.__get__(stream)

    def set_write(stream, writer):
        channel = stream.__dict__.get(_CHANNEL)
        restoring = channel is not None and writer == channel.write
        stream.__dict__[_INNER] = None if restoring else writer

    def delete_write(stream):
        stream.__dict__[_INNER] = None

    return type(
        base.__name__,
        (base,),
        {
            "write": property(get_write, set_write, delete_write),
            _BOUNDED_MARKER: True,
            "__module__": base.__module__,
        },
    )
