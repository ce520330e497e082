"""Code mode: the server's upstream MCP servers as the ``mcp_servers`` module.

``mcp_servers.NAME.TOOL(...)`` calls tool TOOL of upstream server NAME through the server,
which holds the connection and its credentials (nothing of them is in this kernel). The
request travels on the running execution's stdin channel, as an ``input_request`` whose
prompt the server recognizes and answers: so a call needs no network of the kernel's, and it
inherits the execution's deadline, interrupt and cancellation (an interrupt raises
``KeyboardInterrupt`` here and the server cancels the upstream call). Calls are made one at
a time, from code that ``execute`` runs.

A tool becomes a function with a real signature from its ``inputSchema`` (required
parameters first, without defaults, in the order declared; the others show the schema's
``default``, else ``None``; an argument not passed, or passed as ``None``, is left out, so the
upstream applies its own default), its description as the docstring; it returns the result's
``structuredContent`` when there is one, else its content: a text block as ``str``, an image
as ``IPython.display.Image``, several blocks as a list. A result marked ``isError`` raises
``ToolError``.
"""

import base64
import builtins
import getpass
import inspect
import json
import keyword
import re
import sys
import threading
import types

# Before the request's JSON in the prompt; the server's session looks for it.
PROMPT = "\x01ipython-mcp code mode\x01"
MODULE = "mcp_servers"

_TYPES = {"string": str, "integer": int, "number": float, "boolean": bool, "array": list, "object": dict}


class ToolError(Exception):
    """An upstream tool answered with an error (its result had ``isError``)."""


class UpstreamError(Exception):
    """The server could not get an answer from the upstream server (start, connection, call)."""


class Lines(list):
    """Lines that print one per line."""

    def __repr__(self):
        return "\n".join(self)

    __str__ = __repr__


def identifier(name):
    """``name`` as a Python identifier: other characters become ``_``."""
    text = re.sub(r"\W", "_", name)
    if not text or text[0].isdigit():
        text = "_" + text
    if keyword.iskeyword(text):
        text += "_"
    return text


_asking = threading.Lock()


def _ask(request):
    """The server's answer to one request; raises what the answer says went wrong."""
    from IPython import get_ipython

    shell = get_ipython()
    kernel = getattr(shell, "kernel", None)
    if kernel is None:
        raise RuntimeError("mcp_servers works in a kernel of ipython-mcp's only")
    with _asking:
        try:
            text = kernel.raw_input(PROMPT + json.dumps(request))
        except Exception as error:
            if type(error).__name__ == "StdinNotImplementedError":
                raise RuntimeError(
                    "mcp_servers can be called only from code that execute runs "
                    "(not from a tool call, nor a thread after its cell ended)"
                ) from None
            raise
    try:
        answer = json.loads(text)
    except ValueError:
        answer = None
    if not isinstance(answer, dict):
        raise UpstreamError("the server gave no answer")
    if not answer.get("ok"):
        message = answer.get("error") or "failed"
        if answer.get("kind") in ("unknown_server", "unknown_tool"):
            raise AttributeError(message)
        raise UpstreamError(message)
    return answer


def _result(result):
    """A tool's result as Python objects (see the module's documentation)."""
    content = result.get("content") or []
    if result.get("isError"):
        texts = [block.get("text", "") for block in content if block.get("type") == "text"]
        raise ToolError("\n".join(texts) or "the tool reported an error")
    if result.get("structuredContent") is not None:
        return result["structuredContent"]
    values = [_block(block) for block in content]
    if not values:
        return None
    return values[0] if len(values) == 1 else values


def _block(block):
    kind = block.get("type")
    if kind == "text":
        return block.get("text", "")
    if kind == "image":
        from IPython.display import Image

        mime = block.get("mimeType", "image/png")
        return Image(data=base64.b64decode(block.get("data", "")), format=mime.split("/")[-1])
    return block


def _annotation(schema):
    kind = schema.get("type") if isinstance(schema, dict) else None
    if isinstance(kind, list):
        kinds = [_TYPES[k] for k in kind if k in _TYPES]
        return kinds[0] if len(kinds) == 1 else inspect.Parameter.empty
    return _TYPES.get(kind, inspect.Parameter.empty)


def _default(schema):
    """What an optional parameter's signature shows: the schema's default, else ``None``."""
    if isinstance(schema, dict):
        return schema.get("default")
    return None


def _function(server, spec):
    """The Python function of one tool."""
    name = spec.get("name", "")
    schema = spec.get("inputSchema") or {}
    properties = schema.get("properties") or {}
    required = [key for key in properties if key in set(schema.get("required") or ())]
    optional = [key for key in properties if key not in required]
    original, parameters, help_lines = {}, [], []
    for key in required + optional:
        ident = identifier(key)
        while ident in original:
            ident += "_"
        original[ident] = key
        parameters.append(
            inspect.Parameter(
                ident,
                inspect.Parameter.POSITIONAL_OR_KEYWORD,
                default=inspect.Parameter.empty if key in required else _default(properties[key]),
                annotation=_annotation(properties[key]),
            )
        )
        described = properties[key].get("description") if isinstance(properties[key], dict) else None
        if described:
            help_lines.append("    %s: %s" % (ident, described))
    signature = inspect.Signature(parameters)

    def call(*args, **kwargs):
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError as error:
            raise TypeError("%s.%s%s: %s" % (identifier(server), identifier(name), signature, error)) from None
        arguments = {original[key]: value for key, value in bound.arguments.items() if value is not None}
        answer = _ask({"op": "call", "server": server, "tool": name, "arguments": arguments})
        return _result(answer.get("result") or {})

    call.__name__ = identifier(name)
    call.__qualname__ = "%s.%s" % (identifier(server), call.__name__)
    call.__signature__ = signature
    doc = spec.get("description") or ""
    if help_lines:
        doc += "\n\nArgs:\n" + "\n".join(help_lines)
    call.__doc__ = doc
    return call


class Server:
    """One upstream server: its tools as attributes (listed at first use)."""

    def __init__(self, name):
        self._name = name
        self._tools = None

    def _load(self):
        if self._tools is None:
            self._listed(_ask({"op": "tools", "server": self._name}).get("tools"))
        return self._tools

    def _listed(self, specs):
        tools = {}
        for spec in specs or []:
            function = _function(self._name, spec)
            tools[function.__name__] = function
        self._tools = tools

    def __getattr__(self, attribute):
        if attribute.startswith("__"):
            raise AttributeError(attribute)
        tools = self._load()
        try:
            return tools[attribute]
        except KeyError:
            raise AttributeError(
                "upstream %r has no tool %r; it has: %s" % (self._name, attribute, ", ".join(sorted(tools)))
            ) from None

    def __dir__(self):
        return sorted(self._load())

    def __repr__(self):
        return "<upstream MCP server %r>" % self._name


class _Async:
    """``mcp_servers.aio.NAME.TOOL(...)``: the same calls, awaitable (still one at a time)."""

    def __init__(self, target):
        self._target = target

    def __getattr__(self, attribute):
        found = getattr(self._target, attribute)
        if callable(found) and not isinstance(found, Server):

            async def call(*args, **kwargs):
                return found(*args, **kwargs)

            call.__name__, call.__doc__ = found.__name__, found.__doc__
            call.__signature__ = inspect.signature(found)
            return call
        return _Async(found)

    def __dir__(self):
        return dir(self._target)


class Module(types.ModuleType):
    """The ``mcp_servers`` module: a ``Server`` per configured upstream."""

    ToolError = ToolError
    UpstreamError = UpstreamError

    def __init__(self, names):
        super().__init__(MODULE, __doc__)
        self.__dict__["_servers"] = {identifier(name): Server(name) for name in names}
        self.__dict__["aio"] = _Async(self)

    def __getattr__(self, attribute):
        servers = self.__dict__["_servers"]
        if attribute in servers:
            return servers[attribute]
        raise AttributeError(
            "no upstream MCP server %r; configured: %s" % (attribute, ", ".join(sorted(servers)) or "none")
        )

    def __dir__(self):
        return sorted(self.__dict__["_servers"]) + ["ToolError", "UpstreamError", "aio", "search"]

    def search(self, query=""):
        """``NAME.TOOL(signature)`` lines of the tools whose name or description has every word
        of ``query`` (all tools for an empty one), each with its description's first line; a
        server that cannot be reached is a ``NAME: unavailable - why`` line."""
        words = query.lower().split()
        found = Lines()
        servers = self.__dict__["_servers"]
        unavailable = {}
        if any(server._tools is None for server in servers.values()):
            # Every server not listed yet, in one request: the server connects them at once.
            catalog = _ask({"op": "catalog"}).get("servers") or {}
            for server in servers.values():
                entry = catalog.get(server._name) or {}
                if server._tools is not None:
                    continue
                if "tools" in entry:
                    server._listed(entry["tools"])
                else:
                    unavailable[server._name] = entry.get("error") or "no answer"
        for ident, server in sorted(servers.items()):
            if server._name in unavailable:
                found.append("%s: unavailable - %s" % (ident, unavailable[server._name]))
                continue
            for name, function in sorted(server._load().items()):
                text = ("%s %s %s" % (ident, name, function.__doc__ or "")).lower()
                if all(word in text for word in words):
                    summary = (function.__doc__ or "").strip().splitlines()
                    line = "%s.%s%s" % (ident, name, inspect.signature(function))
                    found.append(line + (" - " + summary[0] if summary else ""))
        return found


def install(names):
    """Makes ``import mcp_servers`` give the servers ``names``; none: no module."""
    if names:
        sys.modules[MODULE] = Module(names)
    else:
        sys.modules.pop(MODULE, None)


def uninstall():
    module = sys.modules.get(MODULE)
    if isinstance(module, Module):
        del sys.modules[MODULE]


def _no_input(prompt="", *args, **kwargs):
    from IPython.core.error import StdinNotImplementedError

    raise StdinNotImplementedError("raw_input was called, but this frontend does not support input requests.")


def refuse_input():
    """Stdin is open for code mode only: ``input`` and ``getpass`` fail as without it (the
    kernel puts its own back after the execution)."""
    builtins.input = _no_input
    getpass.getpass = _no_input
