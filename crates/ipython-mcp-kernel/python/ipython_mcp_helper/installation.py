"""Installation into a running ipykernel: ``install(config)``, the hooks it sets and undoes,
and the per-execution accounting that ends in the ``execution_report``.

IPython, ipykernel and comm are imported inside ``install`` because they only exist in a
running kernel.
"""

import os
import platform
import re
import sys
import threading

from .bounds import bound_bundle, bound_strings, bound_traceback, sanitize_text
from . import code_mode
from .checkpoint import Checkpointer
from .checkpoint import resolve as resolve_checkpoint
from .checkpoint import supported as checkpoint_supported
from .namespace import apply_library_paths, bind_configured, configured_bindings, validated_namespace
from .rpc import COMM_TARGET, HELPER_VERSION, METHODS, checked_params, current, error_reply, handle_request, serve
from .sink import OutputLog, StreamChannel
from .tools import ToolCatalog

CONFIG_KEYS = (
    "max_text_chars",
    # Of max_text_chars, how many keep the beginning of a long stream; the rest keep its end.
    "text_head_chars",
    "max_display_items",
    "max_image_bytes",
    "max_traceback_chars",
    "max_string_chars",
    "raw_forward_chars",
    # 1: report every execution. 0: report only when the kernel held something back (stream
    # text past raw_forward_chars, displays past max_display_items); otherwise the server saw
    # every character and its own sink is exact, and a quiet cell costs no extra message.
    "report_always",
)
# Bounds of the namespace tools; optional (these defaults match the server's).
# max_repr_chars bounds every short text field (representations, signatures, list's doc);
# max_results the items per list result and per JSON array/object; max_json_depth the nesting
# kept in call_function results. inspect's documentation uses max_text_chars.
OPTIONAL_CONFIG_KEYS = (
    ("max_repr_chars", 1024),
    ("max_results", 100),
    ("max_json_depth", 6),
    # PNG and JPEG images over max_image_bytes but at most this large are sent as they are: the
    # server downscales them (one implementation, for every kernel).
    ("max_fit_input_bytes", 0),
    # IPython writes each cell to its SQLite history as it runs, which costs milliseconds per
    # cell on disk. When set (kernels the server started on a Jupyter server, whose history
    # it cannot put in memory at launch), history is written in batches of this many cells
    # and when the kernel exits; 0 leaves history as the kernel was configured.
    ("history_batch_cells", 0),
)
# The spool (optional): the full text of each execution's stdout and stderr, written to
# ``<spool_dir>/<execute_request msg_id>.stdout`` / ``.stderr`` (UTF-8, at most spool_max_bytes
# each; the rest is counted in the report), so the server can page output it never received.
# Beside them, ``<msg_id>.outputs`` logs every output as the kernel produced it, before any
# bound, one JSON object a line in arrival order (see ``OutputLog``), so a notebook can be
# saved with what Jupyter would have saved while the server only received the bounded view.
# A stream's text reaches its file in batches (``sink.SPOOL_BATCH_CHARS``, at most
# ``sink.SPOOL_FLUSH_SECONDS`` behind, by a timer thread when no write comes); ``end_execution``
# (post_execute, before the kernel sends the reply the server answers on) writes the rest and
# closes the files, so what an answer reports is in them. Nothing is fsynced: a killed server
# or kernel loses none of it, a power cut may.


_MISSING = object()
# Helper methods that may change user names (they run user code, or delete names).
NAMESPACE_CHANGING = frozenset(("call_function", "call_tool", "reload", "remove", "reset"))
_SPOOL_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")


def _method_install_info(params):
    """What ``install`` returned (the server's install cell discards it), plus the configured
    binding names; ``namespace_errors`` are those of the latest binding (install or reset)."""
    checked_params(params, ())
    installation = current()
    return dict(
        installation.info,
        namespace_errors=list(installation.namespace_errors),
        bindings=sorted(installation.bindings),
    )


METHODS["install_info"] = _method_install_info


def install(config):
    """Installs the helper into the running kernel; safe to call again (it replaces itself).

    Also applies ``config["namespace"]``: library paths first on ``sys.path``, then every
    preload and alias imported and bound in ``user_ns``. A module that fails to import does
    not make install raise; it is listed in ``namespace_errors`` (also answered later by the
    ``install_info`` method, since the server's install cell discards this return value).
    An invalid config raises (TypeError/ValueError) before anything changes.

    Returns ``{"version", "python", "ipykernel", "executable", "working_dir",
    "namespace_errors": [{"module", "code", "message"}]}``.
    """
    import ipykernel
    from IPython import get_ipython

    config = _validated(config)
    shell = get_ipython()
    if shell is None:
        raise RuntimeError("ipython_mcp_helper.install must run inside an IPython kernel")
    previous = getattr(shell, "_ipython_mcp_installation", None)
    comm = None
    if previous is not None:
        comm = previous.comm
        previous.uninstall()
    installation = _Installation(shell, config)
    serve(installation)
    shell._ipython_mcp_installation = installation
    if previous is not None and getattr(previous, "tools", None) is not None:
        # Registrations name user_ns bindings, which a re-install keeps: so are they.
        installation.tools = previous.tools
    if comm is not None:
        installation.adopt_comm(comm)
    history = getattr(shell, "history_manager", None)
    batch = config["history_batch_cells"]
    if batch and history is not None and history.db_cache_size < batch:
        history.db_cache_size = batch
    code_mode.install(config["mcp_servers"])
    apply_library_paths(config["namespace"])
    installation.namespace_errors = bind_configured(shell.user_ns, config["namespace"])
    installation.info = {
        "version": HELPER_VERSION,
        "python": platform.python_version(),
        "ipykernel": ipykernel.__version__,
        # Where the kernel runs: the server knows it of a kernel it launched, not of one on a
        # Jupyter server.
        "executable": sys.executable or "",
        "working_dir": _working_dir(),
    }
    return dict(installation.info, namespace_errors=list(installation.namespace_errors))


def _working_dir():
    try:
        return os.getcwd()
    except OSError:  # removed from under the kernel
        return ""


def _validated(config):
    if not isinstance(config, dict):
        raise TypeError("config must be a dict")
    checked = {}
    for key in CONFIG_KEYS:
        value = config.get(key)
        if type(value) is not int or value < 0:
            raise ValueError("config[%r] must be a non-negative int, got %r" % (key, value))
        checked[key] = value
    for key, default in OPTIONAL_CONFIG_KEYS:
        value = config.get(key, default)
        if type(value) is not int or value < 0:
            raise ValueError("config[%r] must be a non-negative int, got %r" % (key, value))
        checked[key] = value
    spool_dir = config.get("spool_dir")
    if spool_dir is not None and (not isinstance(spool_dir, str) or not os.path.isabs(spool_dir)):
        raise ValueError("config['spool_dir'] must be an absolute path or None, got %r" % (spool_dir,))
    checked["spool_dir"] = spool_dir
    spool_max_bytes = config.get("spool_max_bytes", 0)
    if type(spool_max_bytes) is not int or spool_max_bytes < 0:
        raise ValueError("config['spool_max_bytes'] must be a non-negative int, got %r" % (spool_max_bytes,))
    checked["spool_max_bytes"] = spool_max_bytes
    # Checkpoints of the namespace after each execution (see ``checkpoint``); None: none.
    checkpoint_dir = config.get("checkpoint_dir")
    # A relative one is a remote kernel's: see ``checkpoint.resolve``.
    if checkpoint_dir is not None and (
        not isinstance(checkpoint_dir, str) or not checkpoint_dir or ".." in checkpoint_dir.split("/")
    ):
        raise ValueError("config['checkpoint_dir'] must be a path without '..' or None, got %r" % (checkpoint_dir,))
    checked["checkpoint_dir"] = checkpoint_dir
    checkpoint_max_bytes = config.get("checkpoint_max_bytes", 0)
    if type(checkpoint_max_bytes) is not int or checkpoint_max_bytes < 0:
        raise ValueError(
            "config['checkpoint_max_bytes'] must be a non-negative int, got %r" % (checkpoint_max_bytes,)
        )
    checked["checkpoint_max_bytes"] = checkpoint_max_bytes
    # The upstream MCP servers of code mode (names only); see ``code_mode``.
    mcp_servers = config.get("mcp_servers") or []
    if not isinstance(mcp_servers, list) or not all(isinstance(name, str) for name in mcp_servers):
        raise ValueError("config['mcp_servers'] must be a list of names, got %r" % (mcp_servers,))
    checked["mcp_servers"] = mcp_servers
    checked["namespace"] = validated_namespace(config.get("namespace"))
    return checked


_NO_EXECUTION = object()


class _Installation:
    """Everything ``install`` changed in one kernel, and the per-execution state.

    Every hook is an instance attribute (or, for the streams, a subclass swap) recorded here,
    so ``uninstall`` undoes exactly this installation and a second ``install`` never wraps
    twice. One re-entrant lock guards the state: ipykernel's fd-capture threads write
    concurrently with the main thread, and a signal handler may print while a write holds it.
    """

    def __init__(self, shell, config):
        self.shell = shell
        self.config = config
        self.bindings = configured_bindings(config["namespace"])  # protected names
        self.namespace_errors = []  # of the latest binding of the configured modules
        self.info = {}  # install's result: helper, Python and ipykernel versions
        self.tools = ToolCatalog()  # the dynamic tools (register_tool)
        self.lock = threading.RLock()
        self.comm = None
        self._undo = []
        self._active = _NO_EXECUTION  # parent msg_id of the execution being accounted
        self._depth = 0
        self._pending_clear = False
        self.display_count = 0
        self.display_omitted = 0
        self.outputs = OutputLog(None, 0)  # the running execution's unbounded outputs
        self.channels = []
        self.checkpointer = None
        if config["checkpoint_dir"] is not None and checkpoint_supported():
            try:
                directory = resolve_checkpoint(config["checkpoint_dir"])
            except OSError:
                directory = None  # no private place for them on this machine: none taken
            if directory is not None:
                self.checkpointer = Checkpointer(shell, directory, config["checkpoint_max_bytes"], self.bindings)
        try:
            self._hook(shell)
        except BaseException:
            self.uninstall()  # leave the kernel as it was, not half-hooked
            raise

    # ---- installing and undoing ------------------------------------------------------------

    def _hook(self, shell):
        import comm as comm_package
        from ipykernel.iostream import OutStream

        for name in ("stdout", "stderr"):
            stream = getattr(sys, name)
            if isinstance(stream, OutStream):
                self.channels.append(StreamChannel(self, stream, name))
        self._patch(shell.events, "trigger", self._wrap_trigger)
        self._patch(shell.display_pub, "publish", self._wrap_publish)
        self._patch(shell.display_pub, "clear_output", self._wrap_clear_output)
        self._patch(shell.displayhook, "write_format_data", self._wrap_write_format_data)
        self._patch(shell, "_showtraceback", self._wrap_showtraceback)
        manager = comm_package.get_comm_manager()
        manager.register_target(COMM_TARGET, self._on_comm_open)
        self._undo.append(lambda: manager.unregister_target(COMM_TARGET, self._on_comm_open))

    def _patch(self, owner, name, make_wrapper):
        """Sets ``owner.name`` to a wrapper of its current value, remembering how to undo it."""
        previous = owner.__dict__.get(name, _MISSING)
        setattr(owner, name, make_wrapper(getattr(owner, name)))

        def undo():
            if previous is _MISSING:
                owner.__dict__.pop(name, None)
            else:
                setattr(owner, name, previous)

        self._undo.append(undo)

    def uninstall(self):
        if self.checkpointer is not None:
            self.checkpointer.wait()
        code_mode.uninstall()
        for undo in reversed(self._undo):
            undo()
        self._undo = []
        for channel in self.channels:
            channel.detach()

    # ---- per-execution accounting ----------------------------------------------------------

    def _parent(self):
        """(msg_id, msg_type) of the request the current thread or task is serving."""
        kernel = getattr(self.shell, "kernel", None)
        header = kernel.get_parent().get("header", {}) if kernel is not None else {}
        return header.get("msg_id"), header.get("msg_type")

    def begin_execution(self):
        """``pre_execute``: starts accounting a new execution unless one is running.

        IPython fires pre/post_execute around every cell, silent or not, and the comm package
        fires them around every comm message callback too (ipykernel 7.4 may handle those while
        an async cell awaits). A new ``execute_request`` always starts afresh; a nested
        run_cell of the same request, or a comm message during a running execution, is folded
        into it.
        """
        msg_id, msg_type = self._parent()
        with self.lock:
            if self._active is not _NO_EXECUTION:
                if msg_id == self._active:
                    self._depth += 1
                    return
                if msg_type != "execute_request":
                    return
            self._active = msg_id
            self._depth = 1
            self._clear()
            self.outputs.close()
            self.outputs = OutputLog(self._spool_path(msg_id, "outputs"), self.config["spool_max_bytes"])
            for channel in self.channels:
                channel.new_execution(self._spool_path(msg_id, channel.name))

    def end_execution(self):
        """``post_execute``: reports the execution that ends here."""
        msg_id, _ = self._parent()
        with self.lock:
            if self._active is _NO_EXECUTION or msg_id != self._active:
                return
            self._depth -= 1
            if self._depth > 0:
                return
            self._active = _NO_EXECUTION
            self.outputs.close()
            for channel in self.channels:
                channel.close_spool()
            written = any(channel.written for channel in self.channels)
            held_back = self.display_omitted > 0 or any(
                channel.written > channel.forwarded for channel in self.channels
            )
            if not (held_back or self.config["report_always"]):
                return
            report = self._report()
        if written:
            self._flush_streams()
        self._send(report)

    def _spool_path(self, msg_id, name):
        """Where this execution's ``name`` stream is spooled, or None when spooling is off."""
        directory = self.config["spool_dir"]
        if directory is None or self.config["spool_max_bytes"] == 0:
            return None
        if not isinstance(msg_id, str) or not _SPOOL_NAME.match(msg_id):
            return None
        return os.path.join(directory, "%s.%s" % (msg_id, name))

    def _flush_streams(self):
        # Stream text waits up to 0.2 s in OutStream's buffer; flushing here puts every
        # forwarded stream message on iopub before the report.
        for channel in self.channels:
            try:
                channel.stream.flush()
            except Exception:
                pass  # a stream that cannot flush must not cost the report

    def _report(self):
        streams = {
            name: {"text": "", "tail": "", "omitted_chars": 0, "omitted_lines": 0, "first_omitted_line": 0}
            for name in ("stdout", "stderr")
        }
        raw_chars = {"stdout": 0, "stderr": 0}
        spool = {}
        for channel in self.channels:
            head, tail, omitted, omitted_lines, first_omitted_line = channel.sink.kept()
            streams[channel.name] = {
                "text": sanitize_text(head),
                "tail": sanitize_text(tail),
                "omitted_chars": omitted,
                "omitted_lines": omitted_lines,
                "first_omitted_line": first_omitted_line,
            }
            raw_chars[channel.name] = channel.written
            if channel.spool_path is not None:
                spool[channel.name] = {"bytes": channel.spooled, "dropped_bytes": channel.spool_dropped}
        return {
            "event": "execution_report",
            "stdout": streams["stdout"],
            "stderr": streams["stderr"],
            "display_count": self.display_count,
            "display_omitted": self.display_omitted,
            "raw_chars": raw_chars,
            "spool": spool,
        }

    def _clear(self):
        """Front-end clear: stream text and display counters (not the raw budget)."""
        self._pending_clear = False
        self.display_count = 0
        self.display_omitted = 0
        for channel in self.channels:
            channel.sink.clear()

    def note_output(self):
        """Any output applies a pending ``clear_output(wait=True)``, as front ends do."""
        if self._pending_clear:
            self._clear()

    # ---- hooks -----------------------------------------------------------------------------

    def _wrap_trigger(self, trigger):
        # Wrapping the trigger (rather than registering callbacks) puts the reset before every
        # pre_execute callback and the report after every post_execute one. matplotlib-inline
        # registers its figure-flushing callback when pyplot is first imported, i.e. after us,
        # and its figures must be counted in the report.
        # A checkpoint is taken after each cell that is not silent (post_run_cell, last); the
        # next cell does not wait for its writer (see ``checkpoint``).
        def wrapped(event, *args, **kwargs):
            if event == "pre_execute":
                if self.config["mcp_servers"]:
                    self._guarded(code_mode.refuse_input)
                self._guarded(self.begin_execution)
            try:
                return trigger(event, *args, **kwargs)
            finally:
                if event == "post_execute":
                    self._guarded(self.end_execution)
                elif event == "post_run_cell" and self.checkpointer is not None:
                    result = args[0] if args else None
                    count = getattr(result, "execution_count", None)
                    self._guarded(lambda: self.checkpointer.after_execution(count))

        return wrapped

    def _wrap_publish(self, publish):
        def wrapped(data, metadata=None, *args, **kwargs):
            try:
                with self.lock:
                    self.note_output()
                    transient = kwargs.get("transient")
                    self.outputs.add(
                        {
                            "output_type": "update_display_data" if kwargs.get("update", False) else "display_data",
                            "data": data,
                            "metadata": metadata if metadata is not None else {},
                            "transient": transient if isinstance(transient, dict) else {},
                        }
                    )
                    if not kwargs.get("update", False):
                        self.display_count += 1
                        if self.display_count > self.config["max_display_items"]:
                            self.display_omitted += 1
                            return None
                data, metadata = self._bounded(data, metadata)
            except Exception:
                pass  # bounding failed: publish as IPython asked rather than lose the display
            return publish(data, metadata, *args, **kwargs)

        return wrapped

    def _wrap_clear_output(self, clear_output):
        def wrapped(wait=False):
            with self.lock:
                self._guarded(lambda: self.outputs.add({"output_type": "clear_output", "wait": bool(wait)}))
                if wait:
                    self._pending_clear = True
                else:
                    self._clear()
            return clear_output(wait)

        return wrapped

    def _wrap_write_format_data(self, write_format_data):
        def wrapped(format_dict, md_dict=None):
            try:
                with self.lock:
                    self.note_output()
                    self.outputs.add(
                        {
                            "output_type": "execute_result",
                            "data": format_dict,
                            "metadata": md_dict if md_dict is not None else {},
                        }
                    )
                format_dict, md_dict = self._bounded(format_dict, md_dict)
            except Exception:
                pass
            return write_format_data(format_dict, md_dict)

        return wrapped

    def _wrap_showtraceback(self, showtraceback):
        def wrapped(etype, evalue, stb):
            try:
                with self.lock:
                    self.note_output()
                    # As ipykernel's own error message has it (the traceback unbounded).
                    self.outputs.add(
                        {
                            "output_type": "error",
                            "ename": str(getattr(etype, "__name__", etype)),
                            "evalue": str(evalue),
                            "traceback": list(stb) if stb is not None else [],
                        }
                    )
                stb = bound_traceback(stb, self.config["max_traceback_chars"])
                # ipykernel puts str(evalue) in the error message; a str is its own str().
                evalue = bound_strings(str(evalue), self.config["max_string_chars"])
            except Exception:
                pass
            return showtraceback(etype, evalue, stb)

        return wrapped

    def _bounded(self, data, metadata):
        return bound_bundle(
            data,
            metadata,
            self.config["max_string_chars"],
            self.config["max_image_bytes"],
            self.config["max_fit_input_bytes"],
        )

    @staticmethod
    def _guarded(action):
        try:
            action()
        except Exception:
            pass  # accounting must never break the user's cell

    # ---- the comm --------------------------------------------------------------------------

    def _on_comm_open(self, comm, open_msg):
        self.adopt_comm(comm)
        comm.send({"event": "ready", "version": HELPER_VERSION})

    def adopt_comm(self, comm):
        """Makes ``comm`` the one reports go to (a later open replaces it) and serves it."""
        self.comm = comm

        def on_msg(msg):
            data = msg.get("content", {}).get("data")
            reply = handle_request(data)
            # A call that can change the namespace is checkpointed like a cell: a name removed
            # must not come back with a replacement kernel.
            method = data.get("method") if isinstance(data, dict) else None
            if method in NAMESPACE_CHANGING and self.checkpointer is not None:
                self._guarded(self.checkpointer.after_execution)
            try:
                comm.send(reply)
            except Exception as error:  # e.g. a result JSON cannot carry: still answer
                detail = "the reply could not be sent: %s: %s" % (type(error).__name__, error)
                comm.send(error_reply(reply["id"], "internal_error", detail))

        def on_close(msg):
            if self.comm is comm:
                self.comm = None

        comm.on_msg(on_msg)
        comm.on_close(on_close)

    def _send(self, data):
        comm = self.comm
        if comm is not None:
            comm.send(data)
