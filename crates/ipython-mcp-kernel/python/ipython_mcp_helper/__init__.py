"""ipython-mcp's helper, installed into every Python kernel right after start.

The Rust server executes this package (silently, in a private namespace) and calls
``install(config)``. From then on the helper:

* bounds output *inside the kernel*: ipykernel sends a huge print as one huge iopub message,
  so the only place a bound can hold is before the message is built. Each stream keeps a
  bounded model of what a Jupyter front end would show (``TerminalSink``) and forwards only a
  fixed number of raw characters per execution; display items, results and tracebacks are
  cut before ipykernel serializes them;
* reports, at the end of every execution, the bounded text and exact omitted counts on its
  comm (target ``ipython_mcp``);
* answers JSON requests on that comm (``METHODS``), among them the namespace tools (``list``,
  ``search``, ``inspect``, ``call_function``, ``reload``, ``remove``, ``reset``), which read and
  change the shell's ``user_ns`` by dict and attribute access only (nothing is ever eval'd),
  and the dynamic tools (``register_tool``, ``unregister_tool``, ``tool_catalog``,
  ``call_tool``), which publish live callables with input schemas generated from their
  signatures (string annotations are evaluated as ``inspect.signature(eval_str=True)`` does);
* applies the configured namespace at install: library paths on ``sys.path``, preloaded and
  aliased modules bound in ``user_ns`` (the "configured bindings", restored by ``reset``);
  per-module import failures are reported by the ``install_info`` method, not raised.

Messages on the comm (kernel -> server unless noted):

* on open: ``{"event": "ready", "version": HELPER_VERSION}``;
* server -> kernel: ``{"id": str, "method": str, "params": {...}}``, answered by
  ``{"id", "ok": true, "result"}`` or ``{"id", "ok": false, "error": {"code", "message", ...}}``
  (an ``execution_error`` also carries ``ename``, ``evalue`` and ``traceback``);
* at the end of each top-level execution (an ``execute_request``, silent or not, or a comm
  message handled while nothing runs), with that request as parent, after its last forwarded
  stream message and before its ``idle``: ``{"event": "execution_report", "stdout": {"text",
  "omitted_chars"}, "stderr": {...}, "display_count", "display_omitted", "raw_chars":
  {"stdout", "stderr"}}``.

The modules, each after the ones it imports (the server's bootstrap executes them in that
order, see ``helper.rs``): ``bounds`` (sanitizing and bounding text, bundles, tracebacks),
``sink`` (the terminal sink, bounded stream capture, the output log), ``rpc`` (requests and
replies, ``METHODS``), ``jsonconv`` (call results as JSON), ``namespace`` (the namespace
methods and configured bindings), ``tools`` (dynamic tools), ``checkpoint`` (checkpoints of
the namespace and ``restore``), ``installation`` (``install`` and its hooks).

Standard library only at import time (Python >= 3.9); IPython, ipykernel and comm are
imported inside ``install`` because they only exist in a running kernel.
"""

from . import bounds, checkpoint, installation, jsonconv, namespace, rpc, sink, tools
from .installation import install
from .rpc import COMM_TARGET, HELPER_VERSION

__all__ = ["COMM_TARGET", "HELPER_VERSION", "install"]
