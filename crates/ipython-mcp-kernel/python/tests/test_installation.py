"""Tests of the helper's installation (``installation``): its config, and end to end against a
real ipykernel (streams, displays, reports, the comm, re-installs).

Run from the workspace root:  python -m pytest crates/ipython-mcp-kernel/python/tests -q
"""

import ast
import json
import os
import time

import pytest

from harness import CONFIG, needs_kernel, private_exec

# A stream's report when its whole text was kept.
WHOLE = {"text": "", "tail": "", "omitted_chars": 0, "omitted_lines": 0, "first_omitted_line": 0}


def test_config_defaults_and_namespace_normalized(helper, tmp_path):
    base = {key: CONFIG[key] for key in helper.installation.CONFIG_KEYS}
    checked = helper.installation._validated(base)
    assert (checked["max_repr_chars"], checked["max_results"], checked["max_json_depth"]) == (1024, 100, 6)
    assert checked["namespace"] == {"library_paths": [], "preload_modules": [], "module_aliases": {}}
    namespace = {"library_paths": [str(tmp_path), str(tmp_path)], "preload_modules": ["os.path", "os", "os.path"],
                 "module_aliases": {"json": "js", "os": "os"}}
    assert helper.installation._validated(dict(base, namespace=namespace))["namespace"] == {
        "library_paths": [str(tmp_path)],
        "preload_modules": ["os.path", "os"],
        "module_aliases": {"json": "js", "os": "os"},
    }
    with pytest.raises(ValueError, match="max_results"):
        helper.installation._validated(dict(base, max_results=-1))


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
                "executable": ast.literal_eval(kernel.user_expression("__import__('sys').executable")),
                "working_dir": ast.literal_eval(kernel.user_expression("__import__('os').getcwd()")),
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

    def test_history_batch_only_ever_raises_the_cache(self, kernel):
        install = "__import__('sys').modules['ipython_mcp_helper'].install(%r)"
        size = "get_ipython().history_manager.db_cache_size"
        before = int(kernel.user_expression(size))
        kernel.user_expression(install % dict(CONFIG, history_batch_cells=before + 1000))
        assert int(kernel.user_expression(size)) == before + 1000
        kernel.user_expression(install % dict(CONFIG, history_batch_cells=1))
        assert int(kernel.user_expression(size)) == before + 1000
        kernel.user_expression(install % CONFIG)

    def test_rpc(self, kernel):
        assert kernel.request("ping", {"x": [1, "é"]}) == {"id": "r1", "ok": True, "result": {"x": [1, "é"]}}
        assert kernel.request("config")["result"] == dict(
            CONFIG, spool_dir=None, spool_max_bytes=0, checkpoint_dir=None, checkpoint_max_bytes=0, mcp_servers=[]
        )
        unknown = kernel.request("nope")
        assert unknown["ok"] is False and unknown["error"]["code"] == "unknown_method"
        kernel.execute("import sys; sys.modules['ipython_mcp_helper.rpc'].METHODS['boom'] = lambda p: 1 / 0", silent=True)
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
            "stdout": {
                "text": "x" * 1638,
                "tail": "x" * 6553 + "\n",
                "omitted_chars": 5_000_001 - 8192,
                "omitted_lines": 0,
                "first_omitted_line": 1,
            },
            "stderr": {"text": "", "tail": "", "omitted_chars": 0, "omitted_lines": 0, "first_omitted_line": 0},
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
        # 1638 head characters are 273 whole lines; the last 6554 hold 1092 whole lines.
        full = "".join("%05d\n" % i for i in range(50_000))
        assert (report["stderr"]["text"], report["stderr"]["tail"]) == (full[:1638], full[-6552:])
        assert report["stderr"]["omitted_chars"] == 300_000 - 1638 - 6552
        assert report["stderr"]["omitted_lines"] == 50_000 - 273 - 1092
        assert report["stderr"]["first_omitted_line"] == 274
        assert report["raw_chars"] == {"stdout": 0, "stderr": 300_000}

    def test_progress_bar_collapses(self, kernel):
        code = (
            "import sys\n"
            "for i in range(1, 3001):\n"
            "    sys.stderr.write('\\r%4d/3000 |%-30s|' % (i, '#' * (i // 100)))\n"
            "sys.stderr.write('\\ndone\\n')"
        )
        report = kernel.execute(code).report()
        assert report["stderr"] == dict(WHOLE, text="3000/3000 |%s|\ndone\n" % ("#" * 30))

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
        assert report["stdout"] == dict(WHOLE, text="39\n")
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

    def test_spool_batches_but_shows_a_running_executions_output_and_is_whole_at_the_reply(
        self, kernel, tmp_path
    ):
        spool_dir = str(tmp_path / "spool")
        os.mkdir(spool_dir)
        flag = str(tmp_path / "release")
        install = "import sys; sys.modules['ipython_mcp_helper'].install(%r)"
        config = dict(CONFIG, spool_dir=spool_dir, spool_max_bytes=10_000_000)
        assert kernel.execute(install % config, silent=True).reply["content"]["status"] == "ok"
        try:
            # Small writes of both streams, ASCII and not, then a pause that the test ends.
            code = (
                "import os, sys, time\n"
                "for i in range(30_000):\n"
                "    print('line', i, 'é' * (i %% 3))\n"
                "    if i %% 1000 == 0: print('err', i, file=sys.stderr)\n"
                "print('waiting')\n"
                "deadline = time.monotonic() + 300\n"
                "while not os.path.exists(%r) and time.monotonic() < deadline:\n"
                "    time.sleep(0.02)\n"
                "print('end')\n"
            ) % flag
            msg = kernel.kc.session.msg("execute_request", {
                "code": code, "silent": False, "store_history": True, "user_expressions": {},
                "allow_stdin": False, "stop_on_error": False,
            })
            kernel.kc.shell_channel.send(msg)
            msg_id = msg["header"]["msg_id"]
            stdout_path = os.path.join(spool_dir, msg_id + ".stdout")
            # While the cell runs, even the line it printed before pausing reaches the file:
            # batched text waits at most SPOOL_FLUSH_SECONDS, whether more writes come or not.
            deadline = time.monotonic() + 120
            while True:
                if os.path.exists(stdout_path):
                    with open(stdout_path, "rb") as file:
                        if file.read().endswith(b"waiting\n"):
                            break
                assert time.monotonic() < deadline, "the running execution's output never showed"
                time.sleep(0.02)
            with open(flag, "w"):
                pass
            run = kernel.collect(msg_id, wait_reply=True)
            assert run.reply["content"]["status"] == "ok"
            # At the reply every byte is in the files, and the log's offsets are byte offsets.
            flood = "".join("line %d %s\n" % (i, "é" * (i % 3)) for i in range(30_000))
            stderr = "".join("err %d\n" % i for i in range(0, 30_000, 1000))
            stdout = flood + "waiting\nend\n"
            with open(stdout_path, "rb") as file:
                assert file.read() == stdout.encode()
            with open(os.path.join(spool_dir, msg_id + ".stderr"), "rb") as file:
                assert file.read() == stderr.encode()
            with open(os.path.join(spool_dir, msg_id + ".outputs"), "rb") as file:
                markers = [json.loads(line) for line in file]
            expected, offsets = [], {"stdout": 0, "stderr": 0}
            for i in range(30_000):
                for name, text in [("stdout", "line %d %s\n" % (i, "é" * (i % 3)))] + (
                    [("stderr", "err %d\n" % i)] if i % 1000 == 0 else []
                ):
                    if not expected or expected[-1]["name"] != name:
                        expected.append({"output_type": "stream", "name": name, "offset": offsets[name]})
                    offsets[name] += len(text.encode())
            assert markers == expected
            assert run.report()["spool"] == {
                "stdout": {"bytes": len(stdout.encode()), "dropped_bytes": 0},
                "stderr": {"bytes": len(stderr.encode()), "dropped_bytes": 0},
            }
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
        # Whole lines: 148 of the 1638 head characters, 595 of the 6554 tail ones.
        assert report["stdout"]["omitted_chars"] == 5 * 5_000 * 11 - 11 * (148 + 595)
        assert report["stdout"]["text"] == "0123456789\n" * 148
        assert report["stdout"]["tail"] == "0123456789\n" * 595
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
