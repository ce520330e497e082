"""Output sinks: the terminal model of a stream, the bounded stream capture, the output log.

``TerminalSink`` is what a Jupyter front end shows for one stream, in O(limit) memory (the
server's ``terminal.rs`` (output crate) is the same model, checked against the same cases). ``StreamChannel``
puts one in front of each ipykernel ``OutStream`` and forwards only a raw budget of characters
per execution, spooling the full text. ``OutputLog`` records every output unbounded, for
notebook saving.
"""

import json
import os
import threading

from .bounds import sanitize_text

# A stream's spool text waits in memory, as the ``str`` objects written, until this many
# characters are pending or a timer started by the first of them fires SPOOL_FLUSH_SECONDS
# later; then it is joined, encoded, cut at the bound and written in one go. A print then costs
# the spool a list append, not an encoding, a bound check, a buffered write and a clock read of
# its own (`ipython-mcp-bench spool` measures it against a run without the spool).
SPOOL_BATCH_CHARS = 64 * 1024
# How long, at most, written text waits in memory, so a reader (get_output on a running
# execution) sees a slow producer's lines, and a line printed before a long computation too.
SPOOL_FLUSH_SECONDS = 0.25


class TerminalSink:
    """What a Jupyter front end shows for one output stream, in O(limit) memory.

    Rendering follows Jupyter's ``fixCarriageReturn``: ``\\n`` commits the current line, ``\\r``
    moves the cursor to column 0 of the current line and later characters overwrite from there
    (the line keeps its longer length). ``\\r\\n`` therefore renders as ``\\n``, also when split
    across writes.

    ``kept()`` is the view: the whole rendering when it has at most ``limit`` characters,
    otherwise its first ``head`` characters and its last ``limit - head``, each cut at a line
    boundary when one is near (see ``keep``), with the exact count of characters and newlines
    between them. Long output is read from the end (the final loss, the summary, the error),
    so most of the budget usually goes to the tail.

    Stored: the first ``limit`` rendered characters (the committed head and the stored prefix of
    the current line), and the last ``limit - head + 1`` (the committed tail and the end of the
    current line); the rest is lengths and the cursor, as ints. The work is done by ``str``
    methods (``in``, ``find``, ``count``, ``split``, slicing), so a huge write costs a few
    C-speed passes, not a Python loop per character.
    """

    # Huge writes are processed in slices of this many characters, so the temporary lists made
    # by ``str.split`` stay small whatever one write holds.
    _CHUNK = 1 << 20

    def __init__(self, limit, head=None):
        self._limit = limit
        self._head_limit = limit if head is None else max(0, min(head, limit))
        # One character more than the tail shows: whether the tail starts a line.
        self._tail_room = limit - self._head_limit + 1
        self._lines_before = 0
        self.clear()

    def clear(self):
        """Forgets what is shown, as ``clear_output`` does. Line numbers keep counting (they
        name lines of the whole stream, as ``get_output`` pages it)."""
        self._lines_before += getattr(self, "_newlines", 0)
        self._head = []  # stored committed text, at most `limit` characters in total
        self._committed = 0  # length of the committed rendering (may exceed `limit`)
        self._line = ""  # stored prefix of the current line
        self._line_len = 0  # length of the current line
        self._cursor = 0  # column where the next character goes
        self._written = 0
        self._newlines = 0
        self._tail_parts = []  # the end of the committed rendering, oldest first
        self._tail_chars = 0
        self._tail_line = ""  # the current line's last columns (up to `_tail_room`)
        self._tail_len = 0  # the current line's length, as the tail sees it
        self._tail_cursor = 0

    def reset(self):
        """Forgets everything, line numbers too (a new execution)."""
        self.clear()
        self._lines_before = 0

    def write(self, text):
        """Renders ``text`` after everything written before (a str; any length)."""
        self._written += len(text)
        self._tail_write(text)
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

    def kept(self):
        """``(head, tail, omitted_chars, omitted_lines, first_omitted_line)``.

        ``head + tail`` is the whole rendering when nothing is omitted (``tail`` is then empty).
        ``omitted_lines`` counts the newlines left out; ``first_omitted_line`` is the 1-based
        number, in the stream since the execution began, of the line the omitted part starts in.
        """
        total = self._committed + self._line_len
        if total <= self._limit:
            return self._head_text(), "", 0, 0, 0
        tail_room = self._tail_room - 1
        before = "".join(self._tail_parts)[-self._tail_room :] + self._tail_line
        before = before[-self._tail_room :] if tail_room else ""
        head, tail = keep(self._head_text()[: self._head_limit], before, tail_room)
        omitted = total - len(head) - len(tail)
        head_lines = head.count("\n")
        omitted_lines = self._newlines - head_lines - tail.count("\n")
        return head, tail, omitted, omitted_lines, self._lines_before + head_lines + 1

    def text(self):
        """The kept text: the head and the tail joined (see ``kept``)."""
        head, tail = self.kept()[:2]
        return head + tail

    def omitted(self):
        """How many rendered characters ``kept()`` leaves out."""
        return self.kept()[2]

    def total_written(self):
        """Raw characters written since creation or the last ``clear()``."""
        return self._written

    def _head_text(self):
        if self._committed >= self._limit:
            return "".join(self._head)
        return "".join(self._head) + self._line

    # ---- the tail: the last `_tail_room` rendered characters --------------------------------

    def _tail_write(self, text):
        if self._tail_room <= 1:
            self._newlines += text.count("\n")
            return
        last = text.rfind("\n")
        if last < 0:
            self._tail_range(text, 0, len(text))
            return
        self._newlines += text.count("\n")
        first = text.find("\n")
        self._tail_range(text, 0, first)
        self._tail_commit()
        if last > first:
            self._tail_lines(text, first + 1, last)
        self._tail_range(text, last + 1, len(text))

    def _tail_range(self, text, start, end):
        """Writes ``text[start:end]`` (no newline) at the tail's cursor, in slices of _CHUNK:
        writing a segment is writing its parts one after the other, and no copy of a huge
        write is made."""
        if start == 0 and end == len(text) and end <= self._CHUNK:
            self._tail_put(text)
            return
        while start < end:
            stop = min(start + self._CHUNK, end)
            self._tail_put(text[start:stop])
            start = stop

    def _tail_lines(self, text, start, end):
        """Commits the complete lines of ``text[start:end+1]`` (which ends with a newline);
        only the ones that reach the last `_tail_room` characters are looked at."""
        room = self._tail_room
        if text.find("\r", start, end) < 0:
            self._tail_append(text[max(start, end + 1 - room) : end + 1])
            return
        # Lines with carriage returns: render them from the last one back until the room is
        # covered, each on the current-line machinery (which keeps only its last columns).
        saved = (self._tail_line, self._tail_len, self._tail_cursor)
        rendered = []
        covered = 0
        stop = end
        while covered < room and stop >= start:
            begin = max(text.rfind("\n", start, stop) + 1, start)
            self._tail_line, self._tail_len, self._tail_cursor = "", 0, 0
            self._tail_range(text, begin, stop)
            rendered.append(self._tail_line + "\n")
            covered += self._tail_len + 1
            stop = begin - 1
        self._tail_line, self._tail_len, self._tail_cursor = saved
        self._tail_append("".join(reversed(rendered)))

    def _tail_append(self, committed):
        self._tail_parts.append(committed)
        self._tail_chars += len(committed)
        if self._tail_chars > 2 * self._tail_room:
            joined = "".join(self._tail_parts)[-self._tail_room :]
            self._tail_parts = [joined]
            self._tail_chars = len(joined)

    def _tail_commit(self):
        self._tail_append(self._tail_line + "\n")
        self._tail_line = ""
        self._tail_len = self._tail_cursor = 0

    def _tail_put(self, segment):
        """Writes a segment with no newline at the tail's cursor (see ``_put``)."""
        if not segment:
            return
        if "\r" not in segment:
            self._tail_at(self._tail_cursor, segment)
            return
        pieces = segment.split("\r")
        self._tail_at(self._tail_cursor, pieces[0])
        rest = pieces[1:]
        widest = max(map(len, rest))
        # Writing every piece from column 0 in turn leaves the overlay of them all, and the
        # cursor after the last one.
        self._tail_at(0, _overlay_from_column_zero("", rest, widest))
        self._tail_cursor = len(rest[-1])

    def _tail_at(self, column, segment):
        """Writes ``segment`` (no control characters) from ``column``, keeping the line's last
        `_tail_room` columns."""
        end = column + len(segment)
        length = max(self._tail_len, end)
        old_start = self._tail_len - len(self._tail_line)
        start = max(length - self._tail_room, 0)
        parts = []
        if column > start:
            parts.append(self._tail_line[start - old_start : column - old_start])
        parts.append(segment[max(column, start) - column :])
        if end < length:
            parts.append(self._tail_line[max(end, start) - old_start :])
        self._tail_line = "".join(parts)
        self._tail_len = length
        self._tail_cursor = end

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


def keep(head, before_tail, tail_room):
    """The head and the tail shown of a rendering that is too long to show whole.

    ``head`` is its first characters; ``before_tail`` its last ``tail_room + 1`` (or fewer
    when it is shorter). A cut falls at a line boundary when one is near: the head ends after
    its last newline, and the tail starts after its first one, unless that would lose more
    than half of either.
    """
    newline = head.rfind("\n")
    if newline >= 0 and 2 * (newline + 1) >= len(head):
        head = head[: newline + 1]
    if tail_room <= 0:
        return head, ""
    tail = before_tail[-tail_room:]
    starts_a_line = len(before_tail) <= tail_room or before_tail[0] == "\n"
    if not starts_a_line:
        newline = tail.find("\n")
        if newline >= 0 and 2 * (newline + 1) <= tail_room:
            tail = tail[newline + 1 :]
    return head, tail


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


class StreamChannel:
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
        self.sink = TerminalSink(installation.config["max_text_chars"], installation.config["text_head_chars"])
        self.budget = installation.config["raw_forward_chars"]
        self.written = 0
        self.forwarded = 0
        self.spool_limit = installation.config["spool_max_bytes"]
        self.spool_path = None
        self.spool_file = None
        self.spooled = 0
        self.spool_dropped = 0
        self.spool_timer = None  # the threading.Timer that writes the pending text, if started
        # Written text not yet in the file (nor counted in ``spooled``), and the value of
        # ``written`` when the file was last written: see _account.
        self.spool_pending = []
        self.spool_written_at = 0
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
        with self.installation.lock:
            self.close_spool()  # what it holds is written, not lost with the channel

    def new_execution(self, spool_path=None):
        self.sink.reset()
        self.written = 0
        self.forwarded = 0
        self.close_spool()
        self.spool_path = spool_path
        self.spooled = 0
        self.spool_dropped = 0
        self.spool_written_at = 0

    def close_spool(self):
        """Writes what is pending and closes the file. ``end_execution`` calls it before the
        execution's reply goes out, so the file then holds all that ``spooled`` counts."""
        try:
            self._spool_write()
        except Exception:
            self.spool_path = None  # as a failed write during the execution
        spool_file, self.spool_file = self.spool_file, None
        if spool_file is not None:
            try:
                spool_file.close()
            except Exception:
                pass

    def _spool_stream_starts(self, string):
        """Whether ``string``, written while the output log's latest entry is not this stream's,
        is spooled. If so, the log gets a marker with the offset its first byte will have (so
        what is pending is written first), unless the file is full; the first write of an
        execution opens the file."""
        if not string:
            return False
        self._spool_write()
        # ``written`` counts ``string`` already, and it is still to be appended.
        self.spool_written_at -= len(string)
        if self.spooled < self.spool_limit:
            self.installation.outputs.stream(self.name, self.spooled)
            self._spool_open()
        return self.spool_path is not None

    def _spool_later(self):
        """Writes the pending text SPOOL_FLUSH_SECONDS from now, unless a timer is due already."""
        if self.spool_timer is None:
            timer = threading.Timer(SPOOL_FLUSH_SECONDS, self._spool_due)
            timer.name = "ipython-mcp-spool"
            timer.daemon = True  # never holds up the kernel's exit
            self.spool_timer = timer
            timer.start()

    def _spool_due(self):
        with self.installation.lock:
            self.spool_timer = None
            try:
                self._spool_write()
            except Exception:
                self.spool_path = None  # as a failed write during the execution

    def _spool_open(self):
        if self.spool_file is None:
            try:
                # O_EXCL: never follow or reuse a file someone else put there.
                fd = os.open(self.spool_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                self.spool_file = os.fdopen(fd, "wb")
            except OSError:
                self.spool_path = None  # unwritable: stop trying for this execution

    def _spool_write(self):
        """Writes the pending text to this execution's spool file (created 0600 on first use)
        as far as ``spool_limit`` allows (the cut may fall within a character: the file is
        bytes) and counts the rest as dropped: the file is the first ``spool_limit`` bytes of
        the stream, exactly as if every write went to it at once."""
        pending = self.spool_pending
        self.spool_written_at = self.written
        if not pending:
            return
        self.spool_pending = []
        if self.spool_path is None:
            return
        data = "".join(pending).encode("utf-8", "replace")
        room = self.spool_limit - self.spooled
        if len(data) > room:
            self.spool_dropped += len(data) - max(room, 0)
            data = data[: max(room, 0)]
        if not data:
            return
        self._spool_open()
        if self.spool_file is None:
            return
        self.spool_file.write(data)
        self.spool_file.flush()
        self.spooled += len(data)

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
        if self.spool_path is not None:
            # The spool: ``string`` waits in memory until a batch is full or the timer its
            # batch started fires (see SPOOL_BATCH_CHARS), so a print costs no encoding, no
            # write and no clock read of its own, and a reader still sees a running
            # execution's output soon. Inline, not a method: a call per write is a measurable
            # share of the spool's cost.
            try:
                if self.installation.outputs.last_stream == self.name or self._spool_stream_starts(string):
                    pending = self.spool_pending
                    if not pending:
                        self._spool_later()
                    pending.append(string)
                    if self.written - self.spool_written_at >= SPOOL_BATCH_CHARS:
                        self._spool_write()
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
