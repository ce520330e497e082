"""Tests for ipython_mcp_helper: the pure parts, then end to end against a real ipykernel.

Run from the workspace root:  python -m pytest crates/ipython-mcp-kernel/python/tests -q
"""

import ast
import base64
import json
import os
import random
import shutil
import tempfile
import time
import types
import uuid

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(HERE, os.pardir, "ipython_mcp_helper.py"), encoding="utf-8") as _file:
    SOURCE = _file.read()
with open(os.path.join(HERE, "sink_cases.json"), encoding="utf-8") as _file:
    SINK_CASES = json.load(_file)["cases"]


def load_helper():
    """Loads the module exactly as the server's bootstrap does: no file, no package."""
    module = types.ModuleType("ipython_mcp_helper")
    module.__file__ = "<ipython-mcp-helper>"
    exec(compile(SOURCE, "<ipython-mcp-helper>", "exec"), module.__dict__)
    return module


helper = load_helper()


# --------------------------------------------------------------------------------------------
# The terminal sink
# --------------------------------------------------------------------------------------------

CLEAR = object()


def reference_render(events):
    """The obviously correct, unbounded model: one character at a time."""
    lines, line, cursor = [], [], 0
    for event in events:
        if event is CLEAR:
            lines, line, cursor = [], [], 0
            continue
        for char in event:
            if char == "\n":
                lines.append("".join(line))
                line, cursor = [], 0
            elif char == "\r":
                cursor = 0
            else:
                if cursor < len(line):
                    line[cursor] = char
                else:
                    line.append(char)
                cursor += 1
    return "".join(text + "\n" for text in lines) + "".join(line)


def case_events(case):
    """A fixture case as a list of writes (str) and CLEARs; see "_format" in the JSON."""
    clear_after = set(case.get("clear_after", []))
    events = []
    for index, write in enumerate(case["writes"]):
        if isinstance(write, str):
            events.append(write)
        else:
            text, times = write["repeat"]
            events.extend([text] * times)
        if index in clear_after:
            events.append(CLEAR)
    return events


def run_sink(sink, events):
    for event in events:
        if event is CLEAR:
            sink.clear()
        else:
            sink.write(event)
    return sink.text(), sink.omitted()


def expected_from_reference(limit, events):
    rendered = reference_render(events)
    return rendered[:limit], len(rendered) - min(len(rendered), limit)


class SmallChunkSink(helper.TerminalSink):
    """Splits every write into 3-character slices, to exercise slice boundaries."""

    _CHUNK = 3


def test_fixture_has_the_promised_coverage():
    assert len(SINK_CASES) >= 25
    assert len({case["name"] for case in SINK_CASES}) == len(SINK_CASES)


@pytest.mark.parametrize("case", SINK_CASES, ids=[case["name"] for case in SINK_CASES])
def test_fixture_expectations_match_the_reference_model(case):
    assert expected_from_reference(case["limit"], case_events(case)) == (case["text"], case["omitted"])


@pytest.mark.parametrize("case", SINK_CASES, ids=[case["name"] for case in SINK_CASES])
@pytest.mark.parametrize("sink_class", [helper.TerminalSink, SmallChunkSink])
def test_sink_matches_fixture(case, sink_class):
    text, omitted = run_sink(sink_class(case["limit"]), case_events(case))
    assert (text, omitted) == (case["text"], case["omitted"])


@pytest.mark.parametrize("sink_class", [helper.TerminalSink, SmallChunkSink])
def test_sink_matches_reference_on_random_input(sink_class):
    rng = random.Random(20261201)
    alphabet = ["a", "b", "\r", "\n", "€", "𝄞", "\r\n"]
    for _ in range(3000):
        limit = rng.randint(0, 12)
        events = []
        for _ in range(rng.randint(0, 8)):
            if rng.random() < 0.05:
                events.append(CLEAR)
            else:
                events.append("".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12))))
        sink = sink_class(limit)
        assert run_sink(sink, events) == expected_from_reference(limit, events), (limit, events)
        assert len(sink.text()) <= limit


def test_sink_counts_raw_characters_and_clear_resets_them():
    sink = helper.TerminalSink(4)
    sink.write("ab\rc\n")
    assert sink.total_written() == 5
    sink.clear()
    assert (sink.text(), sink.omitted(), sink.total_written()) == ("", 0, 0)


def test_sink_memory_stays_bounded():
    sink = helper.TerminalSink(100)
    for _ in range(1000):
        sink.write("y" * 1000 + "\r" + "z" * 500 + "\n")
    stored = sum(map(len, sink._head)) + len(sink._line)
    assert stored <= 100
    assert sink.omitted() == 1000 * 1001 - 100


def test_sink_is_fast_on_huge_writes():
    sink = helper.TerminalSink(8192)
    huge = "x" * 200_000_000
    started = time.perf_counter()
    sink.write(huge)
    one_line = time.perf_counter() - started
    assert sink.omitted() == 200_000_000 - 8192

    sink = helper.TerminalSink(8192)
    many = "".join("line %d of a lot of output\n" % i for i in range(50_000))
    started = time.perf_counter()
    for line in many.splitlines(keepends=True):
        sink.write(line)
    sink.write(many)
    many_lines = time.perf_counter() - started
    assert sink.omitted() == 2 * len(many) - 8192

    sink = helper.TerminalSink(8192)
    bars = "\r 42%|####      | 420/1000" * 1_000_000
    started = time.perf_counter()
    sink.write(bars)
    progress = time.perf_counter() - started
    assert sink.text() == " 42%|####      | 420/1000"
    # Catches quadratic behaviour only (that would take minutes); typical times are far below
    # a second, and a loaded 2-core machine must not fail this.
    assert max(one_line, many_lines, progress) < 30.0, (one_line, many_lines, progress)


# --------------------------------------------------------------------------------------------
# Sanitizing, bundles, tracebacks, requests
# --------------------------------------------------------------------------------------------


def test_sanitize_replaces_lone_surrogates_one_for_one():
    assert helper.sanitize_text("plain") == "plain"
    assert helper.sanitize_text("é𝄞") == "é𝄞"
    assert helper.sanitize_text("a\ud800b\udfffc") == "a\ufffdb\ufffdc"
    json.dumps(helper.sanitize_text("\udc80")).encode("utf-8")


def test_bound_bundle_cuts_strings_and_drops_big_images():
    png = base64.b64encode(b"\x89PNG" + b"\0" * 2000).decode("ascii")
    data = {
        "text/plain": "t" * 50,
        "image/svg+xml": "<svg>" + "s" * 100,
        "image/png": png,
        "image/jpeg": "j" * 4000,
        "application/json": {"nested": ["n" * 30, {"deep": "d" * 30}], "n": 3},
    }
    metadata = {"image/png": {"width": 10}, "note": "m" * 40}
    original = json.dumps([data, metadata])

    kept, meta = helper.bound_bundle(data, metadata, max_string_chars=20, max_image_bytes=2500)

    assert json.dumps([data, metadata]) == original  # inputs untouched
    assert kept["text/plain"] == "t" * 20
    assert kept["image/svg+xml"] == "<svg>" + "s" * 100  # an image: kept whole while it fits
    assert kept["image/png"] == png  # 2004 decoded bytes fit; images are never cut
    assert "image/jpeg" not in kept
    assert kept["application/json"] == {"nested": ["n" * 20, {"deep": "d" * 20}], "n": 3}
    assert meta["note"] == "m" * 20
    assert meta["image/png"] == {"width": 10}
    assert meta["ipython_mcp"] == {"omitted_images": {"image/jpeg": 3000}}


def test_oversized_png_and_jpeg_go_to_the_server_whole_for_downscaling():
    # The server downscales them (for every kernel); the helper only decides what it sends.
    data = {"image/png": "p" * 4000, "image/jpeg": "j" * 4000, "image/gif": "g" * 4000}
    kept, meta = helper.bound_bundle(data, {}, 100, 1000, max_fit_input_bytes=3000)
    assert kept == {"image/png": "p" * 4000, "image/jpeg": "j" * 4000}
    assert meta == {"ipython_mcp": {"omitted_images": {"image/gif": 3000}}}
    # Past the largest image the server decodes, they are omitted like any other.
    kept, meta = helper.bound_bundle(data, {}, 100, 1000, max_fit_input_bytes=2999)
    assert kept == {}
    assert meta == {"ipython_mcp": {"omitted_images": {"image/png": 3000, "image/jpeg": 3000, "image/gif": 3000}}}


def test_bound_bundle_drops_an_svg_too_big_to_return():
    kept, meta = helper.bound_bundle({"image/svg+xml": "<svg>" + "é" * 10, "text/plain": "x"}, {}, 100, 20)
    assert kept == {"text/plain": "x"}
    assert meta == {"ipython_mcp": {"omitted_images": {"image/svg+xml": 25}}}


def test_bound_bundle_handles_raw_bytes_images_and_missing_metadata():
    kept, meta = helper.bound_bundle({"image/png": b"\0" * 10, "image/gif": b"\0" * 11}, None, 5, 10)
    assert kept == {"image/png": b"\0" * 10}
    assert meta == {"ipython_mcp": {"omitted_images": {"image/gif": 11}}}


def test_bound_bundle_sanitizes_surrogates():
    kept, meta = helper.bound_bundle({"text/plain": "x\ud800"}, {"k\udc00": "v"}, 100, 100)
    assert kept == {"text/plain": "x\ufffd"}
    assert meta == {"k\ufffd": "v"}


def test_traceback_is_stripped_of_ansi_and_kept_when_short():
    stb = ["\x1b[31m-----\x1b[39m", "\x1b[0;31mValueError\x1b[0m: boom", "\x1b]8;;http://x\x07link\x1b]8;;\x07"]
    assert helper.bound_traceback(stb, 100) == ["-----", "ValueError: boom", "link"]


def test_traceback_bound_keeps_head_and_tail_with_exact_count():
    stb = ["header\n", "frame " * 200, "frame2 " * 200, "\x1b[31mValueError\x1b[39m: the end"]
    plain = [helper.strip_ansi(entry) for entry in stb]
    bounded = helper.bound_traceback(stb, 200)

    marker = [entry for entry in bounded if entry.startswith("... ")]
    assert len(marker) == 1
    kept = [entry for entry in bounded if not entry.startswith("... ")]
    assert sum(map(len, kept)) == 200
    assert bounded[0] == "header\n"
    assert bounded[-1] == "ValueError: the end"
    omitted = sum(map(len, plain)) - 200
    assert marker[0] == "... %d characters of traceback omitted ..." % omitted


def test_traceback_single_huge_entry_keeps_both_ends():
    bounded = helper.bound_traceback(["S" + "x" * 10_000 + "SyntaxError: bad"], 400)
    assert bounded[0].startswith("Sxxx") and len(bounded[0]) == 100
    assert bounded[2].endswith("SyntaxError: bad") and len(bounded[2]) == 300
    assert bounded[1] == "... 9617 characters of traceback omitted ..."


def test_requests_always_get_a_reply():
    assert helper.handle_request({"id": "1", "method": "ping", "params": {"x": 1}}) == {
        "id": "1",
        "ok": True,
        "result": {"x": 1},
    }
    unknown = helper.handle_request({"id": "2", "method": "nope", "params": {}})
    assert unknown["ok"] is False and unknown["error"]["code"] == "unknown_method"
    for bad in (None, [], {"id": "3"}, {"id": "3", "method": "ping", "params": []}):
        reply = helper.handle_request(bad)
        assert reply["ok"] is False and reply["error"]["code"] == "invalid_request"
    not_installed = helper.handle_request({"id": "4", "method": "config"})
    assert not_installed["error"]["code"] == "not_installed"


def test_requests_report_exceptions_from_methods():
    module = load_helper()
    module.METHODS["boom"] = lambda params: 1 / 0
    reply = module.handle_request({"id": "5", "method": "boom", "params": {}})
    assert reply == {
        "id": "5",
        "ok": False,
        "error": {"code": "internal_error", "message": "ZeroDivisionError: division by zero"},
    }


def test_module_constants():
    assert helper.HELPER_VERSION == "1"
    assert helper.COMM_TARGET == "ipython_mcp"


# --------------------------------------------------------------------------------------------
# End to end, against a real ipykernel
# --------------------------------------------------------------------------------------------

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
    "namespace": {
        "library_paths": [LIBDIR],
        "preload_modules": ["mcp_testlib"],
        "module_aliases": {"json": "js"},
    },
}

BOOTSTRAP = """
import sys, types
mod = types.ModuleType("ipython_mcp_helper"); mod.__file__ = "<ipython-mcp-helper>"
sys.modules["ipython_mcp_helper"] = mod
exec(compile(SOURCE, "<ipython-mcp-helper>", "exec"), mod.__dict__)
mod.install(CONFIG_DICT)
"""


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


@pytest.fixture(scope="module")
def kernel():
    from jupyter_client.manager import start_new_kernel

    # ipykernel turns off fd capture when it sees PYTEST_CURRENT_TEST; the server's kernels
    # have it on, so the kernel under test must too.
    env = {name: value for name, value in os.environ.items() if name != "PYTEST_CURRENT_TEST"}
    os.makedirs(LIBDIR, exist_ok=True)
    with open(os.path.join(LIBDIR, "mcp_testlib.py"), "w", encoding="utf-8") as file:
        file.write(TESTLIB_SOURCE)
    km, kc = start_new_kernel(extra_arguments=["--HistoryManager.hist_file=:memory:"], env=env)
    client = KernelClient(kc)
    try:
        # The server's bootstrap, followed by a second install in the same cell and a third in
        # its own cell after the comm is open: every count below would double if install
        # wrapped twice, and the comm must survive re-installs.
        bootstrap = BOOTSTRAP + "mod.install(CONFIG_DICT)\n"
        run = client.execute(private_exec(bootstrap, SOURCE=SOURCE, CONFIG_DICT=CONFIG), silent=True)
        assert run.reply["content"]["status"] == "ok", run.reply["content"]
        client.open_comm()
        reinstall = "import sys; sys.modules['ipython_mcp_helper'].install(CONFIG_DICT)"
        run = client.execute(private_exec(reinstall, CONFIG_DICT=CONFIG), silent=True)
        assert run.reply["content"]["status"] == "ok", run.reply["content"]
        yield client
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
        shutil.rmtree(LIBDIR, ignore_errors=True)


@needs_kernel
class TestKernel:
    def test_install_reports_versions_and_leaves_user_namespace_alone(self, kernel):
        info = kernel.user_expression(
            "__import__('sys').modules['ipython_mcp_helper'].install(%r)" % CONFIG
        )
        import ipykernel
        import platform

        assert ast.literal_eval(info) == (
            {
                "version": "1",
                "python": platform.python_version(),
                "ipykernel": ipykernel.__version__,
                "namespace_errors": [],
            }
        )
        names = kernel.user_expression("sorted(k for k in get_ipython().user_ns if 'mod' in k or 'SOURCE' in k)")
        assert names == "[]"

    def test_stream_class_is_swapped_once(self, kernel):
        count = kernel.user_expression(
            "sum(1 for c in type(__import__('sys').stdout).__mro__ if c.__dict__.get('_ipython_mcp_bounded'))"
        )
        assert count == "1"

    def test_rpc(self, kernel):
        assert kernel.request("ping", {"x": [1, "é"]}) == {"id": "r1", "ok": True, "result": {"x": [1, "é"]}}
        assert kernel.request("config")["result"] == dict(CONFIG, spool_dir=None, spool_max_bytes=0)
        unknown = kernel.request("nope")
        assert unknown["ok"] is False and unknown["error"]["code"] == "unknown_method"
        kernel.execute("import sys; sys.modules['ipython_mcp_helper'].METHODS['boom'] = lambda p: 1 / 0", silent=True)
        boom = kernel.request("boom")
        assert boom["error"] == {"code": "internal_error", "message": "ZeroDivisionError: division by zero"}

    def test_quiet_mode_reports_only_what_was_held_back(self, kernel):
        # The server runs with report_always=0: a cell whose output all reached iopub needs no
        # report (the server's own sink saw every character); one that was cut still gets it.
        quiet = dict(CONFIG, report_always=0)
        set_quiet = "import sys; sys.modules['ipython_mcp_helper'].install(CONFIG_DICT)"
        try:
            assert kernel.execute(private_exec(set_quiet, CONFIG_DICT=quiet), silent=True).reply["content"]["status"] == "ok"
            small = kernel.execute("print('small')")
            assert small.stream_text("stdout") == "small\n"
            assert [d for d in small.comm_data() if d.get("event") == "execution_report"] == []
            big = kernel.execute("print('x' * 100_000)")
            assert big.report()["stdout"]["omitted_chars"] == 100_001 - 8192
            displays = kernel.execute("from IPython.display import display\nfor i in range(25): display(i)")
            assert displays.report()["display_omitted"] == 5
        finally:
            kernel.execute(private_exec(set_quiet, CONFIG_DICT=CONFIG), silent=True)

    def test_huge_print_is_bounded_in_the_kernel(self, kernel):
        run = kernel.execute("print('x' * 5_000_000)")
        assert run.reply["content"]["status"] == "ok"
        forwarded = run.stream_text("stdout")
        assert forwarded == "x" * 65536
        report = run.report()
        assert report == {
            "event": "execution_report",
            "stdout": {"text": "x" * 8192, "omitted_chars": 5_000_001 - 8192},
            "stderr": {"text": "", "omitted_chars": 0},
            "display_count": 0,
            "display_omitted": 0,
            "raw_chars": {"stdout": 5_000_001, "stderr": 0},
            "spool": {},
        }
        # Every stream message precedes the report, which precedes idle.
        report_at = run.index(lambda msg: msg["msg_type"] == "comm_msg")
        assert all(i < report_at for i, msg in enumerate(run.messages) if msg["msg_type"] == "stream")
        assert run.messages[-1]["msg_type"] == "status" and report_at < len(run.messages) - 1
        # IPython 9 tees stream writes into its history; it must only see what was forwarded.
        count = run.reply["content"]["execution_count"]
        kept = kernel.user_expression(
            "sum(len(s) for o in get_ipython().history_manager.outputs[%d] for s in o.bundle.get('stream', []))"
            % count
        )
        assert int(kept) == 65536

    def test_many_writes_and_stderr(self, kernel):
        code = "import sys\nfor i in range(50_000):\n    sys.stderr.write('%05d\\n' % i)"
        report = kernel.execute(code).report()
        assert report["stderr"]["text"] == "".join("%05d\n" % i for i in range(50_000))[:8192]
        assert report["stderr"]["omitted_chars"] == 300_000 - 8192
        assert report["raw_chars"] == {"stdout": 0, "stderr": 300_000}

    def test_progress_bar_collapses(self, kernel):
        code = (
            "import sys\n"
            "for i in range(1, 3001):\n"
            "    sys.stderr.write('\\r%4d/3000 |%-30s|' % (i, '#' * (i // 100)))\n"
            "sys.stderr.write('\\ndone\\n')"
        )
        report = kernel.execute(code).report()
        assert report["stderr"] == {"text": "3000/3000 |%s|\ndone\n" % ("#" * 30), "omitted_chars": 0}

    def test_clear_output(self, kernel):
        code = (
            "from IPython.display import clear_output, display\n"
            "print('gone'); clear_output(); print('kept')\n"
            "for i in range(40):\n"
            "    clear_output(wait=True)\n"
            "    print(i)\n"
            "    display(i)\n"
        )
        run = kernel.execute(code)
        report = run.report()
        assert report["stdout"] == {"text": "39\n", "omitted_chars": 0}
        assert (report["display_count"], report["display_omitted"]) == (1, 0)
        assert len(run.of("display_data")) == 40
        assert len(run.of("clear_output")) == 41

    def test_display_items_are_capped(self, kernel):
        code = (
            "from IPython.display import display\n"
            "handle = display('first', display_id=True)\n"
            "for i in range(29):\n"
            "    display(i)\n"
            "handle.update('updated')\n"
        )
        run = kernel.execute(code)
        assert len(run.of("display_data")) == 20
        assert len(run.of("update_display_data")) == 1
        report = run.report()
        assert (report["display_count"], report["display_omitted"]) == (30, 10)

    def test_display_bundles_are_bounded(self, kernel):
        code = (
            "from IPython.display import display\n"
            "display({'text/plain': 'p' * 20_000, 'image/gif': 'A' * 2_000_000,"
            " 'image/svg+xml': '<svg>' + 's' * 20_000}, raw=True)\n"
            "display({'text/plain': 'small', 'image/png': 'iVBORw0KGgo='}, raw=True)\n"
            "display({'image/png': 'A' * 2_000_000}, raw=True)\n"
            "display({'image/jpeg': 'A' * 3_000_000}, raw=True)\n"
        )
        big, small, to_fit, too_big = [msg["content"] for msg in kernel.execute(code).of("display_data")]
        assert big["data"] == {"text/plain": "p" * 8193, "image/svg+xml": "<svg>" + "s" * 20_000}
        assert big["metadata"] == {"ipython_mcp": {"omitted_images": {"image/gif": 1_500_000}}}
        assert small["data"] == {"text/plain": "small", "image/png": "iVBORw0KGgo="}
        # An oversized PNG goes to the server whole (it downscales), up to max_fit_input_bytes.
        assert to_fit["data"] == {"image/png": "A" * 2_000_000}
        assert too_big["data"] == {}
        assert too_big["metadata"] == {"ipython_mcp": {"omitted_images": {"image/jpeg": 2_250_000}}}

    def test_execute_result_is_bounded(self, kernel):
        run = kernel.execute("'x' * 50_000_000")
        (result,) = run.of("execute_result")
        assert result["content"]["data"]["text/plain"] == "'" + "x" * 8192

    def test_traceback_is_bounded_and_plain(self, kernel):
        run = kernel.execute("def f():\n    raise ValueError('boom ' * 100_000)\nf()")
        (error,) = run.of("error")
        traceback = error["content"]["traceback"]
        assert not any("\x1b" in entry for entry in traceback)
        markers = [entry for entry in traceback if entry.startswith("... ") and "of traceback omitted" in entry]
        assert len(markers) == 1
        assert sum(len(entry) for entry in traceback if entry not in markers) == 4096
        assert traceback[1].startswith("ValueError")
        assert traceback[-1].endswith("boom ")
        assert len(error["content"]["evalue"]) == 8193
        assert run.reply["content"]["traceback"] == traceback

    def test_short_traceback_is_only_stripped(self, kernel):
        run = kernel.execute("1/0")
        traceback = run.of("error")[0]["content"]["traceback"]
        assert traceback[-1] == "ZeroDivisionError: division by zero"
        assert not any("\x1b" in entry or entry.startswith("... ") for entry in traceback)

    def test_fd_level_output_is_bounded(self, kernel):
        # C-level writes reach OutStream through ipykernel's pipe-reading thread; wait (with a
        # deadline) until that thread has delivered all of it before the cell ends.
        code = (
            "import os, sys, time\n"
            "os.write(1, b'y' * 200_000)\n"
            "deadline = time.monotonic() + 60\n"
            "while sys.stdout._ipython_mcp_channel.written < 200_000 and time.monotonic() < deadline:\n"
            "    time.sleep(0.01)\n"
        )
        run = kernel.execute(code)
        report = run.report()
        assert report["raw_chars"]["stdout"] == 200_000
        assert report["stdout"]["omitted_chars"] == 200_000 - 8192
        assert len(run.stream_text("stdout")) <= 65536

    def test_displays_from_late_post_execute_callbacks_are_counted(self, kernel):
        # matplotlib-inline registers its figure flush as a post_execute callback when pyplot
        # is first imported, i.e. mid-cell and after the helper: the report must still follow.
        code = (
            "from IPython.display import display\n"
            "def _late():\n"
            "    get_ipython().events.unregister('post_execute', _late)\n"
            "    display('figure')\n"
            "get_ipython().events.register('post_execute', _late)\n"
        )
        run = kernel.execute(code)
        assert (run.report()["display_count"], len(run.of("display_data"))) == (1, 1)
        assert run.index(lambda msg: msg["msg_type"] == "display_data") < run.index(
            lambda msg: msg["msg_type"] == "comm_msg"
        )

    def test_nested_run_cell_is_one_execution(self, kernel):
        run = kernel.execute("print('before')\nget_ipython().run_cell(\"print('inner')\")\nprint('after')")
        assert run.report()["stdout"]["text"] == "before\ninner\nafter\n"

    def test_async_cell_is_reported(self, kernel):
        run = kernel.execute("import asyncio\nawait asyncio.sleep(0)\nprint('x' * 100_000)")
        report = run.report()
        assert report["stdout"]["omitted_chars"] == 100_001 - 8192
        assert len(run.stream_text("stdout")) == 65536

    def test_spool_keeps_the_full_streams_up_to_its_bound(self, kernel, tmp_path):
        spool_dir = str(tmp_path)
        install = "import sys; sys.modules['ipython_mcp_helper'].install(%r)"
        config = dict(CONFIG, spool_dir=spool_dir, spool_max_bytes=100_000)
        assert kernel.execute(install % config, silent=True).reply["content"]["status"] == "ok"
        try:
            code = (
                "import sys\n"
                "for i in range(20000): print('line %d' % i)\n"
                "print('é' * 3, file=sys.stderr)"
            )
            run = kernel.execute(code)
            assert run.reply["content"]["status"] == "ok"
            full = "".join("line %d\n" % i for i in range(20000)).encode()
            with open(os.path.join(spool_dir, run.msg_id + ".stdout"), "rb") as file:
                assert file.read() == full[:100_000]
            with open(os.path.join(spool_dir, run.msg_id + ".stderr"), "rb") as file:
                assert file.read() == "ééé\n".encode()
            assert os.stat(os.path.join(spool_dir, run.msg_id + ".stdout")).st_mode & 0o777 == 0o600
            assert run.report()["spool"] == {
                "stdout": {"bytes": 100_000, "dropped_bytes": len(full) - 100_000},
                "stderr": {"bytes": 7, "dropped_bytes": 0},
            }
            # A quiet execution writes no file; an existing file is never reused or followed.
            quiet = kernel.execute("x = 1")
            assert not any(name.startswith(quiet.msg_id) for name in os.listdir(spool_dir))
        finally:
            assert kernel.execute(install % CONFIG, silent=True).reply["content"]["status"] == "ok"

    def test_output_log_keeps_every_output_unbounded_in_order(self, kernel, tmp_path):
        spool_dir = str(tmp_path)
        install = "import sys; sys.modules['ipython_mcp_helper'].install(%r)"
        config = dict(CONFIG, spool_dir=spool_dir, spool_max_bytes=1_000_000)
        assert kernel.execute(install % config, silent=True).reply["content"]["status"] == "ok"
        try:
            code = (
                "from IPython.display import display, HTML, clear_output\n"
                "print('a')\n"
                "for i in range(30): display(HTML('<b>%d</b>' % i + 'x' * 10_000))\n"
                "print('b')\n"
                "h = display('old', display_id='d1')\n"
                "h.update('new')\n"
                "import sys; print('e', file=sys.stderr)\n"
                "1 / 0\n"
            )
            run = kernel.execute(code)
            assert len(run.of("display_data")) == CONFIG["max_display_items"]
            with open(os.path.join(spool_dir, run.msg_id + ".outputs"), "rb") as file:
                lines = [json.loads(line) for line in file]
            kinds = [(line["output_type"], line.get("name")) for line in lines]
            assert kinds == (
                [("stream", "stdout")]
                + [("display_data", None)] * 30
                + [("stream", "stdout"), ("display_data", None), ("update_display_data", None), ("stream", "stderr"), ("error", None)]
            )
            assert lines[0]["offset"] == 0 and lines[31]["offset"] == 2
            assert lines[30]["data"]["text/html"] == "<b>29</b>" + "x" * 10_000
            assert lines[32]["transient"] == {"display_id": "d1"} and lines[33]["data"]["text/plain"] == "'new'"
            assert (lines[35]["ename"], lines[35]["evalue"]) == ("ZeroDivisionError", "division by zero")
            assert len(lines[35]["traceback"]) > 1 and "ZeroDivisionError" in lines[35]["traceback"][-1]
            assert os.stat(os.path.join(spool_dir, run.msg_id + ".outputs")).st_mode & 0o777 == 0o600
            # Past its bound the log ends with a marker.
            big = kernel.execute("from IPython.display import display, HTML\nfor i in range(3): display(HTML('y' * 600_000))")
            with open(os.path.join(spool_dir, big.msg_id + ".outputs"), "rb") as file:
                kinds = [json.loads(line)["output_type"] for line in file]
            assert kinds == ["display_data", "omitted"]
            # A quiet execution writes no log.
            quiet = kernel.execute("x = 1")
            assert not any(name.startswith(quiet.msg_id) for name in os.listdir(spool_dir))
        finally:
            assert kernel.execute(install % CONFIG, silent=True).reply["content"]["status"] == "ok"

    def test_spool_config_is_checked(self, kernel):
        install = "import sys; sys.modules['ipython_mcp_helper'].install(%r)"
        for bad in ({"spool_dir": "relative/dir"}, {"spool_max_bytes": -1}, {"spool_dir": 3}):
            reply = kernel.execute(install % dict(CONFIG, **bad), silent=True).reply["content"]
            assert (reply["status"], reply["ename"]) == ("error", "ValueError"), bad

    def test_bad_config_is_rejected_and_leaves_the_helper_working(self, kernel):
        bad = dict(CONFIG, max_text_chars=-1)
        code = "import sys; sys.modules['ipython_mcp_helper'].install(%r)" % bad
        reply = kernel.execute(code, silent=True).reply["content"]
        assert (reply["status"], reply["ename"]) == ("error", "ValueError")
        assert kernel.execute("print('still here')").report()["stdout"]["text"] == "still here\n"

    def test_concurrent_writers_are_counted_exactly(self, kernel):
        code = (
            "import sys, threading\n"
            "def spam():\n"
            "    for _ in range(5_000):\n"
            "        sys.stdout.write('0123456789\\n')\n"
            "threads = [threading.Thread(target=spam) for _ in range(4)]\n"
            "for t in threads: t.start()\n"
            "spam()\n"
            "for t in threads: t.join()\n"
        )
        run = kernel.execute(code)
        report = run.report()
        assert report["raw_chars"]["stdout"] == 5 * 5_000 * 11
        assert report["stdout"]["omitted_chars"] == 5 * 5_000 * 11 - 8192
        assert report["stdout"]["text"] == ("0123456789\n" * 745)[:8192]
        assert run.stream_text("stdout") == ("0123456789\n" * 5958)[:65536]

    def test_lone_surrogates_are_sanitized(self, kernel):
        run = kernel.execute("print('a\\ud800b')")
        assert run.stream_text("stdout") == "a\ufffdb\n"
        assert run.report()["stdout"]["text"] == "a\ufffdb\n"

    def test_silent_executions_are_reported(self, kernel):
        report = kernel.execute("print('quiet')", silent=True).report()
        assert report["stdout"]["text"] == "quiet\n"

    def test_reports_go_to_the_latest_comm_only(self, kernel):
        first = kernel.comm_id
        kernel.open_comm()
        run = kernel.execute("print(1)")
        assert [msg["content"]["comm_id"] for msg in run.of("comm_msg")] == [kernel.comm_id]
        closed = kernel.comm_id
        kernel.send("comm_close", {"comm_id": closed, "data": {}})
        assert kernel.execute("print(2)").of("comm_msg") == []
        kernel.open_comm()
        assert kernel.comm_id not in (first, closed)
        assert kernel.execute("print(3)").report()["stdout"]["text"] == "3\n"


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


def write_module(name, source):
    with open(os.path.join(LIBDIR, name + ".py"), "w", encoding="utf-8") as file:
        file.write(source)


@needs_kernel
class TestNamespace:
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
        bad = dict(CONFIG, namespace=dict(CONFIG["namespace"], preload_modules=["mcp_no_such_module", "mcp_testlib"],
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
            invalid = dict(CONFIG, namespace={"module_aliases": {"json": "not an identifier"}})
            reply = kernel.execute("__import__('sys').modules['ipython_mcp_helper'].install(%r)" % invalid, silent=True)
            assert (reply.reply["content"]["ename"], "not an identifier" in reply.reply["content"]["evalue"]) == (
                "ValueError",
                True,
            )
            assert self.ok(kernel, "install_info")["bindings"] == ["broken", "mcp_no_such_module", "mcp_testlib"]
        finally:
            ast.literal_eval(kernel.user_expression(install % CONFIG))
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
            "signature": "",
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
