"""What the helper's tests share: loading the package, and a real kernel to install it in.

Not a test module (pytest collects ``test_*.py`` only); the ``kernel`` fixture is in conftest.py.
"""

import os
import sys
import tempfile
import uuid

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE = "ipython_mcp_helper"
PACKAGE_DIR = os.path.join(HERE, os.pardir, PACKAGE)
# The server's install code for a default config, written by the cargo test that runs this suite
# (tests/it/python_helper.rs): the real bootstrap and the package exactly as the binary embeds it.
INSTALL_CODE_ENV = "IPYTHON_MCP_HELPER_INSTALL_CODE"


def load_helper():
    """A fresh copy of the package, imported from its files, with fresh module state.

    The kernel tests install it the way the server does (see ``install_cells``); these
    in-process copies serve the unit tests of its pure parts and of its methods.
    """
    for name in [name for name in sys.modules if name == PACKAGE or name.startswith(PACKAGE + ".")]:
        del sys.modules[name]
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        PACKAGE, os.path.join(PACKAGE_DIR, "__init__.py"), submodule_search_locations=[PACKAGE_DIR]
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[PACKAGE] = module
    spec.loader.exec_module(module)
    return module


def server_install_code():
    """The server's install code (see ``INSTALL_CODE_ENV``), or None outside cargo."""
    path = os.environ.get(INSTALL_CODE_ENV)
    if not path:
        return None
    with open(path, encoding="utf-8") as file:
        return file.read()


try:
    import ipykernel  # noqa: F401
    import jupyter_client  # noqa: F401

    HAVE_KERNEL = True
except ImportError:
    HAVE_KERNEL = False

# Skipped only where a kernel cannot run AND this is not CI: under CI=true they must run.
needs_kernel = pytest.mark.skipif(
    not HAVE_KERNEL and os.environ.get("CI") != "true",
    reason="ipykernel/jupyter_client not installed (set CI=true to make this a failure)",
)

# A trusted library directory for the kernel under test (created by the fixture).
LIBDIR = os.path.join(tempfile.gettempdir(), "ipython-mcp-test-lib-%d" % os.getpid())
TESTLIB_SOURCE = '''"""A small library preloaded by the helper's namespace config."""


def greet(name="world"):
    """Says hello.

    A second paragraph.
    """
    return "hello " + name
'''

CONFIG = {
    "max_text_chars": 8192,
    "text_head_chars": 1638,
    "max_display_items": 20,
    "max_image_bytes": 1_048_576,
    "max_traceback_chars": 4096,
    "max_string_chars": 8193,
    "raw_forward_chars": 65536,
    "report_always": 1,
    "max_repr_chars": 64,
    "max_results": 10,
    "max_json_depth": 4,
    "max_fit_input_bytes": 2_000_000,
    "history_batch_cells": 0,
    "namespace": {
        "library_paths": [LIBDIR],
        "preload_modules": ["mcp_testlib"],
        "module_aliases": {"json": "js"},
    },
}


def private_exec(code, **names):
    """Code that runs ``code`` in a fresh dict holding ``names``: nothing touches user_ns."""
    return "exec(%r, %r)" % (code, dict(names))


class Run:
    """The messages of one request, in iopub order, plus its shell reply."""

    def __init__(self, msg_id, messages, reply):
        self.msg_id = msg_id
        self.messages = messages
        self.reply = reply

    def of(self, msg_type):
        return [msg for msg in self.messages if msg["msg_type"] == msg_type]

    def stream_text(self, name):
        return "".join(msg["content"]["text"] for msg in self.of("stream") if msg["content"]["name"] == name)

    def comm_data(self):
        return [msg["content"]["data"] for msg in self.of("comm_msg")]

    def report(self):
        reports = [data for data in self.comm_data() if data.get("event") == "execution_report"]
        assert len(reports) == 1, self.comm_data()
        return reports[0]

    def index(self, predicate):
        return next(i for i, msg in enumerate(self.messages) if predicate(msg))


class KernelClient:
    def __init__(self, kc):
        self.kc = kc
        self.comm_id = None

    def send(self, msg_type, content):
        msg = self.kc.session.msg(msg_type, content)
        self.kc.shell_channel.send(msg)
        return self.collect(msg["header"]["msg_id"], wait_reply=msg_type == "execute_request")

    def execute(self, code, silent=False, user_expressions=None):
        content = {
            "code": code,
            "silent": silent,
            "store_history": not silent,
            "user_expressions": user_expressions or {},
            "allow_stdin": False,
            "stop_on_error": False,
        }
        return self.send("execute_request", content)

    def collect(self, msg_id, wait_reply):
        messages = []
        while True:
            # Per-message bounds, above any in-cell deadline of these tests.
            msg = self.kc.get_iopub_msg(timeout=120)
            if msg["parent_header"].get("msg_id") != msg_id:
                continue  # e.g. late fd output of an earlier request
            messages.append(msg)
            if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
                break
        reply = None
        while wait_reply and reply is None:
            shell_msg = self.kc.get_shell_msg(timeout=120)
            if shell_msg["parent_header"].get("msg_id") == msg_id:
                reply = shell_msg
        return Run(msg_id, messages, reply)

    def open_comm(self):
        comm_id = uuid.uuid4().hex
        run = self.send("comm_open", {"comm_id": comm_id, "target_name": "ipython_mcp", "data": {}})
        assert {"event": "ready", "version": "1"} in run.comm_data()
        self.comm_id = comm_id
        return run

    def request(self, method, params=None, request_id="r1"):
        data = {"id": request_id, "method": method, "params": {} if params is None else params}
        run = self.send("comm_msg", {"comm_id": self.comm_id, "data": data})
        replies = [data for data in run.comm_data() if data.get("id") == request_id]
        assert len(replies) == 1, run.comm_data()
        return replies[0]

    def user_expression(self, expression):
        run = self.execute("", silent=True, user_expressions={"value": expression})
        value = run.reply["content"]["user_expressions"]["value"]
        assert value["status"] == "ok", value
        return value["data"]["text/plain"]


def install_cells(config):
    """The cells that install the helper with ``config`` in a fresh kernel, as the server does.

    Under cargo the first is the server's own install code (whose default config the next
    install replaces); run standalone, the package is imported from its files in the kernel.
    Either is followed by a second install in the same cell, and a third in its own cell after
    the comm is open (``kernel`` fixture): every count the tests check would double if install
    wrapped twice, and the comm must survive re-installs.
    """
    reinstall = "import sys; sys.modules[%r].install(CONFIG_DICT)" % PACKAGE
    code = server_install_code()
    if code is None:
        load = """
import importlib.util, os, sys
spec = importlib.util.spec_from_file_location(PACKAGE, os.path.join(DIRECTORY, "__init__.py"), submodule_search_locations=[DIRECTORY])
mod = importlib.util.module_from_spec(spec)
sys.modules[PACKAGE] = mod
spec.loader.exec_module(mod)
mod.install(CONFIG_DICT)
"""
        code = private_exec(load, PACKAGE=PACKAGE, DIRECTORY=os.path.abspath(PACKAGE_DIR), CONFIG_DICT=config)
    first = code + "\n" + private_exec(reinstall, CONFIG_DICT=config)
    return first, private_exec(reinstall, CONFIG_DICT=config)


def start_kernel():
    """A fresh ipykernel (manager, client) with fd capture on, as the server's kernels have."""
    from jupyter_client.manager import start_new_kernel

    # ipykernel turns off fd capture when it sees PYTEST_CURRENT_TEST; the server's kernels
    # have it on, so the kernel under test must too.
    env = {name: value for name, value in os.environ.items() if name != "PYTEST_CURRENT_TEST"}
    return start_new_kernel(extra_arguments=["--HistoryManager.hist_file=:memory:"], env=env)


def write_module(name, source):
    with open(os.path.join(LIBDIR, name + ".py"), "w", encoding="utf-8") as file:
        file.write(source)
