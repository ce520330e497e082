"""Two principals of one ipython-mcp HTTP server, driven with the official Python MCP SDK:
alice over the handshake protocol (legacy), bob over 2026-07-28 (auto), and a second client
of alice's. Prints one JSON object per phase with what each saw; the Rust test asserts.

Usage: python principals_client.py URL ALICE_TOKEN BOB_TOKEN
Between the phases it prints {"phase": "before_reload", ...}, then waits for a line on stdin
(the test rewrites the principals file, sends SIGHUP, waits for the server to say it reloaded)
with the new tokens: ALICE_NEW_TOKEN BOB_TOKEN.
"""
import asyncio
import json
import os
import re
import sys
import tempfile

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client


def transport(url, token):
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=httpx2.Timeout(30.0, read=300.0))
    return streamable_http_client(url, http_client=http)


def text(result):
    return "\n".join(block.text for block in result.content if block.type == "text")


def seen(result):
    return {"is_error": result.is_error, "structured": result.structured_content, "text": text(result)}


async def ready(client):
    for _ in range(6000):
        status = await client.call_tool("runtime_status", {})
        if status.structured_content["state"] != "starting":
            return status
        await asyncio.sleep(0.1)
    raise RuntimeError("the default kernel never started")


async def refused(url, token, mode):
    """Whether a client with this token is kept out."""
    try:
        async with Client(transport(url, token), mode=mode) as client:
            await client.list_tools()
    except BaseException:  # the SDK raises an ExceptionGroup or an MCPError
        return True
    return False


HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


async def raw_session(url, token):
    """Opens an MCP session by hand (initialize, initialized) and returns its id."""
    headers = {"Authorization": f"Bearer {token}", **HEADERS}
    initialize = {
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}},
    }
    async with httpx2.AsyncClient(timeout=30.0) as http:
        response = await http.post(url, headers=headers, json=initialize)
        session_id = response.headers["mcp-session-id"]
        headers["Mcp-Session-Id"] = session_id
        headers["MCP-Protocol-Version"] = "2025-11-25"
        await http.post(url, headers=headers, json={"jsonrpc": "2.0", "method": "notifications/initialized"})
    return session_id


async def raw_status(url, token, session_id):
    """The HTTP status of a tools/list naming an MCP session, sent with this token."""
    headers = {"Authorization": f"Bearer {token}", "Mcp-Session-Id": session_id, "MCP-Protocol-Version": "2025-11-25", **HEADERS}
    body = {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}
    async with httpx2.AsyncClient(timeout=30.0) as http:
        response = await http.post(url, headers=headers, json=body)
        return response.status_code


async def before_reload(url, alice_token, bob_token, python):
    out = {"phase": "before_reload"}
    alice_changed = asyncio.Event()

    async def on_alice_message(message):
        method = getattr(message, "method", None) or getattr(getattr(message, "root", None), "method", None)
        if method == "notifications/tools/list_changed":
            alice_changed.set()

    bob_changed = asyncio.Event()

    async def on_bob_message(message):
        method = getattr(message, "method", None) or getattr(getattr(message, "root", None), "method", None)
        if method == "notifications/tools/list_changed":
            bob_changed.set()

    async with Client(transport(url, alice_token), mode="legacy", message_handler=on_alice_message) as alice, \
            Client(transport(url, bob_token), mode="legacy", message_handler=on_bob_message) as bob_legacy, \
            Client(transport(url, bob_token), mode="auto") as bob:
        await ready(alice)
        await ready(bob)
        out["alice_defines"] = seen(await alice.call_tool("execute", {"code": "secret = 'alice-only'\nsecret"}))
        leaks = (
            "import os\nsorted(k for k, v in os.environ.items() if k.startswith('IPYTHON_MCP_HTTP')"
            f" or {alice_token!r} in v or {bob_token!r} in v)"
        )
        out["kernel_env_leaks"] = seen(await alice.call_tool("execute", {"code": leaks}))
        out["bob_looks"] = seen(await bob.call_tool("execute", {"code": "print(globals().get('secret', 'absent'))"}))
        out["alice_start"] = seen(await alice.call_tool("kernel_start", {"spec": python, "kernel": "ak"}))
        out["alice_list"] = seen(await alice.call_tool("kernel_list", {}))
        out["bob_list"] = seen(await bob.call_tool("kernel_list", {}))
        out["bob_status"] = seen(await bob.call_tool("runtime_status", {}))
        out["bob_uses_alices_kernel"] = seen(await bob.call_tool("execute", {"code": "1", "kernel": "ak"}))
        out["bob_uses_no_kernel"] = seen(await bob.call_tool("execute", {"code": "1", "kernel": "zz"}))
        out["bob_stops_alices_kernel"] = seen(await bob.call_tool("kernel_stop", {"kernel": "ak"}))
        out["bob_stops_no_kernel"] = seen(await bob.call_tool("kernel_stop", {"kernel": "zz"}))
        # bob's file allows one kernel: his default.
        out["bob_start"] = seen(await bob.call_tool("kernel_start", {"spec": python}))
        # A dynamic tool is alice's alone: listed, callable and announced to her clients only.
        await alice.call_tool("execute", {"code": "def shout(word: str) -> str:\n    return word.upper()"})
        out["alice_registers"] = seen(await alice.call_tool("register_tool", {"name": "shout"}))
        try:
            await asyncio.wait_for(alice_changed.wait(), 60)
            out["alice_heard_list_changed"] = True
        except asyncio.TimeoutError:
            out["alice_heard_list_changed"] = False
        out["alice_tools"] = [tool.name for tool in (await alice.list_tools()).tools]
        out["bob_tools"] = [tool.name for tool in (await bob.list_tools()).tools]
        out["alice_calls"] = seen(await alice.call_tool("shout", {"word": "hi"}))
        try:
            out["bob_calls"] = seen(await bob.call_tool("shout", {"word": "hi"}))
        except Exception as error:  # an unknown tool is a protocol error
            out["bob_calls"] = {"protocol_error": str(error)}
        try:
            out["bob_calls_unknown"] = seen(await bob.call_tool("nothing_here", {"word": "hi"}))
        except Exception as error:
            out["bob_calls_unknown"] = {"protocol_error": str(error)}
        # The notification went out before alice's list came back; bob's legacy client had
        # its own chance to hear one and did not.
        out["bob_heard_list_changed"] = bob_changed.is_set()
        # Notebooks: each principal's own directory.
        out["alice_creates"] = seen(await alice.call_tool("notebook_create", {"path": "mine.ipynb"}))
        out["bob_reads_alices"] = seen(await bob.call_tool("notebook_read", {"path": "mine.ipynb"}))
        out["bob_reads_none"] = seen(await bob.call_tool("notebook_read", {"path": "none.ipynb"}))
        out["bob_climbs"] = seen(await bob.call_tool("notebook_read", {"path": "../alice/mine.ipynb"}))
        # Alice's kernel hanging, then dying, disturbs none of bob's calls; her background
        # execution is hers alone.
        flag = os.path.join(tempfile.mkdtemp(dir=os.environ.get("PRINCIPALS_FLAG_DIR")), "go")
        hang = f"import os, time\nwhile not os.path.exists({flag!r}):\n    time.sleep(0.05)\nprint('released')"
        started = text(await alice.call_tool("execute", {"code": hang, "background": True}))
        execution_id = re.search(r'execution_id "([^"]+)"', started).group(1)
        out["bob_while_alice_hangs"] = seen(await bob.call_tool("execute", {"code": "6 * 7"}))
        out["alice_still_running"] = seen(await alice.call_tool("get_output", {"execution_id": execution_id}))
        out["bob_reads_alices_execution"] = seen(await bob.call_tool("get_output", {"execution_id": execution_id}))
        out["bob_reads_no_execution"] = seen(await bob.call_tool("get_output", {"execution_id": "e-" + execution_id[2:][::-1]}))
        out["alice_execution_id"] = execution_id
        out["bob_reads_no_execution_id"] = "e-" + execution_id[2:][::-1]
        open(flag, "w").close()
        out["alice_released"] = seen(await alice.call_tool("get_output", {"execution_id": execution_id, "wait_seconds": 120}))
        out["alice_dies"] = seen(await alice.call_tool("execute", {"code": "import os\nos._exit(1)"}))
        out["bob_after_alice_died"] = seen(await bob.call_tool("execute", {"code": "6 * 7"}))
        # What the replacement kernel holds must outlive the token's rotation below.
        await ready(alice)
        out["alice_keeps"] = seen(await alice.call_tool("execute", {"code": "kept = 'alice-kept'"}))
        # An MCP session belongs to who opened it.
        alice_session = await raw_session(url, alice_token)
        out["bob_names_alices_session"] = await raw_status(url, bob_token, alice_session)
        out["bob_names_no_session"] = await raw_status(url, bob_token, "no-such-session")
        out["alice_names_her_session"] = await raw_status(url, alice_token, alice_session)
        out["wrong_token_refused"] = await refused(url, "not-a-token-of-anyone-123", "auto")
        out["no_token_refused"] = await refused(url, "", "legacy")
        print(json.dumps(out), flush=True)
        # The test now rewrites the file and sends SIGHUP; alice's session must end with it.
        line = await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
        new_alice, bob_token_after = line.split()
        after = {"phase": "after_reload"}
        after["alice_old_raw_session"] = await raw_status(url, new_alice, alice_session)
        try:
            await alice.call_tool("runtime_status", {})
            after["old_alice_session_works"] = True
        except BaseException:
            after["old_alice_session_works"] = False
    after["old_alice_token_refused"] = await refused(url, alice_token, "auto")
    after["bob_refused"] = await refused(url, bob_token_after, "auto")
    async with Client(transport(url, new_alice), mode="auto") as alice:
        after["alice_keeps_her_state"] = seen(await alice.call_tool("execute", {"code": "kept"}))
    print(json.dumps(after), flush=True)


async def main():
    url, alice_token, bob_token, python = sys.argv[1:5]
    await before_reload(url, alice_token, bob_token, python)


asyncio.run(main())
