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
* answers JSON requests on that comm (``METHODS``).

Messages on the comm (kernel -> server unless noted):

* on open: ``{"event": "ready", "version": HELPER_VERSION}``;
* server -> kernel: ``{"id": str, "method": str, "params": {...}}``, answered by
  ``{"id", "ok": true, "result"}`` or ``{"id", "ok": false, "error": {"code", "message"}}``;
* at the end of each top-level execution (an ``execute_request``, silent or not, or a comm
  message handled while nothing runs), with that request as parent, after its last forwarded
  stream message and before its ``idle``: ``{"event": "execution_report", "stdout": {"text",
  "omitted_chars"}, "stderr": {...}, "display_count", "display_omitted", "raw_chars":
  {"stdout", "stderr"}}``.

Standard library only at import time (Python >= 3.9); IPython, ipykernel and comm are
imported inside ``install`` because they only exist in a running kernel.
"""

import platform
import re
import sys
import threading

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


def bound_bundle(data, metadata, max_string_chars, max_image_bytes):
    """Bounds a MIME bundle; returns new ``(data, metadata)`` and leaves the inputs alone.

    Raster images larger than ``max_image_bytes`` (decoded) are dropped and recorded as
    ``metadata["ipython_mcp"]["omitted_images"][mime] = decoded_bytes``; kept images are not
    cut (a cut image is garbage). SVG is treated as an image measured in UTF-8 bytes. Every
    other string is cut to ``max_string_chars``.
    """
    kept = {}
    omitted_images = {}
    for mime, value in data.items():
        size = image_size(value, mime) if mime in IMAGE_MIMES or mime == SVG_MIME else None
        if size is None:
            kept[sanitize_text(mime)] = bound_strings(value, max_string_chars)
        elif size > max_image_bytes:
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
    """Raised by a method to answer ``{"ok": false, "error": {"code", "message"}}``."""

    def __init__(self, code, message):
        super().__init__(message)
        self.code = code
        self.message = message


def _method_ping(params):
    return params


def _method_config(params):
    return dict(_current().config)


# name -> callable(params: dict) -> JSON-able result. Later work adds methods here.
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
        return _error_reply(request_id, error.code, error.message)
    except BaseException as error:  # the handler is a boundary: a raise would mean no reply
        return _error_reply(request_id, "internal_error", "%s: %s" % (type(error).__name__, error))


def _error_reply(request_id, code, message):
    message = bound_strings(str(message), _MAX_ERROR_MESSAGE_CHARS)
    return {"id": request_id, "ok": False, "error": {"code": code, "message": message}}


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

    Returns ``{"version", "python", "ipykernel"}``.
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
    if comm is not None:
        _installation.adopt_comm(comm)
    return {
        "version": HELPER_VERSION,
        "python": platform.python_version(),
        "ipykernel": ipykernel.__version__,
    }


def _validated(config):
    if not isinstance(config, dict):
        raise TypeError("config must be a dict")
    checked = {}
    for key in CONFIG_KEYS:
        value = config.get(key)
        if type(value) is not int or value < 0:
            raise ValueError("config[%r] must be a non-negative int, got %r" % (key, value))
        checked[key] = value
    return checked


_MISSING = object()
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
        self.lock = threading.RLock()
        self.comm = None
        self._undo = []
        self._active = _NO_EXECUTION  # parent msg_id of the execution being accounted
        self._depth = 0
        self._pending_clear = False
        self.display_count = 0
        self.display_omitted = 0
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
            for channel in self.channels:
                channel.new_execution()

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
        for channel in self.channels:
            streams[channel.name] = {
                "text": sanitize_text(channel.sink.text()),
                "omitted_chars": channel.sink.omitted(),
            }
            raw_chars[channel.name] = channel.written
        return {
            "event": "execution_report",
            "stdout": streams["stdout"],
            "stderr": streams["stderr"],
            "display_count": self.display_count,
            "display_omitted": self.display_omitted,
            "raw_chars": raw_chars,
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
                    if not kwargs.get("update", False):
                        self.display_count += 1
                        if self.display_count > self.config["max_display_items"]:
                            self.display_omitted += 1
                            return None
                data, metadata = bound_bundle(
                    data, metadata, self.config["max_string_chars"], self.config["max_image_bytes"]
                )
            except Exception:
                pass  # bounding failed: publish as IPython asked rather than lose the display
            return publish(data, metadata, *args, **kwargs)

        return wrapped

    def _wrap_clear_output(self, clear_output):
        def wrapped(wait=False):
            with self.lock:
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
                format_dict, md_dict = bound_bundle(
                    format_dict, md_dict, self.config["max_string_chars"], self.config["max_image_bytes"]
                )
            except Exception:
                pass
            return write_format_data(format_dict, md_dict)

        return wrapped

    def _wrap_showtraceback(self, showtraceback):
        def wrapped(etype, evalue, stb):
            try:
                with self.lock:
                    self.note_output()
                stb = bound_traceback(stb, self.config["max_traceback_chars"])
                # ipykernel puts str(evalue) in the error message; a str is its own str().
                evalue = bound_strings(str(evalue), self.config["max_string_chars"])
            except Exception:
                pass
            return showtraceback(etype, evalue, stb)

        return wrapped

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

    def new_execution(self):
        self.written = 0
        self.forwarded = 0

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
