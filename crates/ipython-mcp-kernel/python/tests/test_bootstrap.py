"""The helper installed exactly as the server installs it, into a kernel of its own.

The code executed is the server's install code (the fixed bootstrap carrying the embedded module
table and a default config, base64-encoded), written by the cargo test that runs this suite
(tests/it/python_helper.rs), so what is checked here is what every kernel the server starts runs.

Run from the workspace root:  python -m pytest crates/ipython-mcp-kernel/python/tests -q
(these tests need the install code, so they run only under cargo or with
IPYTHON_MCP_HELPER_INSTALL_CODE pointing to a file holding it).
"""

import ast
import os
import re

import pytest

from harness import INSTALL_CODE_ENV, PACKAGE, PACKAGE_DIR, KernelClient, needs_kernel, server_install_code, start_kernel

# Every module of the package, as the server's table must list them (a Rust test checks that).
SUBMODULES = sorted(name[: -len(".py")] for name in os.listdir(PACKAGE_DIR) if name.endswith(".py") and name != "__init__.py")
ANSI = re.compile(r"\x1b\[[0-9;]*m")

# Skipped only where the install code is not given AND this is not CI: cargo always gives it.
needs_install_code = pytest.mark.skipif(
    server_install_code() is None and os.environ.get("CI") != "true",
    reason="%s not set (cargo test -p ipython-mcp-kernel --test it python_helper sets it)" % INSTALL_CODE_ENV,
)


@pytest.fixture(scope="module")
def booted():
    """A fresh kernel, the user namespace's names before the install, and the install's run."""
    code = server_install_code()
    assert code is not None, "%s is not set" % INSTALL_CODE_ENV
    km, kc = start_kernel()
    client = KernelClient(kc)
    try:
        before = client.user_expression("sorted(get_ipython().user_ns)")
        run = client.execute(code, silent=True)
        yield client, run, before
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def traceback_text(entries):
    return ANSI.sub("", "\n".join(entries))


@needs_kernel
@needs_install_code
class TestBootstrap:
    def test_install_is_silent_and_binds_nothing_in_the_user_namespace(self, booted):
        client, run, before = booted
        assert run.reply["content"]["status"] == "ok", run.reply["content"]
        assert [msg["msg_type"] for msg in run.messages] == ["status", "status"]
        assert ast.literal_eval(client.user_expression("sorted(get_ipython().user_ns)")) == ast.literal_eval(before)

    def test_each_module_is_its_own_module_of_the_package(self, booted):
        client, _, _ = booted
        found = client.user_expression(
            "sorted((name, module.__file__, module.__spec__.parent, module.__package__)"
            " for name, module in __import__('sys').modules.items()"
            " if name == %r or name.startswith(%r))" % (PACKAGE, PACKAGE + ".")
        )
        expected = [(PACKAGE, "<ipython-mcp-helper/__init__.py>", PACKAGE, PACKAGE)] + [
            (PACKAGE + "." + name, "<ipython-mcp-helper/%s.py>" % name, PACKAGE, PACKAGE) for name in SUBMODULES
        ]
        assert ast.literal_eval(found) == sorted(expected)
        # Bound on the package as an import binds them; `install` is the function, not a module.
        bound = client.user_expression(
            "(lambda sys: [getattr(sys.modules[%r], name) is sys.modules[%r + name] for name in %r]"
            " + [sys.modules[%r].install is sys.modules[%r].install])(__import__('sys'))"
            % (PACKAGE, PACKAGE + ".", SUBMODULES, PACKAGE, PACKAGE + ".installation")
        )
        assert ast.literal_eval(bound) == [True] * (len(SUBMODULES) + 1)

    def test_the_comm_serves_requests(self, booted):
        client, _, _ = booted
        client.open_comm()
        reply = client.request("install_info")
        assert reply["ok"] is True, reply
        assert (reply["result"]["version"], reply["result"]["namespace_errors"]) == ("1", [])
        assert client.request("ping", {"x": 1}) == {"id": "r1", "ok": True, "result": {"x": 1}}

    def test_tracebacks_name_the_helper_module(self, booted):
        client, _, _ = booted
        # A helper function raising inside an execute: the frames are the module's own file.
        run = client.execute(
            "__import__('sys').modules[%r].to_json({1: 2}, 6, 100, 100)" % (PACKAGE + ".jsonconv")
        )
        content = run.reply["content"]
        assert (content["status"], content["ename"]) == ("error", "NotJson"), content
        assert "<ipython-mcp-helper/jsonconv.py>" in traceback_text(content["traceback"])
        # A request whose work raised in the helper's code: the reply's traceback says where.
        setup = client.execute("class Unprintable:\n    def __repr__(self):\n        raise ValueError('no repr')\n\nu = Unprintable()")
        assert setup.reply["content"]["status"] == "ok", setup.reply["content"]
        if client.comm_id is None:
            client.open_comm()
        reply = client.request("inspect", {"name": "u"})
        assert (reply["ok"], reply["error"]["code"], reply["error"]["ename"]) == (False, "execution_error", "ValueError")
        assert "<ipython-mcp-helper/namespace.py>" in traceback_text(reply["error"]["traceback"])
