"""The Python floor: the same execute loop with jupyter_client against an identically started kernel.

Usage: python jupyter_client_loop.py N WARMUP CODE_SETUP CODE_LOOP
Prints one JSON line: {"samples_ms": [...]}.
"""
import json
import sys
import time

from jupyter_client.manager import KernelManager


def run_once(client, code):
    """Done when both the execute_reply and the final idle status have arrived."""
    msg_id = client.execute(code, store_history=True, stop_on_error=False)
    while client.get_shell_msg(timeout=30)["parent_header"].get("msg_id") != msg_id:
        pass
    while True:
        msg = client.get_iopub_msg(timeout=30)
        if (msg["parent_header"].get("msg_id") == msg_id and msg["msg_type"] == "status"
                and msg["content"]["execution_state"] == "idle"):
            return


def main():
    n, warmup, setup, loop = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
    manager = KernelManager(kernel_name="python3", transport="ipc")
    manager.start_kernel(extra_arguments=["--HistoryManager.hist_file=:memory:", "--InteractiveShell.colors=nocolor"])
    client = manager.client()
    client.start_channels()
    client.wait_for_ready(timeout=30)
    try:
        run_once(client, setup)
        for _ in range(warmup):
            run_once(client, loop)
        samples = []
        for _ in range(n):
            start = time.perf_counter()
            run_once(client, loop)
            samples.append((time.perf_counter() - start) * 1000.0)
        print(json.dumps({"samples_ms": samples}))
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)


if __name__ == "__main__":
    main()
