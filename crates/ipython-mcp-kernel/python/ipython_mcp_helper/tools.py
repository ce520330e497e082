"""Dynamic tools: input schemas generated from signatures, the catalog and its reconciliation,
and calls (``register_tool``, ``unregister_tool``, ``tool_catalog``, ``call_tool``).
"""

import functools
import hashlib
import inspect
import json
import keyword
import math
import re
import sys
import types
import typing

from .bounds import guarded_value, safe_repr, safe_str, sanitize_text, type_label
from .jsonconv import call_for_json
from .namespace import first_paragraph, is_hidden, is_protected
from .rpc import METHODS, RequestError, checked_params, current, string_list_param

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

_MISSING = object()

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
        text = guarded_value(lambda: annotation.__qualname__, None)
        if isinstance(text, str):
            module = guarded_value(lambda: annotation.__module__, None)
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
    container = annotation if origin is None and guarded_value(lambda: annotation in _BARE, False) else origin
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
        if guarded_value(lambda: check(value), False):
            raise UnsupportedSignature("it is %s; tools call synchronous functions that return their result" % what)
    if isinstance(value, type) or inspect.isroutine(value) or isinstance(value, functools.partial):
        return
    call = guarded_value(lambda: type(value).__call__, None)
    for check, what in checks:
        if call is not None and guarded_value(lambda: check(call), False):
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
    wrapped = guarded_value(lambda: getattr(value, "__wrapped__", None), None)
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
    for klass in guarded_value(lambda: type.__getattribute__(owner, "__mro__"), ()):
        entry = guarded_value(lambda: klass.__dict__.get(attribute, _MISSING), _MISSING)
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
        if not guarded_value(lambda: callable(value), False):
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
        doc = guarded_value(lambda: value.__dict__.get("__doc__"), None)
    elif inspect.isroutine(value):
        doc = guarded_value(lambda: value.__doc__, None)
    else:
        doc = guarded_value(lambda: type(value).__dict__.get("__doc__"), None)
    return inspect.cleandoc(doc) if isinstance(doc, str) else ""


def default_description(name, value, max_chars):
    """The docstring's first paragraph on one line, or a generated sentence; at most
    ``max_chars`` characters (a cut one ends with "…")."""
    text = " ".join(first_paragraph(guarded_value(lambda: _own_doc(value), "")).split())
    if not text:
        if guarded_value(lambda: isinstance(value, type), False):
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
    checked_params(
        params, ("name", "tool_name", "description", "reserved_names") + tuple(key for key, _ in TOOL_LIMIT_KEYS)
    )
    installation = current()
    catalog = _catalog(installation)
    limits = _tool_limits(params)
    reserved = params.get("reserved_names")
    reserved = [] if reserved is None else string_list_param(params, "reserved_names")
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
    if not guarded_value(lambda: callable(value), False):
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
    checked_params(params, ("names",))
    catalog = _catalog(current())
    unregistered, unknown = [], []
    for tool_name in sorted(set(string_list_param(params, "names"))):
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
    checked_params(params, ())
    installation = current()
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
    checked_params(params, ("tool_name", "arguments"))
    installation = current()
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
    return call_for_json(entry.value, entry.name, kwargs, installation.config)


METHODS.update(
    {
        "register_tool": _method_register_tool,
        "unregister_tool": _method_unregister_tool,
        "tool_catalog": _method_tool_catalog,
        "call_tool": _method_call_tool,
    }
)
