"""Bounds and guarded text: what the kernel sends is cut here before ipykernel builds a message.

Sanitizing (lone surrogates, ANSI escapes), MIME bundles (strings cut, images kept whole or
dropped by size), tracebacks (head and tail kept, the middle counted), and the guarded readers
every other module uses on user objects (``safe_repr``, ``safe_str``, ``type_label``...): a
hostile object gives a placeholder, never a crash. Pure functions, tested without a kernel.
"""

import re

IMAGE_MIMES = ("image/png", "image/jpeg", "image/gif", "image/webp")
# SVG is text, but a cut SVG is as useless as a cut PNG: it is kept whole or dropped, by bytes.
SVG_MIME = "image/svg+xml"


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


def guarded_value(action, default):
    try:
        return action()
    except Exception:
        return default


def _type_names(value):
    """``(module, qualname)`` of ``type(value)``; module None when the type has no str one."""
    kind = type(value)
    name = guarded_value(lambda: kind.__qualname__, None)
    if not isinstance(name, str):
        name = guarded_value(lambda: kind.__name__, None)
    name = name if isinstance(name, str) else "?"
    module = guarded_value(lambda: kind.__module__, None)
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
