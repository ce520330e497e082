"""Unit tests of the helper's namespace methods, without a kernel.

The methods read ``rpc.current()``: a fake installation (a shell with ``user_ns``,
``user_ns_hidden`` and ``execution_count``, a config, the configured binding names), passed to
``rpc.serve``, stands in for a running kernel. The same methods run end to end through a real
kernel at the end of this file.

Run from the workspace root:  python -m pytest crates/ipython-mcp-kernel/python/tests -q
"""

import ast
import gc
import json
import os
import sys
import types
import warnings

import pytest

from harness import CONFIG as KERNEL_CONFIG
from harness import LIBDIR, needs_kernel, write_module

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
    "max_results": 5,
    "max_json_depth": 3,
}


class Hostile:
    """Everything that can run user code raises."""

    @property
    def __doc__(self):
        raise RuntimeError("doc")

    @property
    def __class__(self):
        raise RuntimeError("class")

    @property
    def __signature__(self):
        raise RuntimeError("signature")

    def __repr__(self):
        raise ValueError("repr")

    def __getattr__(self, name):
        raise KeyError(name)

    def __call__(self):
        return 1


def documented(alpha, beta=2, *, gamma=None):
    """Adds things.

    A second paragraph that list leaves out.
    """
    return alpha + beta


class Widget:
    """A widget."""

    size = 3

    def __init__(self, size=1):
        self.size = size


class Fixture:
    """A fake installation around a plain dict namespace."""

    def __init__(self, helper, user_ns, hidden=None, bindings=(), config=None, namespace=None):
        config = dict(CONFIG if config is None else config)
        config["namespace"] = helper.namespace.validated_namespace(namespace)
        self.helper = helper
        self.shell = types.SimpleNamespace(user_ns=user_ns, user_ns_hidden=hidden or {}, execution_count=7)
        helper.rpc.serve(
            types.SimpleNamespace(
                shell=self.shell,
                config=config,
                bindings=frozenset(bindings) | helper.namespace.configured_bindings(config["namespace"]),
                namespace_errors=[],
                info={"version": "1"},
            )
        )

    def call(self, method, **params):
        reply = self.helper.rpc.handle_request({"id": "t", "method": method, "params": params})
        json.dumps(reply)  # every reply is JSON as it stands
        return reply

    def ok(self, method, **params):
        reply = self.call(method, **params)
        assert reply["ok"] is True, reply
        return reply["result"]

    def error(self, method, **params):
        reply = self.call(method, **params)
        assert reply["ok"] is False, reply
        return reply["error"]


def ipython_like_namespace():
    """What ipykernel puts in user_ns (all of it also in user_ns_hidden)."""
    hidden = {
        "In": [],
        "Out": {},
        "_": "",
        "__builtins__": __builtins__,
        "_ih": [],
        "_oh": {},
        "exit": object(),
        "quit": object(),
        "get_ipython": lambda: None,
        "open": open,
        "np": object(),  # e.g. %pylab's bindings: hidden but not in the documented protected list
    }
    return dict(hidden), hidden


# --------------------------------------------------------------------------------------------
# Visibility and protection
# --------------------------------------------------------------------------------------------


def test_protected_names(helper):
    bindings = {"js"}
    for name in ("_", "_x", "__name__", "In", "Out", "get_ipython", "exit", "quit", "open", "js"):
        assert helper.namespace.is_protected(name, bindings), name
    for name in ("x", "json", "in_", "Open"):
        assert not helper.namespace.is_protected(name, bindings), name


def test_user_names_skip_protected_and_hidden_unless_rebound(helper):
    user_ns, hidden = ipython_like_namespace()
    user_ns.update(b=1, a=2, js=json)
    assert helper.namespace.user_names(user_ns, hidden, {"js"}) == ["a", "b"]
    user_ns["np"] = "the user's own np"  # a hidden name rebound by the user is the user's
    assert helper.namespace.user_names(user_ns, hidden, {"js"}) == ["a", "b", "np"]


# --------------------------------------------------------------------------------------------
# list / search / inspect
# --------------------------------------------------------------------------------------------


def test_list_shows_visible_callables_sorted_and_bounded(helper):
    user_ns, hidden = ipython_like_namespace()
    user_ns.update(
        documented=documented,
        Widget=Widget,
        hostile=Hostile(),
        length=len,
        data=[1, 2],
        json=json,
        js=json.dumps,
        _private=documented,
    )
    fixture = Fixture(helper, user_ns, hidden, bindings={"js"})
    result = fixture.ok("list")
    assert [(f["name"], f["kind"]) for f in result["functions"]] == [
        ("Widget", "class"),
        ("documented", "function"),
        ("hostile", "callable"),
        ("length", "function"),
    ]
    assert (result["total"], result["truncated"]) == (4, False)
    by_name = {f["name"]: f for f in result["functions"]}
    assert by_name["documented"] == {
        "name": "documented",
        "kind": "function",
        "signature": "(alpha, beta=2, *, gamma=None)",
        "module": __name__,
        "doc": "Adds things.",
        "truncated": {"signature": False, "module": False, "doc": False},
    }
    assert by_name["Widget"]["signature"] == "(size=1)"
    assert by_name["Widget"]["doc"] == "A widget."
    # Every accessor of the hostile object raises: placeholders, not a crash.
    assert by_name["hostile"]["signature"] == "" and by_name["hostile"]["doc"] == ""
    assert by_name["length"]["module"] == "builtins"


def test_list_truncation_flags(helper):
    def long_signature(a_very_long_parameter_name=1, another_very_long_parameter_name=2):
        """%s"""

    long_signature.__doc__ = "d" * 100 + "\n\nsecond"
    user_ns = {"f%d" % i: documented for i in range(7)}
    user_ns["f0"] = long_signature
    result = Fixture(helper, user_ns).ok("list")
    assert [f["name"] for f in result["functions"]] == ["f0", "f1", "f2", "f3", "f4"]
    assert (result["total"], result["truncated"]) == (7, True)
    first = result["functions"][0]
    assert first["truncated"] == {"signature": True, "module": False, "doc": True}
    assert first["doc"] == "d" * 40 and len(first["signature"]) == 40


def test_search_orders_exact_match_first_and_bounds(helper):
    user_ns, hidden = ipython_like_namespace()
    user_ns.update(
        data=list(range(100)),
        Data=Widget,
        metadata={"a": 1},
        update=documented,
        json=json,
        broken=Hostile(),
        _data=1,
    )
    fixture = Fixture(helper, user_ns, hidden)
    result = fixture.ok("search", query="data")
    assert [r["name"] for r in result["results"]] == ["data", "Data", "metadata"]
    assert (result["total"], result["truncated"]) == (3, False)
    data = result["results"][0]
    assert data == {
        "name": "data",
        "kind": "variable",
        "qualified_type": "builtins.list",
        "module": None,
        "representation": repr(list(range(100)))[:40],
        "truncated": {"qualified_type": False, "module": False, "representation": True},
    }
    assert result["results"][1]["kind"] == "class"
    assert result["results"][1]["qualified_type"] == "builtins.type"
    assert result["results"][1]["module"] == __name__

    assert [r["name"] for r in fixture.ok("search", query="Data", exact=True)["results"]] == ["Data"]
    limited = fixture.ok("search", query="data", limit=1)
    assert ([r["name"] for r in limited["results"]], limited["total"], limited["truncated"]) == (["data"], 3, True)
    capped = fixture.ok("search", query="", limit=1000)
    assert capped["total"] == 6 and len(capped["results"]) == 5 and capped["truncated"] is True

    (broken,) = fixture.ok("search", query="broken")["results"]
    assert broken["representation"] == "<repr failed: ValueError>"
    assert broken["qualified_type"] == __name__ + ".Hostile" and broken["kind"] == "variable"
    (module,) = fixture.ok("search", query="json", exact=True)["results"]
    assert (module["kind"], module["module"], module["qualified_type"]) == ("module", "json", "builtins.module")


def test_search_rejects_bad_params(helper):
    fixture = Fixture(helper, {})
    for params in ({}, {"query": 1}, {"query": "x", "exact": "yes"}, {"query": "x", "limit": -1},
                   {"query": "x", "limit": True}, {"query": "x", "other": 1}):
        assert fixture.error("search", **params)["code"] == "invalid_request", params


def test_inspect_resolves_dotted_paths(helper):
    user_ns = {"w": Widget(5), "Widget": Widget, "json": json, "long": "x" * 1000}
    fixture = Fixture(helper, user_ns)
    result = fixture.ok("inspect", name="json.dumps")
    assert result["name"] == "json.dumps"
    assert (result["kind"], result["callable"], result["module"]) == ("function", True, "json")
    assert result["qualified_type"] == "builtins.function"
    assert result["signature"].startswith("(obj, *, skipkeys=False") and result["truncated"]["signature"] is True
    assert result["documentation"].startswith("Serialize ``obj`` to a JSON formatted ``str``.")
    assert result["truncated"]["documentation"] is True  # longer than max_text_chars (200)
    assert result["representation"].startswith("<function dumps at 0x")

    size = fixture.ok("inspect", name="w.size")
    assert (size["kind"], size["callable"], size["signature"], size["representation"]) == ("variable", False, None, "5")
    assert size["documentation"].startswith("int(")  # a value's documentation is its type's
    long = fixture.ok("inspect", name="long")
    assert long["truncated"]["representation"] is True and len(long["representation"]) == 40


def test_inspect_errors(helper):
    class Raising:
        @property
        def boom(self):
            raise ZeroDivisionError("no")

    user_ns = {"json": json, "r": Raising(), "hostile": Hostile()}
    fixture = Fixture(helper, user_ns)
    for name in ("", "json.", ".x", "a-b", "1x", "json..dumps", None, 3):
        assert fixture.error("inspect", name=name)["code"] == "invalid_name", name
    missing = fixture.error("inspect", name="nothing.here")
    assert missing["code"] == "name_not_found" and "'nothing'" in missing["message"]
    attribute = fixture.error("inspect", name="json.dumps.nope")
    assert attribute["code"] == "name_not_found"
    assert "'json.dumps' has no attribute 'nope'" in attribute["message"]
    raised = fixture.error("inspect", name="r.boom")
    assert raised["code"] == "execution_error"
    assert (raised["ename"], raised["evalue"]) == ("ZeroDivisionError", "no")
    assert raised["traceback"][-1] == "ZeroDivisionError: no\n"
    assert "'r.boom'" in raised["message"]
    # What was resolved is kept beside the error.
    assert fixture.call("inspect", name="r.boom")["result"] == {"name": "r.boom", "resolved": "r"}
    assert fixture.call("inspect", name="json.dumps.nope")["result"] == {"name": "json.dumps.nope", "resolved": "json.dumps"}
    assert "result" not in fixture.call("inspect", name="nothing.here")
    # __getattr__ raising KeyError is an execution error.
    assert fixture.error("inspect", name="hostile.anything")["ename"] == "KeyError"


def test_inspect_of_an_object_whose_repr_doc_or_signature_raises_is_an_error_keeping_the_rest(helper):
    fixture = Fixture(helper, {"hostile": Hostile()})
    reply = fixture.call("inspect", name="hostile")
    assert reply["ok"] is False
    error = reply["error"]
    assert error["code"] == "execution_error"
    # The first failure's exception, and every failed field named.
    assert error["ename"] == "RuntimeError"
    assert "signature, documentation, representation of 'hostile'" in error["message"]
    described = reply["result"]
    assert (described["signature"], described["documentation"], described["representation"]) == (None, None, None)
    assert described["kind"] == "variable" and described["callable"] is True
    assert described["qualified_type"] == __name__ + ".Hostile" and described["module"] == __name__
    assert set(described["truncated"]) == {"qualified_type", "signature", "module", "documentation", "representation"}

    class OnlyRepr:
        def __repr__(self):
            raise ValueError("no repr")

    only = Fixture(helper, {"o": OnlyRepr()}).call("inspect", name="o")
    assert only["ok"] is False and only["error"]["ename"] == "ValueError"
    assert "computing the representation of 'o' raised" in only["error"]["message"]
    assert only["result"]["representation"] is None and only["result"]["documentation"] == ""
    # Objects without a signature are not failures.
    assert Fixture(helper, {"n": 5}).ok("inspect", name="n")["signature"] is None
    assert Fixture(helper, {"m": max}).ok("inspect", name="m")["qualified_type"] == "builtins.builtin_function_or_method"


def test_inspect_flags_every_text_field_and_qualifies_builtins(helper):
    config = dict(CONFIG, max_repr_chars=12)
    Long = type("L" * 30, (), {"__module__": "m" * 30})
    result = Fixture(helper, {"x": Long(), "n": 1}, config=config).ok("inspect", name="x")
    assert result["truncated"] == {
        "qualified_type": True,
        "signature": False,
        "module": True,
        "documentation": False,
        "representation": True,
    }
    assert result["qualified_type"] == ("m" * 30 + "." + "L" * 30)[:12] and result["module"] == "m" * 12
    assert Fixture(helper, {"n": 1}).ok("inspect", name="n")["qualified_type"] == "builtins.int"


# --------------------------------------------------------------------------------------------
# call_function
# --------------------------------------------------------------------------------------------


def test_call_function_happy_path_invokes_once(helper):
    calls = []

    def record(a, b=1, **rest):
        calls.append((a, b, rest))
        return {"sum": a + b, "rest": rest, "items": list(range(10))}

    fixture = Fixture(helper, {"record": record, "Widget": Widget, "json": json})
    result = fixture.ok("call_function", name="record", arguments={"a": 2, "c": "x"})
    assert result == {"result": {"sum": 3, "rest": {"c": "x"}, "items": [0, 1, 2, 3, 4]}, "truncated": True}
    assert calls == [(2, 1, {"c": "x"})]
    assert fixture.ok("call_function", name="json.dumps", arguments={"obj": [1]}) == {"result": "[1]", "truncated": False}
    assert fixture.ok("call_function", name="json.loads", arguments={"s": "[[[[1]]]]"}) == {
        "result": [[[[]]]],
        "truncated": True,
    }


def test_call_function_errors(helper):
    calls = []

    def fail(x):
        calls.append(x)
        raise ValueError("\x1b[31mbad\x1b[0m " + "v" * 1000)

    async def coroutine():
        calls.append("ran")

    def make_set():
        return {1}

    def nan():
        return float("nan")

    def positional_only(a, /):
        return a

    fixture = Fixture(
        helper,
        {"fail": fail, "coroutine": coroutine, "make_set": make_set, "nan": nan, "value": 3,
         "positional_only": positional_only, "Widget": Widget},
    )
    assert fixture.error("call_function", name="value", arguments={})["code"] == "not_callable"
    assert fixture.error("call_function", name="missing", arguments={})["code"] == "name_not_found"
    assert fixture.error("call_function", name="bad name", arguments={})["code"] == "invalid_name"
    assert fixture.error("call_function", name="Widget.nope", arguments={})["code"] == "name_not_found"
    wrong = fixture.error("call_function", name="fail", arguments={"x": 1, "y": 1})
    assert wrong["code"] == "invalid_arguments" and "unexpected keyword argument 'y'" in wrong["message"]
    assert fixture.error("call_function", name="fail", arguments={})["code"] == "invalid_arguments"
    assert fixture.error("call_function", name="fail", arguments=[1])["code"] == "invalid_arguments"
    assert fixture.error("call_function", name="positional_only", arguments={"a": 1})["code"] == "invalid_arguments"
    assert calls == []  # nothing was called for a binding failure

    raised = fixture.error("call_function", name="fail", arguments={"x": 1})
    assert calls == [1]
    assert (raised["code"], raised["ename"]) == ("execution_error", "ValueError")
    assert len(raised["evalue"]) == 200 and raised["evalue"].startswith("\x1b[31mbad")
    text = "".join(raised["traceback"])
    assert "\x1b" not in text and "in fail" in text and "_method_call_function" not in text
    assert sum(len(entry) for entry in raised["traceback"] if not entry.startswith("... ")) <= 600

    for name, what in (("make_set", "a set"), ("nan", "the float nan")):
        error = fixture.error("call_function", name=name, arguments={})
        assert error["code"] == "result_not_json" and what in error["message"], error
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "coroutine was never awaited" would be a RuntimeWarning
        error = fixture.error("call_function", name="coroutine", arguments={})
        gc.collect()
    assert error["code"] == "result_not_json" and "coroutine" in error["message"]
    assert calls == [1]


def test_call_function_reports_interrupts_and_exits(helper):
    def interrupted():
        raise KeyboardInterrupt

    def exits():
        sys.exit(3)

    fixture = Fixture(helper, {"interrupted": interrupted, "exits": exits})
    assert fixture.error("call_function", name="interrupted", arguments={})["ename"] == "KeyboardInterrupt"
    assert fixture.error("call_function", name="exits", arguments={})["evalue"] == "3"


# --------------------------------------------------------------------------------------------
# remove / reset
# --------------------------------------------------------------------------------------------


def test_remove_partitions_and_is_idempotent(helper):
    user_ns, hidden = ipython_like_namespace()
    user_ns.update(a=1, b=2, js=json)
    fixture = Fixture(helper, user_ns, hidden, namespace={"module_aliases": {"json": "js"}})
    names = ["b", "a", "a", "_", "In", "js", "np", "nope", "open"]
    assert fixture.ok("remove", names=names) == {
        "removed": ["a", "b"],
        "refused": ["In", "_", "js", "np", "open"],
        "unknown": ["nope"],
    }
    assert "a" not in user_ns and user_ns["js"] is json
    assert fixture.ok("remove", names=names) == {
        "removed": [],
        "refused": ["In", "_", "js", "np", "open"],
        "unknown": ["a", "b", "nope"],
    }
    assert fixture.error("remove", names="a")["code"] == "invalid_request"
    assert fixture.error("remove", names=[1])["code"] == "invalid_request"


def test_reset_removes_user_names_restores_bindings_keeps_count(helper):
    user_ns, hidden = ipython_like_namespace()
    user_ns.update(x=1, f=documented, js="rebound by the user", np="rebound too", _keep=1)
    fixture = Fixture(helper, user_ns, hidden, namespace={"module_aliases": {"json": "js"}, "preload_modules": ["os.path"]})
    assert fixture.ok("reset") == {"removed": ["f", "np", "x"], "execution_count": 6, "tools_dropped": 0}
    assert user_ns["js"] is json and user_ns["os"] is os
    assert user_ns["_keep"] == 1 and user_ns["In"] is hidden["In"]
    assert fixture.ok("reset") == {"removed": [], "execution_count": 6, "tools_dropped": 0}
    assert fixture.ok("install_info") == {"version": "1", "bindings": ["js", "os"], "namespace_errors": []}


# --------------------------------------------------------------------------------------------
# Configuration and configured bindings
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "namespace, message",
    [
        ([], "must be a dict"),
        ({"paths": []}, "unknown keys 'paths'"),
        ({"library_paths": "dir"}, r"\['library_paths'\] must be a list of strings"),
        ({"library_paths": ["/no/such/dir/ipython-mcp"]}, "is not an existing directory"),
        ({"preload_modules": ["a..b"]}, "is not a module name"),
        ({"preload_modules": [1]}, "must be a list of strings"),
        ({"module_aliases": ["json"]}, "must be a dict"),
        ({"module_aliases": {"json": "j s"}}, "binding 'j s' is not an identifier"),
        ({"module_aliases": {"json": "class"}}, "binding 'class' is not an identifier"),
        ({"module_aliases": {"json": "open"}}, "collides with IPython's own 'open'"),
        ({"module_aliases": {"json": 1}}, "must be strings"),
        ({"module_aliases": {"json": "x", "os": "x"}}, "binding 'x' collides"),
        ({"preload_modules": ["os.path"], "module_aliases": {"json": "os"}}, "binding 'os' collides"),
    ],
)
def test_bad_namespace_config_is_rejected(helper, namespace, message):
    with pytest.raises(ValueError, match=message):
        helper.namespace.validated_namespace(namespace)


def test_bind_configured_reports_failures_per_module(helper, tmp_path, monkeypatch):
    (tmp_path / "mcp_unit_raises.py").write_text("raise RuntimeError('at import')\n")
    (tmp_path / "mcp_unit_needs.py").write_text("import mcp_unit_absent_dependency\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    namespace = helper.namespace.validated_namespace(
        {
            "preload_modules": ["mcp_unit_missing.sub", "mcp_unit_raises", "os.path"],
            "module_aliases": {"mcp_unit_needs": "needs", "json": "js"},
        }
    )
    user_ns = {}
    try:
        errors = helper.namespace.bind_configured(user_ns, namespace)
    finally:
        for name in ("mcp_unit_raises", "mcp_unit_needs"):
            sys.modules.pop(name, None)
    assert [(e["module"], e["code"]) for e in errors] == [
        ("mcp_unit_missing.sub", "module_not_found"),
        ("mcp_unit_raises", "execution_error"),
        ("mcp_unit_needs", "execution_error"),  # its dependency is missing, not the module
    ]
    assert errors[1]["message"] == "RuntimeError: at import"
    assert user_ns == {"os": os, "js": json}


def test_failed_reload_restores_the_module(helper, tmp_path, monkeypatch):
    path = tmp_path / "mcp_unit_reloaded.py"
    path.write_text("def f():\n    return 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import mcp_unit_reloaded

    try:
        f = mcp_unit_reloaded.f
        user_ns = {"f": f, "mod": mcp_unit_reloaded, "also": f, "_": f}
        config = helper.installation._validated(CONFIG)
        path.write_text("def f():\n    return 2\nraise RuntimeError('half way')\n")
        entry = helper.namespace.reload_module(user_ns, "mcp_unit_reloaded", config)
        assert (entry["ok"], entry["rebound"], entry["error"]["code"]) == (False, [], "execution_error")
        assert entry["error"]["ename"] == "RuntimeError"
        assert mcp_unit_reloaded.f is f and sys.modules["mcp_unit_reloaded"] is mcp_unit_reloaded
        path.write_text("def f():\n    return 3\n")
        entry = helper.namespace.reload_module(user_ns, "mcp_unit_reloaded", config)
        # "also" holds the function defined in the module under another name: rebound too; "_"
        # (IPython's output cache) is not.
        assert entry == {"module": "mcp_unit_reloaded", "ok": True, "rebound": ["also", "f", "mod"], "error": None}
        assert user_ns["f"]() == 3 and user_ns["also"] is user_ns["f"] and user_ns["_"] is f
        missing = helper.namespace.reload_module(user_ns, "mcp_unit_never_imported", config)
        assert (missing["ok"], missing["error"]["code"]) == (False, "module_not_found")
    finally:
        sys.modules.pop("mcp_unit_reloaded", None)


def test_namespace_methods_need_an_installation(helper):
    for method in ("list", "search", "inspect", "call_function", "reload", "remove", "reset", "install_info"):
        reply = helper.rpc.handle_request({"id": "1", "method": method, "params": {}})
        assert reply["error"]["code"] == "not_installed", method


def test_an_interrupted_reload_reloads_nothing_more(helper, tmp_path, monkeypatch):
    (tmp_path / "mcp_unit_first.py").write_text("X = 1\n")
    (tmp_path / "mcp_unit_second.py").write_text("X = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import mcp_unit_first
    import mcp_unit_second

    try:
        (tmp_path / "mcp_unit_first.py").write_text("X = 2\nraise KeyboardInterrupt\n")
        (tmp_path / "mcp_unit_second.py").write_text("X = 22\n")
        fixture = Fixture(helper, {})
        first, second = fixture.ok("reload", modules=["mcp_unit_first", "mcp_unit_second"])["results"]
        assert (first["ok"], first["error"]["ename"], mcp_unit_first.X) == (False, "KeyboardInterrupt", 1)
        assert (second["ok"], second["error"]["code"], mcp_unit_second.X) == (False, "execution_error", 1)
        assert "interrupted" in second["error"]["message"]
        assert fixture.error("reload", modules="mcp_unit_first")["code"] == "invalid_request"
    finally:
        sys.modules.pop("mcp_unit_first", None)
        sys.modules.pop("mcp_unit_second", None)


def test_reload_sees_a_same_size_edit_within_the_second(helper, tmp_path, monkeypatch):
    # The bytecode cache is keyed by the source's mtime in whole seconds and its size: without
    # dropping the stale cache, this reload would run the old code.
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    monkeypatch.syspath_prepend(str(tmp_path))
    path = tmp_path / "mcp_unit_same_size.py"
    path.write_text("def f():\n    return 1\n")
    import mcp_unit_same_size

    try:
        assert os.path.exists(mcp_unit_same_size.__cached__)
        path.write_text("def f():\n    return 2\n")
        user_ns = {"f": mcp_unit_same_size.f}
        entry = helper.namespace.reload_module(user_ns, "mcp_unit_same_size", helper.installation._validated(CONFIG))
        assert (entry["ok"], entry["rebound"], user_ns["f"]()) == (True, ["f"], 2)
    finally:
        sys.modules.pop("mcp_unit_same_size", None)


# --------------------------------------------------------------------------------------------
# The namespace methods, end to end (unit tests of the same are in test_namespace.py)
# --------------------------------------------------------------------------------------------

NAMESPACE_SETUP = '''
def add(a, b=1):
    """Adds two numbers.

    A second paragraph.
    """
    return a + b

class Box:
    """A box."""

    def __init__(self, value=0):
        self.value = value

class Hostile:
    def __repr__(self):
        raise RuntimeError("no repr")

    @property
    def boom(self):
        raise ZeroDivisionError("no boom")

def fail(message):
    raise ValueError(message)

async def later():
    return 1

def make(kind):
    return {"set": {1}, "nan": float("nan"), "long": list(range(100)), "deep": [[[[[1]]]]]}[kind]

box = Box(3)
hostile = Hostile()
data = list(range(1000))
import math
'''


@needs_kernel
class TestKernelNamespace:
    def setup_fresh(self, kernel, code=NAMESPACE_SETUP):
        assert kernel.request("reset")["ok"] is True
        run = kernel.execute(code)
        assert run.reply["content"]["status"] == "ok", run.reply["content"]

    def ok(self, kernel, method, params=None):
        reply = kernel.request(method, params)
        assert reply["ok"] is True, reply
        return reply["result"]

    def error(self, kernel, method, params=None):
        reply = kernel.request(method, params)
        assert reply["ok"] is False, reply
        return reply["error"]

    def test_configured_namespace_is_applied(self, kernel):
        info = self.ok(kernel, "install_info")
        assert (info["version"], info["bindings"], info["namespace_errors"]) == ("1", ["js", "mcp_testlib"], [])
        # Installed three times by the fixture: the library path is first, and there once.
        assert kernel.user_expression("__import__('sys').path[0]") == repr(LIBDIR)
        assert kernel.user_expression("__import__('sys').path.count(%r)" % LIBDIR) == "1"
        assert kernel.user_expression("(js.__name__, mcp_testlib.greet())") == repr(("json", "hello world"))

    def test_failed_preloads_are_reported_not_raised(self, kernel):
        write_module("mcp_testlib_broken", "raise RuntimeError('broken at import')\n")
        bad = dict(KERNEL_CONFIG, namespace=dict(KERNEL_CONFIG["namespace"], preload_modules=["mcp_no_such_module", "mcp_testlib"],
                                          module_aliases={"mcp_testlib_broken": "broken"}))
        install = "__import__('sys').modules['ipython_mcp_helper'].install(%r)"
        try:
            info = ast.literal_eval(kernel.user_expression(install % bad))
            expected = [
                {"module": "mcp_no_such_module", "code": "module_not_found",
                 "message": "ModuleNotFoundError: No module named 'mcp_no_such_module'"},
                {"module": "mcp_testlib_broken", "code": "execution_error", "message": "RuntimeError: broken at import"},
            ]
            assert info["namespace_errors"] == expected
            status = self.ok(kernel, "install_info")
            assert status["bindings"] == ["broken", "mcp_no_such_module", "mcp_testlib"]
            assert status["namespace_errors"] == expected
            invalid = dict(KERNEL_CONFIG, namespace={"module_aliases": {"json": "not an identifier"}})
            reply = kernel.execute("__import__('sys').modules['ipython_mcp_helper'].install(%r)" % invalid, silent=True)
            assert (reply.reply["content"]["ename"], "not an identifier" in reply.reply["content"]["evalue"]) == (
                "ValueError",
                True,
            )
            assert self.ok(kernel, "install_info")["bindings"] == ["broken", "mcp_no_such_module", "mcp_testlib"]
        finally:
            ast.literal_eval(kernel.user_expression(install % KERNEL_CONFIG))
        restored = self.ok(kernel, "install_info")
        assert (restored["bindings"], restored["namespace_errors"]) == (["js", "mcp_testlib"], [])

    def test_list(self, kernel):
        self.setup_fresh(kernel)
        result = self.ok(kernel, "list")
        assert [(f["name"], f["kind"]) for f in result["functions"]] == [
            ("Box", "class"),
            ("Hostile", "class"),
            ("add", "function"),
            ("fail", "function"),
            ("later", "function"),
            ("make", "function"),
        ]
        assert (result["total"], result["truncated"]) == (6, False)
        add = result["functions"][2]
        assert add == {
            "name": "add",
            "kind": "function",
            "signature": "(a, b=1)",
            "module": "__main__",
            "doc": "Adds two numbers.",
            "truncated": {"signature": False, "module": False, "doc": False},
        }
        # More callables than max_results (10): sorted, cut, flagged.
        kernel.execute("for _i in range(12):\n    globals()['f%02d' % _i] = lambda: _i")
        result = self.ok(kernel, "list")
        assert [f["name"] for f in result["functions"]] == ["Box", "Hostile", "add", "f00", "f01", "f02", "f03",
                                                           "f04", "f05", "f06"]
        assert (result["total"], result["truncated"]) == (18, True)

    def test_search(self, kernel):
        self.setup_fresh(kernel, NAMESPACE_SETUP + "Data = 1\nmetadata = {'a': 1}\n")
        result = self.ok(kernel, "search", {"query": "data"})
        assert [r["name"] for r in result["results"]] == ["data", "Data", "metadata"]
        data = result["results"][0]
        assert data == {
            "name": "data",
            "kind": "variable",
            "qualified_type": "builtins.list",
            "module": None,
            "representation": repr(list(range(1000)))[:64],
            "truncated": {"qualified_type": False, "module": False, "representation": True},
        }
        assert [r["name"] for r in self.ok(kernel, "search", {"query": "Data", "exact": True})["results"]] == ["Data"]
        (hostile,) = self.ok(kernel, "search", {"query": "hostile", "exact": True})["results"]
        assert (hostile["representation"], hostile["qualified_type"]) == ("<repr failed: RuntimeError>", "__main__.Hostile")
        (math_entry,) = self.ok(kernel, "search", {"query": "math"})["results"]
        assert (math_entry["kind"], math_entry["module"]) == ("module", "math")
        everything = self.ok(kernel, "search", {"query": "", "limit": 3})
        assert [r["name"] for r in everything["results"]] == ["Box", "Data", "Hostile"]
        assert (everything["total"], everything["truncated"]) == (12, True)
        # Protected names are never user names: configured bindings, IPython's, _-names.
        for name in ("js", "mcp_testlib", "In", "get_ipython", "_"):
            assert self.ok(kernel, "search", {"query": name, "exact": True})["total"] == 0, name
        assert self.error(kernel, "search", {"query": 3})["code"] == "invalid_request"

    def test_inspect(self, kernel):
        self.setup_fresh(kernel)
        result = self.ok(kernel, "inspect", {"name": "box.value"})
        assert result == {
            "name": "box.value",
            "kind": "variable",
            "qualified_type": "builtins.int",
            "callable": False,
            "signature": None,
            "module": None,
            "documentation": result["documentation"],
            "representation": "3",
            "truncated": {
                "qualified_type": False,
                "signature": False,
                "module": False,
                "documentation": False,
                "representation": False,
            },
        }
        greet = self.ok(kernel, "inspect", {"name": "mcp_testlib.greet"})
        assert (greet["kind"], greet["callable"], greet["signature"], greet["module"]) == (
            "function", True, "(name='world')", "mcp_testlib")
        assert greet["documentation"] == "Says hello.\n\nA second paragraph."
        assert self.ok(kernel, "inspect", {"name": "js"})["kind"] == "module"
        assert self.error(kernel, "inspect", {"name": "box..value"})["code"] == "invalid_name"
        assert self.error(kernel, "inspect", {"name": ""})["code"] == "invalid_name"
        missing = self.error(kernel, "inspect", {"name": "box.nothing"})
        assert missing["code"] == "name_not_found" and "'nothing'" in missing["message"]
        assert self.error(kernel, "inspect", {"name": "undefined_thing"})["code"] == "name_not_found"
        raised = self.error(kernel, "inspect", {"name": "hostile.boom"})
        assert (raised["code"], raised["ename"], raised["evalue"]) == ("execution_error", "ZeroDivisionError", "no boom")
        assert raised["traceback"][-1] == "ZeroDivisionError: no boom\n"
        assert kernel.request("inspect", {"name": "hostile.boom"})["result"] == {"name": "hostile.boom", "resolved": "hostile"}
        unrepresentable = kernel.request("inspect", {"name": "hostile"})
        assert (unrepresentable["ok"], unrepresentable["error"]["ename"]) == (False, "RuntimeError")
        assert unrepresentable["result"]["representation"] is None
        assert unrepresentable["result"]["qualified_type"] == "__main__.Hostile"

    def test_call_function(self, kernel):
        self.setup_fresh(kernel)
        call = lambda name, arguments: kernel.request("call_function", {"name": name, "arguments": arguments})  # noqa: E731
        assert call("add", {"a": 2, "b": 3})["result"] == {"result": 5, "truncated": False}
        assert call("mcp_testlib.greet", {"name": "mcp"})["result"] == {"result": "hello mcp", "truncated": False}
        assert call("js.dumps", {"obj": {"k": [1]}})["result"] == {"result": '{"k": [1]}', "truncated": False}
        assert call("make", {"kind": "long"})["result"] == {"result": list(range(10)), "truncated": True}
        assert call("make", {"kind": "deep"})["result"] == {"result": [[[[[]]]]], "truncated": True}
        assert call("box", {})["error"]["code"] == "not_callable"
        assert call("nothing", {})["error"]["code"] == "name_not_found"
        assert call("add(1)", {})["error"]["code"] == "invalid_name"
        wrong = call("add", {"a": 1, "c": 2})["error"]
        assert wrong["code"] == "invalid_arguments" and "'c'" in wrong["message"]
        assert call("add", [1])["error"]["code"] == "invalid_arguments"
        raised = call("fail", {"message": "\x1b[1mboom\x1b[0m"})["error"]
        assert (raised["code"], raised["ename"], raised["evalue"]) == ("execution_error", "ValueError", "\x1b[1mboom\x1b[0m")
        assert raised["traceback"][-1] == "ValueError: boom\n"  # the traceback is ANSI-free
        assert any("in fail" in entry for entry in raised["traceback"])
        for kind, what in (("set", "a set"), ("nan", "nan")):
            error = call("make", {"kind": kind})["error"]
            assert error["code"] == "result_not_json" and what in error["message"], error
        later = call("later", {})["error"]
        assert later["code"] == "result_not_json" and "coroutine" in later["message"]

    def test_build_import_edit_reload(self, kernel):
        self.setup_fresh(kernel, "x = 1")
        write_module("mcp_buildmod", "def f():\n    return 1\n")
        # As in a server's kernel, imports write bytecode (this test run may have turned it off).
        code = "import sys\n_dont_write, sys.dont_write_bytecode = sys.dont_write_bytecode, False\n"
        code += "try:\n    import mcp_buildmod\nfinally:\n    sys.dont_write_bytecode = _dont_write\n"
        run = kernel.execute(code + "from mcp_buildmod import f\nalias = mcp_buildmod")
        assert run.reply["content"]["status"] == "ok", run.reply["content"]
        assert os.path.exists(kernel.user_expression("mcp_buildmod.__cached__").strip("'"))
        call = lambda name: kernel.request("call_function", {"name": name, "arguments": {}})["result"]  # noqa: E731
        assert call("f") == {"result": 1, "truncated": False}

        # Same size, same second: the bytecode cache alone would not notice this edit.
        write_module("mcp_buildmod", "def f():\n    return 2\n")
        result = self.ok(kernel, "reload", {"modules": ["mcp_buildmod", "mcp_buildmod", "mcp_never_imported"]})
        assert result["results"][0] == {"module": "mcp_buildmod", "ok": True, "rebound": ["alias", "f", "mcp_buildmod"],
                                        "error": None}
        missing = result["results"][1]
        assert (missing["module"], missing["ok"], missing["rebound"], missing["error"]["code"]) == (
            "mcp_never_imported", False, [], "module_not_found")
        assert len(result["results"]) == 2
        assert call("f") == {"result": 2, "truncated": False}
        assert call("mcp_buildmod.f") == {"result": 2, "truncated": False}

        write_module("mcp_buildmod", "def f(:\n    return 3\n")
        (failed,) = self.ok(kernel, "reload", {"modules": ["mcp_buildmod"]})["results"]
        assert (failed["ok"], failed["rebound"], failed["error"]["code"], failed["error"]["ename"]) == (
            False, [], "execution_error", "SyntaxError")
        assert call("f") == {"result": 2, "truncated": False}
        assert kernel.user_expression("(f(), mcp_buildmod.f(), alias.f is f)") == "(2, 2, True)"

        (preload,) = self.ok(kernel, "reload", {"modules": ["mcp_testlib"]})["results"]
        assert (preload["ok"], preload["rebound"]) == (True, ["mcp_testlib"])

    def test_remove_and_reset(self, kernel):
        self.setup_fresh(kernel, "a = 1\nb = 2\njs = 'shadowed'\nimport os")
        names = ["b", "a", "a", "In", "_", "js", "mcp_testlib", "nope", "get_ipython"]
        assert self.ok(kernel, "remove", {"names": names}) == {
            "removed": ["a", "b"],
            "refused": ["In", "_", "get_ipython", "js", "mcp_testlib"],
            "unknown": ["nope"],
        }
        assert self.ok(kernel, "remove", {"names": names})["removed"] == []
        assert self.ok(kernel, "remove", {"names": names})["unknown"] == ["a", "b", "nope"]

        run = kernel.execute("c = 3")  # counted: the next execution_count is one more
        count = run.reply["content"]["execution_count"]
        assert kernel.user_expression("get_ipython().execution_count") == str(count + 1)
        assert self.ok(kernel, "reset") == {"removed": ["c", "os"], "execution_count": count, "tools_dropped": 0}
        assert kernel.user_expression("(js.__name__, mcp_testlib.__name__)") == repr(("json", "mcp_testlib"))
        assert self.ok(kernel, "reset") == {"removed": [], "execution_count": count, "tools_dropped": 0}
        assert kernel.user_expression("get_ipython().execution_count") == str(count + 1)
        assert self.ok(kernel, "list") == {"functions": [], "total": 0, "truncated": False}
