"""The comm protocol: requests ``{"id", "method", "params"}`` dispatched to ``METHODS``.

Each module that serves methods adds them to ``METHODS`` when it is executed (namespace, tools,
installation). A method takes the params dict and returns a JSON-able result, or raises
``RequestError``; ``handle_request`` turns either into the reply and never raises. Methods
read the installation they serve through ``current()``, which ``install`` sets with ``serve``.
"""

import traceback

from .bounds import bound_strings, bound_traceback, bounded_text, safe_str, sanitize_text

HELPER_VERSION = "1"
COMM_TARGET = "ipython_mcp"

_MISSING = object()
# The installation every request is answered against; None until ``install`` (or a test) sets it.
_installation = None


def serve(installation):
    """Makes ``installation`` the one ``current()`` returns: ``install`` passes the real one,
    unit tests a stand-in (a shell with ``user_ns``, a config, the configured binding names)."""
    global _installation
    _installation = installation


def current():
    if _installation is None:
        raise RequestError("not_installed", "install() has not run")
    return _installation


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
    return dict(current().config)


# name -> callable(params: dict) -> JSON-able result. The namespace, tools and installation
# modules add theirs.
METHODS = {
    "ping": _method_ping,
    "config": _method_config,
}

# Error messages travel in the reply; keep them short whatever the exception says.
MAX_ERROR_MESSAGE_CHARS = 2000


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
        return error_reply(request_id, error.code, error.message, error.fields, error.partial)
    except BaseException as error:  # the handler is a boundary: a raise would mean no reply
        return error_reply(request_id, "internal_error", "%s: %s" % (type(error).__name__, error))


def error_reply(request_id, code, message, fields=None, partial=None):
    message = bound_strings(str(message), MAX_ERROR_MESSAGE_CHARS)
    error = dict(fields or {})
    error.update(code=code, message=message)
    reply = {"id": request_id, "ok": False, "error": error}
    if partial is not None:
        reply["result"] = partial
    return reply


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


def checked_params(params, allowed):
    unknown = sorted(repr(key) for key in params if key not in allowed)
    if unknown:
        raise RequestError("invalid_request", "unknown parameters %s" % ", ".join(unknown))


def string_list_param(params, key):
    value = params.get(key)
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise RequestError("invalid_request", "%r must be a list of strings" % key)
    return value
