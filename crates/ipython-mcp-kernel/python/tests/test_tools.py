"""Tests of the helper's dynamic tools: schema generation, the catalog and its reconciliation,
and calls.

Most tests drive the RPC methods (``register_tool``, ``unregister_tool``, ``tool_catalog``,
``call_tool``, ``reset``) through ``handle_request`` with a fake installation around a plain
dict namespace, as test_namespace.py does; a few run the same through a real kernel.

Run from the workspace root:  python -m pytest crates/ipython-mcp-kernel/python/tests -q
"""

import collections
import dataclasses
import functools
import hashlib
import inspect
import json
import sys
import types
import typing
from typing import Annotated, Any, Dict, FrozenSet, List, Literal, Optional, Set, Tuple, Union

import pytest

from harness import CONFIG as KERNEL_CONFIG
from harness import load_helper, needs_kernel

CONFIG = {
    "max_text_chars": 200,
    "text_head_chars": 40,
    "max_display_items": 20,
    "max_image_bytes": 1_048_576,
    "max_traceback_chars": 600,
    "max_string_chars": 201,
    "raw_forward_chars": 65536,
    "report_always": 1,
    "max_repr_chars": 40,
    "max_results": 20,
    "max_json_depth": 6,
}
# What the server sends with every register_tool.
RESERVED = ["execute", "list", "search", "inspect", "call_function", "register_tool", "unregister_tool"]
LIMITS = {"max_tool_name_chars": 64, "max_tool_description_chars": 1024, "max_dynamic_tools": 100}


class Fixture:
    """A fake installation around a plain dict namespace."""

    def __init__(self, helper, user_ns, hidden=None, namespace=None):
        config = dict(CONFIG)
        config["namespace"] = helper.namespace.validated_namespace(namespace)
        self.helper = helper
        self.user_ns = user_ns
        self.shell = types.SimpleNamespace(user_ns=user_ns, user_ns_hidden=hidden or {}, execution_count=3)
        helper.rpc.serve(
            types.SimpleNamespace(
                shell=self.shell,
                config=config,
                bindings=helper.namespace.configured_bindings(config["namespace"]),
                namespace_errors=[],
                info={"version": "1"},
            )
        )

    def call(self, method, **params):
        reply = self.helper.rpc.handle_request({"id": "t", "method": method, "params": params})
        json.dumps(reply, allow_nan=False)  # every reply is JSON as it stands
        return reply

    def ok(self, method, **params):
        reply = self.call(method, **params)
        assert reply["ok"] is True, reply
        return reply["result"]

    def error(self, method, **params):
        reply = self.call(method, **params)
        assert reply["ok"] is False, reply
        return reply["error"]

    def register(self, name, **params):
        params = dict(LIMITS, reserved_names=RESERVED, **params)
        return self.ok("register_tool", name=name, **params)["registration"]

    def register_error(self, name, **params):
        params = dict(LIMITS, reserved_names=RESERVED, **params)
        return self.error("register_tool", name=name, **params)

    def catalog(self):
        return self.ok("tool_catalog")

    def liveness(self):
        """``({tool_name: reason or "live"}, changed)``."""
        result = self.catalog()
        return {tool["tool_name"]: tool["reason"] or "live" for tool in result["tools"]}, result["changed"]

    def call_tool(self, tool_name, **arguments):
        return self.ok("call_tool", tool_name=tool_name, arguments=arguments)

    def call_tool_error(self, tool_name, **arguments):
        return self.error("call_tool", tool_name=tool_name, arguments=arguments)


NO_DEFAULT = object()


def one_parameter(annotation, default=NO_DEFAULT, name="x"):
    """A function ``f(<name>: annotation [= default])`` that returns its argument."""
    namespace = {}
    exec("def f(%s):\n    return %s\n" % (name, name), namespace)
    function = namespace["f"]
    function.__annotations__ = {name: annotation}
    if default is not NO_DEFAULT:
        function.__defaults__ = (default,)
    return function


def schema_of(helper, annotation):
    """The schema ``annotation`` gets as the one required parameter ``x``."""
    schema = helper.tools.tool_signature(one_parameter(annotation)).schema
    assert schema["required"] == ["x"] and schema["additionalProperties"] is False, schema
    return schema["properties"]["x"]


def fingerprint(schema):
    text = json.dumps(schema, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


# --------------------------------------------------------------------------------------------
# Schema generation
# --------------------------------------------------------------------------------------------

INTEGER = {"type": "integer"}
STRING = {"type": "string"}
NUMBER = {"type": "number"}
BOOLEAN = {"type": "boolean"}
NULL = {"type": "null"}

SUPPORTED = [
    (str, STRING),
    (int, INTEGER),
    (float, NUMBER),
    (bool, BOOLEAN),
    (None, NULL),
    (type(None), NULL),
    (list[int], {"type": "array", "items": INTEGER}),
    (List[str], {"type": "array", "items": STRING}),
    (set[str], {"type": "array", "items": STRING, "uniqueItems": True}),
    (Set[int], {"type": "array", "items": INTEGER, "uniqueItems": True}),
    (frozenset[float], {"type": "array", "items": NUMBER, "uniqueItems": True}),
    (FrozenSet[bool], {"type": "array", "items": BOOLEAN, "uniqueItems": True}),
    (tuple[int, ...], {"type": "array", "items": INTEGER}),
    (Tuple[str, ...], {"type": "array", "items": STRING}),
    (
        tuple[int, str],
        {"type": "array", "prefixItems": [INTEGER, STRING], "items": False, "minItems": 2, "maxItems": 2},
    ),
    (
        Tuple[float, float, bool],
        {"type": "array", "prefixItems": [NUMBER, NUMBER, BOOLEAN], "items": False, "minItems": 3, "maxItems": 3},
    ),
    (tuple[int], {"type": "array", "prefixItems": [INTEGER], "items": False, "minItems": 1, "maxItems": 1}),
    (dict[str, float], {"type": "object", "additionalProperties": NUMBER}),
    (Dict[str, List[int]], {"type": "object", "additionalProperties": {"type": "array", "items": INTEGER}}),
    (Union[int, str], {"anyOf": [INTEGER, STRING]}),
    (Union[str, int], {"anyOf": [STRING, INTEGER]}),
    (Optional[str], {"anyOf": [STRING, NULL]}),
    (Union[None, int], {"anyOf": [NULL, INTEGER]}),
    (Literal["a", 1, True, None], {"enum": ["a", 1, True, None]}),
    (Literal["only"], {"enum": ["only"]}),
    (Optional[Literal["x", "y"]], {"anyOf": [{"enum": ["x", "y"]}, NULL]}),
    (Annotated[int, "metadata is ignored"], INTEGER),
    (
        list[dict[str, tuple[int, Optional[str]]]],
        {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": {
                    "type": "array",
                    "prefixItems": [INTEGER, {"anyOf": [STRING, NULL]}],
                    "items": False,
                    "minItems": 2,
                    "maxItems": 2,
                },
            },
        },
    ),
    (set[tuple[int, str]], {
        "type": "array",
        "items": {"type": "array", "prefixItems": [INTEGER, STRING], "items": False, "minItems": 2, "maxItems": 2},
        "uniqueItems": True,
    }),
    (frozenset[frozenset[int]], {
        "type": "array", "items": {"type": "array", "items": INTEGER, "uniqueItems": True}, "uniqueItems": True,
    }),
]
if sys.version_info >= (3, 10):
    SUPPORTED += [
        (eval("int | None"), {"anyOf": [INTEGER, NULL]}),
        (eval("list[int] | dict[str, int] | None"), {
            "anyOf": [{"type": "array", "items": INTEGER}, {"type": "object", "additionalProperties": INTEGER}, NULL],
        }),
    ]


@pytest.mark.parametrize("annotation, expected", SUPPORTED, ids=[repr(case[0]) for case in SUPPORTED])
def test_every_supported_annotation_has_its_exact_schema(helper, annotation, expected):
    assert schema_of(helper, annotation) == expected


class Custom:
    pass


T = typing.TypeVar("T")

UNSUPPORTED = [
    (list, "bare list (say list[T])"),
    (dict, "bare dict (say dict[str, T])"),
    (set, "bare set"),
    (frozenset, "bare frozenset"),
    (tuple, "bare tuple"),
    (List, "bare list"),
    (Dict, "bare dict"),
    (Any, "Any has no JSON type"),
    (object, "object has no JSON type"),
    (Custom, "test_tools.Custom is not supported"),
    (bytes, "bytes is not supported"),
    (complex, "complex is not supported"),
    (dict[int, str], "the key type must be str"),
    (dict[str], "dict[str] takes 2 type arguments"),
    (list[int, str], "list[int, str] takes 1 type argument"),
    (Dict[Tuple[int, int], str], "the key type must be str"),
    (set[list[int]], "set items must be hashable"),
    (frozenset[dict[str, int]], "set items must be hashable"),
    (list[Custom], "test_tools.Custom is not supported"),
    (Optional[Custom], "test_tools.Custom is not supported"),
    (Literal[1.5], "Literal value 1.5 is a float"),
    (Literal[b"x"], "Literal value b'x' is a bytes"),
    (Literal[2**70], "outside the 64-bit range"),
    (list["Later"], "the forward reference 'Later' is not resolved"),
    (T, "~T is not supported"),
    (typing.Callable[[int], int], "is not supported"),
    (collections.OrderedDict, "is not supported"),
    (typing.Sequence[int], "is not supported"),
]


@pytest.mark.parametrize("annotation, reason", UNSUPPORTED, ids=[repr(case[0]) for case in UNSUPPORTED])
def test_unsupported_annotations_are_rejected_naming_parameter_and_reason(helper, annotation, reason):
    fixture = Fixture(helper, {"f": one_parameter(annotation, name="amount")})
    error = fixture.register_error("f")
    assert error["code"] == "unsupported_signature"
    assert "parameter 'amount': " in error["message"] and reason in error["message"], error["message"]
    assert fixture.catalog() == {"tools": [], "changed": False}


def test_input_schema_layout_order_and_defaults(helper):
    def f(a: int, b: str = "x", *, c: float, d: Optional[List[int]] = None) -> "ignored":
        return a

    schema = helper.tools.tool_signature(f).schema
    assert schema == {
        "type": "object",
        "properties": {
            "a": INTEGER,
            "b": {"type": "string", "default": "x"},
            "c": NUMBER,
            "d": {"anyOf": [{"type": "array", "items": INTEGER}, NULL], "default": None},
        },
        "required": ["a", "c"],
        "additionalProperties": False,
    }
    assert list(schema["properties"]) == ["a", "b", "c", "d"]  # signature order

    def nothing_required(a: int = 1):
        return a

    def no_parameters():
        return 1

    # "required" is left out when no parameter is required.
    assert helper.tools.tool_signature(nothing_required).schema == {
        "type": "object",
        "properties": {"a": {"type": "integer", "default": 1}},
        "additionalProperties": False,
    }
    assert helper.tools.tool_signature(no_parameters).schema == {
        "type": "object",
        "properties": {},
        "additionalProperties": False,
    }


JSON_DEFAULTS = [
    (int, 3, 3),
    (int, -(2**63), -(2**63)),
    (int, 2**64 - 1, 2**64 - 1),
    (float, 0.5, 0.5),
    (float, 2, 2),  # an int is a valid float argument: kept as written
    (str, "é ☃", "é ☃"),
    (bool, False, False),
    (Optional[int], None, None),
    (list[int], (1, 2), [1, 2]),
    (tuple[int, str], (1, "a"), [1, "a"]),
    (tuple[int, ...], (), []),
    (set[str], {"b", "a", "c"}, ["a", "b", "c"]),
    (frozenset[int], frozenset({3, 1, 2}), [1, 2, 3]),
    (frozenset[int], frozenset(), []),
    (dict[str, list[int]], {"k": [1], "j": []}, {"k": [1], "j": []}),
    (Literal["a", "b"], "b", "b"),
    (Union[int, str], "x", "x"),
]


@pytest.mark.parametrize("annotation, default, expected", JSON_DEFAULTS)
def test_defaults_are_advertised_as_their_exact_json(helper, annotation, default, expected):
    schema = helper.tools.tool_signature(one_parameter(annotation, default)).schema
    assert "required" not in schema
    prop = schema["properties"]["x"]
    assert prop["default"] == expected and type(prop["default"]) is type(expected)
    assert prop == dict(schema_of(helper, annotation), default=expected)


NON_JSON_DEFAULTS = [
    (Optional[int], object(), "the default is a object, which is not JSON"),
    (float, float("nan"), "the float nan, which JSON cannot represent"),
    (float, float("inf"), "the float inf"),
    (int, 2**64, "outside the 64-bit range"),
    (int, -(2**63) - 1, "outside the 64-bit range"),
    (dict[str, int], {1: 2}, "a dict with a int key"),
    (set[Union[int, str]], {1, "a"}, "a set whose items cannot be sorted"),
    (str, "\ud800", "lone surrogates"),
    (list[int], [object()], "the default is a object"),
    (bytes, b"x", "bytes is not supported"),  # the annotation is checked first
]


@pytest.mark.parametrize("annotation, default, reason", NON_JSON_DEFAULTS)
def test_non_json_defaults_are_rejected_naming_the_parameter(helper, annotation, default, reason):
    fixture = Fixture(helper, {"f": one_parameter(annotation, default, name="limit")})
    error = fixture.register_error("f")
    assert error["code"] == "unsupported_signature"
    assert "parameter 'limit': " in error["message"] and reason in error["message"], error["message"]


MISMATCHED_DEFAULTS = [
    (int, None, "the default null does not match the annotation int"),
    (int, True, "the default true does not match the annotation int"),
    (int, 1.5, "the default 1.5 does not match"),
    (str, 1, "the default 1 does not match the annotation str"),
    (Literal["a", "b"], "c", 'the default "c" does not match'),
    (Literal[1], True, "the default true does not match"),
    (tuple[int, int], (1,), "the default [1] does not match the annotation tuple[int, int]"),
    (set[int], [1, 1], "the default [1, 1] does not match"),
]


@pytest.mark.parametrize("annotation, default, reason", MISMATCHED_DEFAULTS)
def test_defaults_that_do_not_match_their_annotation_are_rejected(helper, annotation, default, reason):
    fixture = Fixture(helper, {"f": one_parameter(annotation, default, name="count")})
    error = fixture.register_error("f")
    assert error["code"] == "unsupported_signature"
    assert "parameter 'count': " in error["message"] and reason in error["message"], error["message"]


def test_fingerprint_is_sha256_of_sorted_compact_utf8_json(helper):
    def f(a: int, b: str = "é"):
        return a

    registration = Fixture(helper, {"f": f}).register("f")
    schema = registration["input_schema"]
    assert registration["fingerprint"] == fingerprint(schema) == helper.tools.schema_fingerprint(schema)
    # A golden value, so the Rust side can check its own recipe against the same bytes:
    # {"additionalProperties":false,"properties":{"a":{"type":"integer"},"b":{"default":"é","type":"string"}},
    #  "required":["a"],"type":"object"} (é as the two UTF-8 bytes c3 a9, not \u00e9).
    assert registration["fingerprint"] == "271306de9cd0e857346172c9795bb7e6757d0ea6ab32126badf36279770c181d"
    # Key order of the dict does not matter; any difference in content does.
    reordered = {key: schema[key] for key in reversed(list(schema))}
    assert helper.tools.schema_fingerprint(reordered) == registration["fingerprint"]
    assert helper.tools.schema_fingerprint(dict(schema, required=[])) != registration["fingerprint"]


# --------------------------------------------------------------------------------------------
# Parameters and callables that cannot be tools
# --------------------------------------------------------------------------------------------


def positional_only(a: int, /, b: int):
    return a


def star_args(a: int, *rest: int):
    return a


def star_kwargs(a: int, **options: int):
    return a


def unannotated(a: int, b=1):
    return a


async def coroutine_function(a: int):
    return a


def generator_function(a: int):
    yield a


async def async_generator_function(a: int):
    yield a


class AsyncCall:
    async def __call__(self, a: int):
        return a


class GeneratorCall:
    def __call__(self, a: int):
        yield a


class HostileSignature:
    @property
    def __signature__(self):
        raise RuntimeError("no signature for you")

    def __call__(self, a: int):
        return a


REJECTED_CALLABLES = [
    (positional_only, "parameter 'a' is positional-only"),
    (star_args, "parameter '*rest' (*args) is not supported"),
    (star_kwargs, "parameter '**options' (**kwargs) is not supported"),
    (unannotated, "parameter 'b' has no annotation"),
    (coroutine_function, "it is a coroutine function (async def)"),
    (generator_function, "it is a generator function"),
    (async_generator_function, "it is an async generator function"),
    (functools.partial(coroutine_function), "it is a coroutine function"),
    (AsyncCall(), "its __call__ is a coroutine function"),
    (GeneratorCall(), "its __call__ is a generator function"),
    (len, "parameter 'obj' is positional-only"),
    (HostileSignature(), "reading its signature raised RuntimeError: no signature for you"),
    (functools.partial(unannotated, 1), "parameter 'b' has no annotation"),
]


@pytest.mark.parametrize("value, reason", REJECTED_CALLABLES, ids=[repr(case[1]) for case in REJECTED_CALLABLES])
def test_unsupported_callables_are_rejected_with_the_reason(helper, value, reason):
    fixture = Fixture(helper, {"f": value})
    error = fixture.register_error("f")
    assert error["code"] == "unsupported_signature"
    assert error["message"].startswith("'f' cannot be a tool: ") and reason in error["message"], error["message"]
    assert fixture.catalog()["tools"] == []


class BadSignature:
    __signature__ = 3  # not a Signature: inspect raises TypeError

    def __call__(self, a: int):
        return a


class Breaks:
    """An object that breaks the helper's own inspection: its class lookup raises."""

    @property
    def __class__(self):
        raise RuntimeError("no class")

    def __call__(self, a: int):
        return a


def test_a_broken_binding_is_one_stale_tool_not_a_failed_catalog(helper):
    fixture = Fixture(helper, {"add": make_adder(), "other": make_adder()})
    fixture.register("add")
    fixture.register("other")
    for broken, reason in (
        (HostileSignature(), "no longer supported: reading its signature raised RuntimeError: no signature for you"),
        (BadSignature(), "no longer supported: inspect cannot read its signature: "),
    ):
        fixture.user_ns["add"] = broken
        tools, _ = fixture.liveness()
        assert tools["other"] == "live" and tools["add"].startswith(reason), tools
        assert fixture.call_tool_error("add", a=1)["code"] == "stale_registration"
    fixture.user_ns["breaks"] = Breaks()
    assert fixture.register_error("breaks") == {
        "code": "unsupported_signature",
        "message": "'breaks' cannot be a tool: reading its signature raised RuntimeError: no class",
    }


def test_bound_methods_and_callable_objects(helper):
    class Counter:
        """Counts."""

        def __init__(self):
            self.total = 0

        def add(self, step: int = 1) -> int:
            """Adds a step."""
            self.total += step
            return self.total

        def __call__(self, *, reset: bool) -> int:
            if reset:
                self.total = 0
            return self.total

    counter = Counter()
    fixture = Fixture(helper, {"add": counter.add, "counter": counter})
    assert fixture.register("add")["input_schema"]["properties"] == {"step": {"type": "integer", "default": 1}}
    assert fixture.register("counter")["description"] == "Counts."
    assert fixture.call_tool("add", step=2)["result"] == 2
    assert fixture.call_tool("add")["result"] == 3
    assert fixture.call_tool("counter", reset=True)["result"] == 0
    assert fixture.call_tool_error("counter")["message"] == "tool 'counter': missing required argument 'reset'"

    def add(self, step: int = 1, twice: bool = False):
        return 0

    Counter.add = add  # the bound method already in the namespace keeps the old function
    assert fixture.liveness() == ({"add": "live", "counter": "live"}, False)
    fixture.user_ns["add"] = counter.add
    assert fixture.liveness() == ({"add": "signature changed", "counter": "live"}, True)

    def call(self, *, reset: bool, hard: bool = False):
        return 0

    Counter.__call__ = call  # same object, its class's __call__ changed: seen by the token
    assert fixture.liveness()[0]["counter"] == "signature changed"


# --------------------------------------------------------------------------------------------
# String annotations
# --------------------------------------------------------------------------------------------

FUTURE_MODULE = '''
from __future__ import annotations
import dataclasses
import typing

Alias = typing.List[int]

def future(a: int, b: Alias = (), c: typing.Optional[str] = None, d: typing.Literal["x", "y"] = "x"):
    """Uses postponed annotations."""
    return [a, list(b), c, d]

class Built:
    def __init__(self, size: int, tags: typing.FrozenSet[str] = frozenset()):
        self.size = size

@dataclasses.dataclass
class Point:
    x: float
    y: float = 0.0

def broken(a: int, b: Missing = None):
    return a
'''

PLAIN_MODULE = '''
import typing

def quoted(a: "int", b: "typing.Optional[typing.List[str]]" = None):
    return a

def quoted_missing(a: "Nowhere"):
    return a

def quoted_syntax(a: "int +"):
    return a
'''


_MODULE_NUMBERS = iter(range(1_000_000))


def exec_module(source):
    """The globals of a fresh module made from ``source`` (in sys.modules, as dataclasses with
    string annotations need)."""
    module = types.ModuleType("tools_test_module_%d" % next(_MODULE_NUMBERS))
    sys.modules[module.__name__] = module
    exec(compile(source, "<%s>" % module.__name__, "exec"), module.__dict__)
    return module.__dict__


@pytest.fixture(params=["eval_str", "per_parameter"])
def resolving_helper(request):
    """The helper as Python >= 3.10 runs it (inspect's eval_str), and as 3.9 does (each string
    evaluated in the function's globals)."""
    helper = load_helper()
    helper.tools._SIGNATURE_EVAL_STR = request.param == "eval_str"
    return helper


def test_postponed_annotations_are_resolved(resolving_helper):
    helper = resolving_helper
    module = exec_module(FUTURE_MODULE)
    assert helper.tools.tool_signature(module["future"]).schema == {
        "type": "object",
        "properties": {
            "a": INTEGER,
            "b": {"type": "array", "items": INTEGER, "default": []},
            "c": {"anyOf": [STRING, NULL], "default": None},
            "d": {"enum": ["x", "y"], "default": "x"},
        },
        "required": ["a"],
        "additionalProperties": False,
    }
    assert helper.tools.tool_signature(module["Built"]).schema == {
        "type": "object",
        "properties": {
            "size": INTEGER,
            "tags": {"type": "array", "items": STRING, "uniqueItems": True, "default": []},
        },
        "required": ["size"],
        "additionalProperties": False,
    }
    assert helper.tools.tool_signature(module["Point"]).schema["properties"] == {
        "x": NUMBER,
        "y": {"type": "number", "default": 0.0},
    }
    plain = exec_module(PLAIN_MODULE)
    assert helper.tools.tool_signature(plain["quoted"]).schema["properties"] == {
        "a": INTEGER,
        "b": {"anyOf": [{"type": "array", "items": STRING}, NULL], "default": None},
    }


@pytest.mark.parametrize(
    "module, name, message",
    [
        (FUTURE_MODULE, "broken", "cannot resolve annotation 'Missing' of parameter 'b': NameError: name 'Missing' is not defined"),
        (PLAIN_MODULE, "quoted_missing", "cannot resolve annotation 'Nowhere' of parameter 'a': NameError"),
        (PLAIN_MODULE, "quoted_syntax", "cannot resolve annotation 'int +' of parameter 'a': SyntaxError"),
    ],
)
def test_unresolvable_annotations_name_the_parameter(resolving_helper, module, name, message):
    fixture = Fixture(resolving_helper, exec_module(module))
    error = fixture.register_error(name)
    assert error["code"] == "unsupported_signature"
    assert message in error["message"], error["message"]


def test_string_annotations_are_re_evaluated_on_every_catalog(helper):
    """A string annotation is evaluated in globals that can change, so it never takes the
    cheap path: rebinding an alias it names changes the schema, which is noticed."""
    module = exec_module(FUTURE_MODULE)
    fixture = Fixture(helper, module)
    fixture.register("future")
    assert fixture.liveness() == ({"future": "live"}, False)
    module["Alias"] = typing.List[str]
    assert fixture.liveness() == ({"future": "signature changed"}, True)
    module["Alias"] = typing.List[int]
    assert fixture.liveness() == ({"future": "live"}, True)
    del module["Alias"]
    tools, changed = fixture.liveness()
    assert changed is True
    assert tools["future"].startswith(
        "no longer supported: cannot resolve annotation 'Alias' of parameter 'b': NameError"
    ), tools


# --------------------------------------------------------------------------------------------
# Classes, partials, wrappers
# --------------------------------------------------------------------------------------------


class Plain(dict):
    """A plain class.

    Its __init__ has the parameters."""

    def __init__(self, size: int, label: str = "box"):
        super().__init__(size=size, label=label)


class FromNew(dict):
    def __new__(cls, count: int, *, unit: Literal["m", "s"] = "m"):
        return dict.__new__(cls)

    def __init__(self, *args, **kwargs):
        super().__init__(kwargs)


class Meta(type):
    def __call__(cls, size: int, *, label: Optional[str] = None):
        return {"made": cls.__name__, "size": size, "label": label}


class Made(metaclass=Meta):
    def __init__(self, ignored: bytes):
        raise AssertionError("the metaclass __call__ decides")


@dataclasses.dataclass
class Data:
    name: str
    tags: List[str] = dataclasses.field(default_factory=list)
    weight: float = 1.0


class NoInit:
    pass


def test_class_constructors(helper):
    def props(value):
        schema = helper.tools.tool_signature(value).schema
        return schema["properties"], schema.get("required", [])

    assert props(Plain) == ({"size": INTEGER, "label": {"type": "string", "default": "box"}}, ["size"])
    assert props(FromNew) == ({"count": INTEGER, "unit": {"enum": ["m", "s"], "default": "m"}}, ["count"])
    assert props(Made) == ({"size": INTEGER, "label": {"anyOf": [STRING, NULL], "default": None}}, ["size"])
    # A default_factory is not a default inspect can show: the parameter's default is a sentinel.
    error = Fixture(helper, {"Data": Data}).register_error("Data")
    assert error["code"] == "unsupported_signature" and "parameter 'tags'" in error["message"], error
    assert props(dataclasses.dataclass(type("Simple", (), {"__annotations__": {"a": int, "b": str}, "b": "x"}))) == (
        {"a": INTEGER, "b": {"type": "string", "default": "x"}},
        ["a"],
    )
    assert props(NoInit) == ({}, [])

    fixture = Fixture(helper, {"Plain": Plain, "Made": Made, "NoInit": NoInit})
    registration = fixture.register("Plain", tool_name="make_plain")
    assert registration["description"] == "A plain class."
    assert fixture.call_tool("make_plain", size=2) == {"result": {"size": 2, "label": "box"}, "truncated": False}
    fixture.register("Made")
    assert fixture.call_tool("Made", size=1, label="l") == {
        "result": {"made": "Made", "size": 1, "label": "l"},
        "truncated": False,
    }
    no_init = fixture.register("NoInit")
    assert no_init["description"] == (
        "Calls the Python class `NoInit` in the kernel (constructs an instance) and returns the result as JSON."
    )
    error = fixture.call_tool_error("NoInit")
    assert error["code"] == "result_not_json" and "test_tools.NoInit" in error["message"], error


def test_changing_a_class_constructor_in_place_makes_it_stale(helper):
    class Shape(dict):
        def __init__(self, sides: int):
            super().__init__(sides=sides)

    fixture = Fixture(helper, {"Shape": Shape})
    fixture.register("Shape")

    def same_signature(self, sides: int):
        dict.__init__(self, sides=sides * 10)

    Shape.__init__ = same_signature  # a body-only change of the same class: still live
    assert fixture.liveness() == ({"Shape": "live"}, False)
    assert fixture.call_tool("Shape", sides=3)["result"] == {"sides": 30}

    def new_signature(self, sides: int, closed: bool = True):
        dict.__init__(self, sides=sides)

    Shape.__init__ = new_signature
    assert fixture.liveness() == ({"Shape": "signature changed"}, True)
    error = fixture.call_tool_error("Shape", sides=3)
    assert (error["code"], error["reason"]) == ("stale_registration", "signature changed")

    Shape.__init__ = same_signature
    assert fixture.liveness() == ({"Shape": "live"}, True)
    # A __new__ added to the class decides the signature too.
    Shape.__new__ = staticmethod(lambda cls, sides: dict.__new__(cls))
    tools, changed = fixture.liveness()
    assert changed and tools["Shape"].startswith("no longer supported: parameter 'sides' has no annotation"), tools


def base(a: int, b: int = 2, *, c: str = "c"):
    """Combines things."""
    return [a, b, c]


def test_partials(helper):
    first = functools.partial(base, 1)
    keyword = functools.partial(base, b=5)
    nested = functools.partial(functools.partial(base, c="z"), 7)
    fixture = Fixture(helper, {"first": first, "keyword": keyword, "nested": nested})
    assert fixture.register("first")["input_schema"] == {
        "type": "object",
        "properties": {"b": {"type": "integer", "default": 2}, "c": {"type": "string", "default": "c"}},
        "additionalProperties": False,
    }
    # A keyword bound by the partial stays a (keyword-only) parameter with that default.
    keyword_schema = fixture.register("keyword")["input_schema"]
    assert keyword_schema["properties"]["b"] == {"type": "integer", "default": 5}
    assert keyword_schema["required"] == ["a"]
    assert fixture.register("nested", description="Nested.")["input_schema"]["properties"] == {
        "b": {"type": "integer", "default": 2},
        "c": {"type": "string", "default": "z"},
    }
    assert fixture.call_tool("first", c="x")["result"] == [1, 2, "x"]
    assert fixture.call_tool("keyword", a=0)["result"] == [0, 5, "c"]
    assert fixture.call_tool("nested")["result"] == [7, 2, "z"]
    # Descriptions come from the wrapped function's docstring, not functools.partial's.
    assert fixture.catalog()["tools"][0]["description"] == "Combines things."


def test_partial_goes_stale_when_the_function_it_holds_changes(helper):
    def target(a: int, b: int = 2):
        return a + b

    bound = functools.partial(target, 1)
    fixture = Fixture(helper, {"bound": bound})
    fixture.register("bound")
    assert fixture.liveness() == ({"bound": "live"}, False)
    target.__defaults__ = (3,)  # same partial object, same function object: a new default
    assert fixture.liveness() == ({"bound": "signature changed"}, True)
    target.__defaults__ = (2,)
    assert fixture.liveness() == ({"bound": "live"}, True)
    target.__annotations__["b"] = float
    assert fixture.liveness() == ({"bound": "signature changed"}, True)


def decorate(function):
    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        return ["wrapped", function(*args, **kwargs)]

    return wrapper


def test_wrapped_functions_follow_the_wrapped_signature(helper):
    @decorate
    def scaled(value: float, factor: float = 2.0):
        """Scales a value."""
        return value * factor

    fixture = Fixture(helper, {"scaled": scaled})
    registration = fixture.register("scaled")
    assert registration["input_schema"] == {
        "type": "object",
        "properties": {"value": NUMBER, "factor": {"type": "number", "default": 2.0}},
        "required": ["value"],
        "additionalProperties": False,
    }
    assert registration["description"] == "Scales a value."
    assert fixture.call_tool("scaled", value=3)["result"] == ["wrapped", 6.0]

    # Redecorated with a new body and the same signature: live, the new body runs.
    @decorate
    def scaled(value: float, factor: float = 2.0):
        """A new docstring does not change the registered description."""
        return value * factor + 1

    fixture.user_ns["scaled"] = scaled
    assert fixture.liveness() == ({"scaled": "live"}, False)
    assert fixture.call_tool("scaled", value=3)["result"] == ["wrapped", 7.0]
    assert fixture.catalog()["tools"][0]["description"] == "Scales a value."

    # The wrapped function changes in place (same wrapper object): stale.
    scaled.__wrapped__.__defaults__ = (3.0,)
    assert fixture.liveness() == ({"scaled": "signature changed"}, True)
    scaled.__wrapped__.__defaults__ = (2.0,)
    assert fixture.liveness() == ({"scaled": "live"}, True)

    # The wrapper is pointed at another function: stale.
    def other(value: float):
        return value

    scaled.__wrapped__ = other
    assert fixture.liveness() == ({"scaled": "signature changed"}, True)


def test_unchanged_bindings_take_the_cheap_path(helper, monkeypatch):
    """Same object + same signature token: the schema is not generated again."""
    calls = []
    real = helper.tools.tool_signature

    def counting(value):
        calls.append(value)
        return real(value)

    def f(a: int, b: Tuple[int, int] = (1, 2)):
        return a

    class Callable:
        def __call__(self, a: int):
            return a

    fixture = Fixture(helper, {
        "f": f, "p": functools.partial(f, b=(3, 4)), "w": decorate(f), "C": Plain, "m": Made, "o": Callable(),
        "bound": Callable().__call__,
    })
    for name in list(fixture.user_ns):
        fixture.register(name)
    monkeypatch.setattr(helper.tools, "tool_signature", counting)
    assert fixture.liveness()[0] == dict.fromkeys(["C", "bound", "f", "m", "o", "p", "w"], "live")
    assert calls == []

    def f(a: int, b: Tuple[int, int] = (1, 2)):  # body-only redefinition: regenerated once
        return -a

    fixture.user_ns["f"] = f
    assert fixture.liveness() == (dict.fromkeys(["C", "bound", "f", "m", "o", "p", "w"], "live"), False)
    assert calls == [f]
    calls.clear()
    assert fixture.call_tool("f", a=1)["result"] == -1
    assert calls == []  # the new object and its token are what the cheap path compares now

    def mutable_default(a: List[int] = []):
        return a

    fixture.user_ns["mutable"] = mutable_default
    fixture.register("mutable")
    calls.clear()
    fixture.catalog()
    assert calls == [mutable_default]  # a mutable default can change in place: no cheap path
    mutable_default.__defaults__[0].append(1)
    assert fixture.liveness()[0]["mutable"] == "signature changed"


# --------------------------------------------------------------------------------------------
# Liveness, staleness, re-registration
# --------------------------------------------------------------------------------------------


def make_adder():
    def add(a: int, b: int = 1) -> int:
        """Adds two numbers.

        A second paragraph.
        """
        return a + b

    return add


def test_register_returns_the_registration(helper):
    fixture = Fixture(helper, {"add": make_adder()})
    registration = fixture.register("add")
    schema = {
        "type": "object",
        "properties": {"a": INTEGER, "b": {"type": "integer", "default": 1}},
        "required": ["a"],
        "additionalProperties": False,
    }
    assert registration == {
        "tool_name": "add",
        "name": "add",
        "description": "Adds two numbers.",
        "input_schema": schema,
        "fingerprint": fingerprint(schema),
    }
    assert fixture.catalog() == {"tools": [dict(registration, live=True, reason=None)], "changed": False}
    assert fixture.call_tool("add", a=2) == {"result": 3, "truncated": False}


def test_body_change_stays_live_signature_change_and_deletion_go_stale(helper):
    fixture = Fixture(helper, {"add": make_adder()})
    registered = fixture.register("add", tool_name="adder")

    def add(a: int, b: int = 1) -> str:  # new body, new return annotation, new docstring
        """Something else entirely."""
        return "%d" % (a * b)

    fixture.user_ns["add"] = add
    assert fixture.liveness() == ({"adder": "live"}, False)
    assert fixture.call_tool("adder", a=4, b=5)["result"] == "20"

    def add(a: int, b: int = 2):  # changed default
        return a

    fixture.user_ns["add"] = add
    assert fixture.liveness() == ({"adder": "signature changed"}, True)
    error = fixture.call_tool_error("adder", a=1)
    assert error == {
        "code": "stale_registration",
        "message": "tool 'adder' is stale (signature changed); call register_tool for 'add' again to publish its "
        "current signature",
        "reason": "signature changed",
    }

    def add(a: int, b: int = 1, c: int = 0):  # a new parameter, even with a default
        return a

    fixture.user_ns["add"] = add
    assert fixture.liveness() == ({"adder": "signature changed"}, False)

    def add(a: int, c: int = 1):  # renamed parameter
        return a

    fixture.user_ns["add"] = add
    assert fixture.liveness()[0] == {"adder": "signature changed"}
    fixture.user_ns["add"] = 42
    assert fixture.liveness()[0] == {"adder": "not callable"}
    del fixture.user_ns["add"]
    assert fixture.liveness()[0] == {"adder": "deleted"}
    assert fixture.call_tool_error("adder", a=1)["reason"] == "deleted"

    # The stale registration still shows what was registered.
    (entry,) = fixture.catalog()["tools"]
    assert entry == dict(registered, live=False, reason="deleted")

    # Registering the same pair again renews it with the current signature.
    fixture.user_ns["add"] = add
    renewed = fixture.register("add", tool_name="adder")
    assert renewed["input_schema"]["properties"] == {"a": INTEGER, "c": {"type": "integer", "default": 1}}
    assert renewed["fingerprint"] != registered["fingerprint"]
    assert renewed["description"] == "Calls the Python function `add` in the kernel and returns its result as JSON."
    assert fixture.liveness() == ({"adder": "live"}, False)
    assert fixture.call_tool("adder", a=5)["result"] == 5


def test_remove_makes_a_registration_stale(helper):
    fixture = Fixture(helper, {"add": make_adder()})
    fixture.register("add")
    assert fixture.ok("remove", names=["add"])["removed"] == ["add"]
    assert fixture.liveness() == ({"add": "deleted"}, True)


def test_a_binding_back_to_the_registered_schema_is_live_again(helper):
    """Liveness depends only on the namespace (the registered schema is the contract)."""
    original = make_adder()
    fixture = Fixture(helper, {"add": original})
    fixture.register("add")
    del fixture.user_ns["add"]
    assert fixture.liveness() == ({"add": "deleted"}, True)
    fixture.user_ns["add"] = make_adder()
    assert fixture.liveness() == ({"add": "live"}, True)


def test_changed_flag_semantics(helper):
    fixture = Fixture(helper, {"add": make_adder(), "other": make_adder()})
    assert fixture.liveness() == ({}, False)
    fixture.register("add")
    # register_tool's answer told the server about the new tool: nothing changed since.
    assert fixture.liveness() == ({"add": "live"}, False)
    fixture.register("other")
    fixture.ok("unregister_tool", names=["other"])
    assert fixture.liveness() == ({"add": "live"}, False)
    # A stale entry is a change once, then not again while it stays stale.
    fixture.user_ns["add"] = lambda: 0
    assert fixture.liveness() == ({"add": "signature changed"}, True)
    assert fixture.liveness() == ({"add": "signature changed"}, False)
    # A different stale reason is not a change of liveness.
    del fixture.user_ns["add"]
    assert fixture.liveness() == ({"add": "deleted"}, False)
    # call_tool finding it stale does not count as telling: the next catalog still reports
    # the change since the latest catalog answer.
    fixture.user_ns["add"] = make_adder()
    assert fixture.call_tool("add", a=1)["result"] == 2
    assert fixture.liveness() == ({"add": "live"}, True)
    del fixture.user_ns["add"]
    assert fixture.call_tool_error("add", a=1)["code"] == "stale_registration"
    assert fixture.liveness() == ({"add": "deleted"}, True)
    # Renewing a stale registration is told by register_tool's answer.
    fixture.user_ns["add"] = lambda a: a
    tools, changed = fixture.liveness()
    assert tools["add"].startswith("no longer supported: parameter 'a' has no annotation") and changed is False

    def add(a: int, b: int = 1, c: int = 2):
        return a + b + c

    fixture.user_ns["add"] = add
    assert fixture.register("add")["input_schema"]["properties"]["c"] == {"type": "integer", "default": 2}
    assert fixture.liveness() == ({"add": "live"}, False)
    assert fixture.ok("reset")["tools_dropped"] == 1
    assert fixture.liveness() == ({}, False)


# --------------------------------------------------------------------------------------------
# Registration checks and conflicts
# --------------------------------------------------------------------------------------------


def test_backing_name_checks(helper):
    hidden = {"In": [], "shown": make_adder()}
    user_ns = dict(hidden, add=make_adder(), value=3, _private=make_adder(), js=json.dumps)
    fixture = Fixture(helper, user_ns, hidden, namespace={"module_aliases": {"json": "js"}})
    for name in ("json.dumps", "1x", "", "a-b", "class", 3, None):
        error = fixture.register_error(name)
        assert error["code"] == "invalid_name", (name, error)
    assert "top-level identifier" in fixture.register_error("add.__call__")["message"]
    for name in ("_private", "_missing", "In", "get_ipython", "js", "shown"):
        error = fixture.register_error(name)
        assert error["code"] == "protected_name" and repr(name) in error["message"], (name, error)
    fixture.user_ns["shown"] = make_adder()  # a hidden name the user rebound is the user's
    assert fixture.register("shown")["name"] == "shown"
    assert fixture.register_error("missing") == {
        "code": "name_not_found",
        "message": "name 'missing' is not defined in the namespace",
    }
    assert fixture.register_error("value") == {"code": "not_callable", "message": "'value' is not callable (it is a int)"}


def test_tool_name_checks(helper):
    fixture = Fixture(helper, {"add": make_adder(), "café": make_adder(), "x" * 70: make_adder()})
    for tool_name in ("9x", "_x", "-x", "a b", "a.b", "añ", "a\n", "", "x" * 65):
        error = fixture.register_error("add", tool_name=tool_name)
        assert error["code"] == "invalid_name" and "at most 64 characters" in error["message"], (tool_name, error)
    assert fixture.register("add", tool_name="x" * 64)["tool_name"] == "x" * 64
    assert fixture.register("add", tool_name="x" * 64, max_tool_name_chars=64)["tool_name"] == "x" * 64
    assert fixture.register_error("add", tool_name="toolong", max_tool_name_chars=5)["code"] == "invalid_name"
    # The default tool name is the backing name, which may not be a valid tool name.
    error = fixture.register_error("café")
    assert error["code"] == "invalid_name" and "pass tool_name to choose one" in error["message"], error
    assert fixture.register("café", tool_name="cafe")["tool_name"] == "cafe"
    assert fixture.register_error("x" * 70)["code"] == "invalid_name"
    assert fixture.register("x" * 70, tool_name="A-1_b")["tool_name"] == "A-1_b"


def test_conflicts_are_rejected_without_change(helper):
    fixture = Fixture(helper, {"add": make_adder(), "other": make_adder(), "execute": make_adder()})
    for reserved in ("execute", "register_tool"):
        error = fixture.register_error("add", tool_name=reserved)
        assert error == {
            "code": "registration_conflict",
            "message": "tool name %r is one of the server's own tools" % reserved,
        }
    assert fixture.register_error("execute")["code"] == "registration_conflict"  # tool name defaults to name
    assert fixture.register("execute", tool_name="run")["tool_name"] == "run"
    first = fixture.register("add", tool_name="adder")
    assert fixture.register_error("other", tool_name="adder") == {
        "code": "registration_conflict",
        "message": "tool name 'adder' is already registered for 'add'",
    }
    assert fixture.register_error("add", tool_name="add2") == {
        "code": "registration_conflict",
        "message": "'add' is already registered as tool 'adder' (unregister it first, or register it again under "
        "that name)",
    }
    # A stale holder still holds its names.
    del fixture.user_ns["add"]
    fixture.user_ns["add"] = lambda: 1
    assert fixture.register_error("add", tool_name="add2")["code"] == "registration_conflict"
    fixture.user_ns["add"] = make_adder()
    assert fixture.liveness() == ({"adder": "live", "run": "live"}, False)
    assert fixture.catalog()["tools"][0] == dict(first, live=True, reason=None)
    # The same pair again replaces the registration (here: a new description).
    again = fixture.register("add", tool_name="adder", description="Adds, again.")
    assert again == dict(first, description="Adds, again.")


def test_limit_exceeded(helper):
    fixture = Fixture(helper, {"a": make_adder(), "b": make_adder(), "c": make_adder()})
    fixture.register("a", max_dynamic_tools=2)
    fixture.register("b", max_dynamic_tools=2)
    error = fixture.register_error("c", max_dynamic_tools=2)
    assert error == {
        "code": "limit_exceeded",
        "message": "the catalog already has 2 dynamic tools, the limit (unregister one first)",
    }
    # Re-registering an existing pair does not need a new slot.
    assert fixture.register("a", max_dynamic_tools=2, description="new")["description"] == "new"
    fixture.ok("unregister_tool", names=["b"])
    assert fixture.register("c", max_dynamic_tools=2)["tool_name"] == "c"
    assert [tool["tool_name"] for tool in fixture.catalog()["tools"]] == ["a", "c"]


def test_check_order(helper):
    """Each check, in the documented order, wins over the later ones."""
    fixture = Fixture(helper, {"f": coroutine_function, "v": 1, "g": make_adder(), "h": make_adder()})
    # protected before name_not_found
    assert fixture.register_error("_nothing")["code"] == "protected_name"
    # not_callable before an invalid tool name
    assert fixture.register_error("v", tool_name="9")["code"] == "not_callable"
    # invalid tool name before reserved/conflict
    assert fixture.register_error("f", tool_name="9")["code"] == "invalid_name"
    fixture.register("g", max_dynamic_tools=1)
    # conflict before limit
    assert fixture.register_error("h", tool_name="g", max_dynamic_tools=1)["code"] == "registration_conflict"
    # limit before description and signature
    assert fixture.register_error("f", max_dynamic_tools=1, description="x" * 2000)["code"] == "limit_exceeded"
    # description before signature
    error = fixture.register_error("f", description="x" * 2000)
    assert error == {"code": "invalid_arguments", "message": "the description has 2000 characters; the limit is 1024"}
    assert fixture.register_error("f")["code"] == "unsupported_signature"
    assert [tool["tool_name"] for tool in fixture.catalog()["tools"]] == ["g"]


def test_descriptions(helper):
    def documented(a: int):
        """First   paragraph
        on two lines.

        Second paragraph.
        """
        return a

    def undocumented(a: int):
        return a

    fixture = Fixture(helper, {"documented": documented, "undocumented": undocumented})
    assert fixture.register("documented")["description"] == "First paragraph on two lines."
    assert fixture.register("undocumented")["description"] == (
        "Calls the Python function `undocumented` in the kernel and returns its result as JSON."
    )
    fixture.ok("unregister_tool", names=["documented", "undocumented"])
    # The default is bounded (cut with an ellipsis); an explicit one is checked, not cut.
    short = fixture.register("documented", max_tool_description_chars=10)["description"]
    assert short == "First par\u2026" and len(short) == 10
    fixture.ok("unregister_tool", names=["documented"])
    assert fixture.register("documented", description="Exactly ten", max_tool_description_chars=11)[
        "description"
    ] == "Exactly ten"
    assert fixture.register_error("undocumented", description="x" * 12, max_tool_description_chars=11)["code"] == (
        "invalid_arguments"
    )
    # A blank explicit description means the default.
    assert fixture.register("undocumented", description="  ")["description"].startswith("Calls the Python function")
    # Docstring changes do not touch the registered description.
    documented.__doc__ = "Changed."
    assert fixture.catalog()["tools"][0]["description"] == "Exactly ten"


def test_bad_request_params(helper):
    fixture = Fixture(helper, {"add": make_adder()})
    for params in (
        {"name": "add", "bogus": 1},
        {"name": "add", "max_dynamic_tools": 0},
        {"name": "add", "max_tool_name_chars": "64"},
        {"name": "add", "max_tool_description_chars": True},
        {"name": "add", "reserved_names": "execute"},
        {"name": "add", "reserved_names": [1]},
        {"name": "add", "tool_name": 3},
        {"name": "add", "description": ["x"]},
    ):
        assert fixture.error("register_tool", **params)["code"] == "invalid_request", params
    # The limits are optional: the documented defaults apply.
    assert fixture.ok("register_tool", name="add")["registration"]["tool_name"] == "add"
    assert fixture.error("tool_catalog", extra=1)["code"] == "invalid_request"
    assert fixture.error("unregister_tool", names="add")["code"] == "invalid_request"
    assert fixture.error("unregister_tool", names=[1])["code"] == "invalid_request"
    assert fixture.error("call_tool", tool_name="add", arguments={}, bogus=1)["code"] == "invalid_request"
    assert fixture.catalog()["tools"][0]["tool_name"] == "add"


def test_unregister_is_idempotent_and_sorted(helper):
    fixture = Fixture(helper, {"b": make_adder(), "a": make_adder()})
    fixture.register("b")
    fixture.register("a")
    assert fixture.ok("unregister_tool", names=["b", "zz", "a", "b", "execute"]) == {
        "unregistered": ["a", "b"],
        "unknown": ["execute", "zz", ],
    }
    assert fixture.ok("unregister_tool", names=["b", "a"]) == {"unregistered": [], "unknown": ["a", "b"]}
    assert fixture.ok("unregister_tool", names=[]) == {"unregistered": [], "unknown": []}
    assert fixture.catalog() == {"tools": [], "changed": False}
    assert fixture.call_tool_error("a")["code"] == "name_not_found"
    assert fixture.user_ns["a"](1) == 2  # the backing names are untouched


def test_reset_drops_the_catalog(helper):
    fixture = Fixture(helper, {"a": make_adder(), "b": make_adder()})
    fixture.register("a")
    fixture.register("b", tool_name="bee")
    assert fixture.ok("reset") == {"removed": ["a", "b"], "execution_count": 2, "tools_dropped": 2}
    assert fixture.catalog() == {"tools": [], "changed": False}
    assert fixture.ok("reset")["tools_dropped"] == 0
    fixture.user_ns["a"] = make_adder()
    assert fixture.register("a")["tool_name"] == "a"
    assert fixture.ok("reset")["tools_dropped"] == 1


# --------------------------------------------------------------------------------------------
# call_tool
# --------------------------------------------------------------------------------------------


class Recorder:
    """A namespace of annotated functions that record every call."""

    def __init__(self):
        self.calls = []

    def functions(self):
        calls = self.calls

        def scalars(s: str, i: int, f: float, b: bool, n: None = None):
            calls.append(("scalars", s, i, f, b, n))
            return [type(s).__name__, type(i).__name__, type(f).__name__, type(b).__name__, n]

        def containers(
            items: Set[int] = frozenset(),
            frozen: FrozenSet[str] = frozenset(),
            many: Tuple[float, ...] = (),
            pair: Tuple[int, str] = (0, ""),
            nested: Dict[str, List[Tuple[int, int]]] = {},
            unique_pairs: Set[Tuple[int, int]] = frozenset(),
        ):
            calls.append(("containers", items, frozen, many, pair, nested, unique_pairs))
            return [
                type(items).__name__, sorted(items), type(frozen).__name__, sorted(frozen),
                type(many).__name__, list(many), type(pair).__name__, list(pair),
                {key: [type(item).__name__ for item in value] for key, value in nested.items()},
                sorted(map(list, unique_pairs)),
            ]

        def choices(
            mode: Literal["fast", 1, True, None] = "fast",
            number: Union[float, int] = 0,
            text_or_number: Union[str, float] = "",
            maybe: Optional[List[int]] = None,
        ):
            calls.append(("choices", mode, number, text_or_number, maybe))
            return [mode, type(number).__name__, type(text_or_number).__name__, maybe]

        return {"scalars": scalars, "containers": containers, "choices": choices}


@pytest.fixture
def recorded(helper):
    recorder = Recorder()
    fixture = Fixture(helper, recorder.functions())
    for name in ("scalars", "containers", "choices"):
        fixture.register(name)
    fixture.calls = recorder.calls
    return fixture


def test_call_tool_converts_arguments_as_annotated(recorded):
    assert recorded.call_tool("scalars", s="x", i=1, f=2, b=False)["result"] == ["str", "int", "float", "bool", None]
    assert recorded.calls[-1] == ("scalars", "x", 1, 2.0, False, None)
    assert recorded.call_tool("scalars", s="x", i=-5, f=0.5, b=True, n=None)["result"][2] == "float"
    # JSON Schema counts 2.0 as an integer: the function still gets an int.
    assert recorded.call_tool("scalars", s="x", i=2.0, f=0.5, b=True)["result"][1] == "int"
    assert recorded.calls[-1][2] == 2 and type(recorded.calls[-1][2]) is int
    result = recorded.call_tool(
        "containers",
        items=[3, 1],
        frozen=["b", "a"],
        many=[1, 2.5],
        pair=[7, "seven"],
        nested={"k": [[1, 2], [3, 4]]},
        unique_pairs=[[1, 2], [2, 1]],
    )["result"]
    assert result == [
        "set", [1, 3], "frozenset", ["a", "b"], "tuple", [1.0, 2.5], "tuple", [7, "seven"],
        {"k": ["tuple", "tuple"]}, [[1, 2], [2, 1]],
    ]
    # Only the arguments given are passed; Python applies the defaults.
    assert recorded.call_tool("containers")["result"][:2] == ["frozenset", []]
    assert recorded.call_tool("choices", mode=1, number=1, text_or_number=1, maybe=[1])["result"] == [
        1, "int", "float", [1],
    ]
    assert recorded.call_tool("choices", mode=True, number=1.5)["result"][:2] == [True, "float"]
    assert recorded.call_tool("choices", mode=None, maybe=None)["result"] == [None, "int", "str", None]
    assert recorded.ok("call_tool", tool_name="choices")["result"] == ["fast", "int", "str", None]
    assert recorded.ok("call_tool", tool_name="choices", arguments=None)["result"][0] == "fast"


BAD_ARGUMENTS = [
    ("scalars", {"i": 1, "f": 1.0, "b": True}, "missing required argument 's'"),
    ("scalars", {"f": 1.0, "b": True}, "missing required argument 's', 'i'"),
    ("scalars", {"s": "", "i": 1, "f": 1.0, "b": True, "zz": 1, "aa": 2},
     "unknown argument 'aa', 'zz' (it takes: s, i, f, b, n)"),
    ("scalars", {"s": 1, "i": 1, "f": 1.0, "b": True}, "argument s: expected string, got integer"),
    ("scalars", {"s": "", "i": True, "f": 1.0, "b": True}, "argument i: expected integer, got boolean"),
    ("scalars", {"s": "", "i": 1.5, "f": 1.0, "b": True}, "argument i: expected integer, got number"),
    ("scalars", {"s": "", "i": float("inf"), "f": 1.0, "b": True}, "argument i: expected integer, got number"),
    ("scalars", {"s": "", "i": 1, "f": "1", "b": True}, "argument f: expected number, got string"),
    ("scalars", {"s": "", "i": 1, "f": True, "b": True}, "argument f: expected number, got boolean"),
    ("scalars", {"s": "", "i": 1, "f": 10**400, "b": True}, "argument f: the integer is too large for a float"),
    ("scalars", {"s": "", "i": 1, "f": 1.0, "b": 1}, "argument b: expected boolean, got integer"),
    ("scalars", {"s": "", "i": 1, "f": 1.0, "b": None}, "argument b: expected boolean, got null"),
    ("scalars", {"s": "", "i": 1, "f": 1.0, "b": True, "n": 0}, "argument n: expected null, got integer"),
    ("containers", {"items": [1, "2"]}, "argument items[1]: expected integer, got string"),
    ("containers", {"items": [1, 1]}, "argument items: the items must be unique (it is a set)"),
    ("containers", {"frozen": ["a", "a"]}, "argument frozen: the items must be unique (it is a frozenset)"),
    ("containers", {"items": {"a": 1}}, "argument items: expected array, got object"),
    ("containers", {"pair": [1]}, "argument pair: expected an array of exactly 2 items, got 1"),
    ("containers", {"pair": [1, 2]}, "argument pair[1]: expected string, got integer"),
    ("containers", {"many": "abc"}, "argument many: expected array, got string"),
    ("containers", {"nested": {"k": [[1, "x"]]}}, "argument nested['k'][0][1]: expected integer, got string"),
    ("containers", {"nested": [1]}, "argument nested: expected object, got array"),
    ("choices", {"mode": "slow"}, 'argument mode: expected one of "fast", 1, true, null, got "slow"'),
    ("choices", {"mode": 1.0}, "argument mode: expected one of"),
    ("choices", {"mode": False}, "got false"),
    ("choices", {"number": "1"}, "argument number: expected number or integer; got string"),
    ("choices", {"maybe": [True]}, "argument maybe: expected array or null; got array"),
]


@pytest.mark.parametrize("tool, arguments, message", BAD_ARGUMENTS, ids=[case[2] for case in BAD_ARGUMENTS])
def test_call_tool_rejects_bad_arguments_without_calling(recorded, tool, arguments, message):
    error = recorded.error("call_tool", tool_name=tool, arguments=arguments)
    assert error["code"] == "invalid_arguments"
    assert error["message"].startswith("tool %r: " % tool) and message in error["message"], error["message"]
    assert recorded.calls == []


def test_call_tool_arguments_must_be_an_object(recorded):
    for arguments in ([1], "x", 3):
        error = recorded.error("call_tool", tool_name="choices", arguments=arguments)
        assert error["code"] == "invalid_arguments" and "must be a JSON object" in error["message"], error
    assert recorded.calls == []


def test_call_tool_calls_exactly_once_and_reports_like_call_function(helper):
    counter = []

    def count(step: int = 1) -> int:
        counter.append(step)
        return len(counter)

    def fail(message: str):
        raise ValueError(message)

    def unserializable(kind: Literal["set", "object", "nan"]):
        return {"set": {1}, "object": object(), "nan": float("nan")}[kind]

    async def later():
        return 1

    created = []

    def returns_coroutine():
        created.append(later())
        return created[-1]

    def big():
        return {"rows": list(range(30)), "text": "x" * 500}

    fixture = Fixture(helper, {
        "count": count, "fail": fail, "unserializable": unserializable, "returns_coroutine": returns_coroutine,
        "big": big,
    })
    for name in list(fixture.user_ns):
        fixture.register(name)
    assert fixture.call_tool("count", step=3) == {"result": 1, "truncated": False}
    assert counter == [3]
    assert fixture.call_tool("count") == {"result": 2, "truncated": False}
    assert counter == [3, 1]
    assert fixture.call_tool_error("count", step="x")["code"] == "invalid_arguments"
    assert counter == [3, 1]

    raised = fixture.call_tool_error("fail", message="boom")
    assert set(raised) == {"code", "message", "ename", "evalue", "traceback"}
    assert (raised["code"], raised["ename"], raised["evalue"]) == ("execution_error", "ValueError", "boom")
    assert raised["message"] == "calling 'fail' raised: ValueError: boom"
    assert raised["traceback"][-1] == "ValueError: boom\n"
    assert "in fail" in "".join(raised["traceback"])
    # The same shape as call_function's.
    direct = fixture.error("call_function", name="fail", arguments={"message": "boom"})
    assert set(direct) == set(raised) and direct["message"] == raised["message"]

    for kind, what in (("set", "a set"), ("object", "a object"), ("nan", "the float nan")):
        error = fixture.call_tool_error("unserializable", kind=kind)
        assert error["code"] == "result_not_json" and what in error["message"], error
    error = fixture.call_tool_error("returns_coroutine")
    assert error["code"] == "result_not_json" and "coroutine" in error["message"], error
    assert inspect.getcoroutinestate(created[0]) == inspect.CORO_CLOSED
    # Results are bounded as call_function's are (max_results 20, max_text_chars 200).
    assert fixture.call_tool("big") == {"result": {"rows": list(range(20)), "text": "x" * 200}, "truncated": True}


def test_call_tool_on_unknown_or_stale_tools(helper):
    counter = []

    def tool(a: int):
        counter.append(a)
        return a

    fixture = Fixture(helper, {"tool": tool})
    assert fixture.call_tool_error("tool", a=1) == {"code": "name_not_found", "message": "there is no dynamic tool 'tool'"}
    assert fixture.error("call_tool", tool_name=None, arguments={})["code"] == "name_not_found"
    fixture.register("tool")

    def tool(a: int, b: int = 0):
        counter.append(a)

    fixture.user_ns["tool"] = tool
    error = fixture.call_tool_error("tool", a=1)
    assert (error["code"], error["reason"]) == ("stale_registration", "signature changed")
    assert counter == []


def test_call_tool_uses_the_live_binding(helper):
    def pick(a: int):
        return "first"

    fixture = Fixture(helper, {"pick": pick})
    fixture.register("pick")

    def pick(a: int):
        return "second"

    fixture.user_ns["pick"] = pick
    # No tool_catalog in between: call_tool revalidates by itself.
    assert fixture.call_tool("pick", a=1)["result"] == "second"


# --------------------------------------------------------------------------------------------
# End to end through a real kernel
# --------------------------------------------------------------------------------------------


KERNEL_SETUP = '''
calls = []

def add(a: int, b: "int" = 1) -> int:
    """Adds two numbers."""
    calls.append((a, b))
    return a + b

class Box(dict):
    def __init__(self, items: "set[str]"):
        super().__init__(items=sorted(items))
'''


@needs_kernel
class TestKernelTools:
    def ok(self, kernel, method, params=None):
        reply = kernel.request(method, params)
        assert reply["ok"] is True, reply
        return reply["result"]

    def error(self, kernel, method, params=None):
        reply = kernel.request(method, params)
        assert reply["ok"] is False, reply
        return reply["error"]

    def execute(self, kernel, code):
        run = kernel.execute(code)
        assert run.reply["content"]["status"] == "ok", run.reply["content"]

    def register(self, kernel, name, **params):
        return self.ok(kernel, "register_tool", dict(LIMITS, reserved_names=RESERVED, name=name, **params))

    def test_dynamic_tools_in_a_kernel(self, kernel):
        self.ok(kernel, "reset")
        self.execute(kernel, KERNEL_SETUP)
        registration = self.register(kernel, "add")["registration"]
        assert registration["input_schema"] == {
            "type": "object",
            "properties": {"a": INTEGER, "b": {"type": "integer", "default": 1}},
            "required": ["a"],
            "additionalProperties": False,
        }
        assert registration["fingerprint"] == fingerprint(registration["input_schema"])
        self.register(kernel, "Box", tool_name="box")
        assert self.ok(kernel, "call_tool", {"tool_name": "add", "arguments": {"a": 2}}) == {
            "result": 3,
            "truncated": False,
        }
        assert self.ok(kernel, "call_tool", {"tool_name": "box", "arguments": {"items": ["b", "a"]}})["result"] == {
            "items": ["a", "b"]
        }
        assert kernel.user_expression("calls") == "[(2, 1)]"
        # A cell that redefines the body keeps the tool; one that changes the signature does not.
        self.execute(kernel, "def add(a: int, b: 'int' = 1) -> int:\n    return a * b\n")
        catalog = self.ok(kernel, "tool_catalog")
        assert [(t["tool_name"], t["live"], t["reason"]) for t in catalog["tools"]] == [
            ("add", True, None),
            ("box", True, None),
        ]
        assert catalog["changed"] is False
        assert self.ok(kernel, "call_tool", {"tool_name": "add", "arguments": {"a": 2, "b": 5}})["result"] == 10
        self.execute(kernel, "def add(a: int) -> int:\n    return a\n")
        catalog = self.ok(kernel, "tool_catalog")
        assert (catalog["tools"][0]["reason"], catalog["changed"]) == ("signature changed", True)
        error = self.error(kernel, "call_tool", {"tool_name": "add", "arguments": {"a": 2}})
        assert error["code"] == "stale_registration"
        assert self.register(kernel, "add")["registration"]["input_schema"]["properties"] == {"a": INTEGER}
        assert self.ok(kernel, "call_tool", {"tool_name": "add", "arguments": {"a": 2}})["result"] == 2
        # Re-installing the helper keeps the catalog (it names user_ns bindings, which stay).
        reinstall = "__import__('sys').modules['ipython_mcp_helper'].install(%r)" % KERNEL_CONFIG
        kernel.user_expression(reinstall)
        assert [t["tool_name"] for t in self.ok(kernel, "tool_catalog")["tools"]] == ["add", "box"]
        assert self.ok(kernel, "remove", {"names": ["Box"]})["removed"] == ["Box"]
        catalog = self.ok(kernel, "tool_catalog")
        assert [(t["tool_name"], t["live"], t["reason"]) for t in catalog["tools"]] == [
            ("add", True, None),
            ("box", False, "deleted"),
        ]
        assert self.ok(kernel, "unregister_tool", {"names": ["box", "nope"]}) == {
            "unregistered": ["box"],
            "unknown": ["nope"],
        }
        assert self.ok(kernel, "reset")["tools_dropped"] == 1
        assert self.ok(kernel, "tool_catalog") == {"tools": [], "changed": False}
