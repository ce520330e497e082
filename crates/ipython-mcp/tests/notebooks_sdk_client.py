"""Drives the notebooks toolset of the ipython-mcp binary with the official Python MCP SDK client,
in both protocol families. The SDK checks every structuredContent against the tool's
outputSchema, so a mismatch fails here. Prints one JSON line per mode with what it saw.

Usage: python notebooks_sdk_client.py /path/to/ipython-mcp   (IPYTHON_MCP_WORKSPACE_ROOT set)
"""
import asyncio
import json
import os
import sys

from mcp import Client
from mcp.client.stdio import StdioServerParameters


async def session(binary, mode):
    env = {
        key: os.environ[key]
        for key in ("IPYTHON_MCP_CACHE_DIR", "IPYTHON_MCP_WORKSPACE_ROOT", "IPYTHON_MCP_STRUCTURED_OUTPUT", "PATH", "HOME")
        if key in os.environ
    }
    env["IPYTHON_MCP_LOG"] = "warn"
    env["IPYTHON_MCP_SPARE_KERNELS"] = "0"
    env["IPYTHON_MCP_WORKER_STARTUP_TIMEOUT_SECONDS"] = "120"
    params = StdioServerParameters(command=binary, env=env)
    notebook = f"sdk-{mode}.ipynb"
    calls = {}
    async with Client(params, mode=mode) as client:
        for tool, arguments in [
            ("notebook_create", {"path": notebook, "cells": [{"source": "1 + 1"}]}),
            ("notebook_edit", {"action": "insert", "path": notebook, "cell_type": "markdown", "source": "# hi"}),
            ("notebook_edit", {"action": "update", "path": notebook, "index": 1, "metadata": {"tags": ["t"]}}),
            ("notebook_execute_cell", {"path": notebook, "index": 0}),
            ("notebook_execute", {"path": notebook, "code": "print('nb')"}),
            ("notebook_read", {"path": notebook, "include_outputs": True}),
            ("notebook_revision", {"path": notebook}),
            ("notebook_edit", {"action": "move", "path": notebook, "index": 0, "to_index": 1}),
            ("notebook_edit", {"action": "clear_outputs", "path": notebook}),
            ("notebook_edit", {"action": "set_metadata", "path": notebook, "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3"}}}),
            ("notebook_edit", {"action": "delete", "path": notebook, "index": 2}),
            ("notebook_session", {"path": notebook}),
            ("runtime_status", {"notebook": notebook}),
            ("notebook_session_close", {"path": notebook}),
            ("notebook_read", {"path": "../outside.ipynb"}),
            # As Claude Code sends them: a boolean and a number as JSON strings.
            ("notebook_read", {"path": notebook, "include_outputs": "true", "max_cells": "1"}),
        ]:
            result = await client.call_tool(tool, arguments)
            calls.setdefault(tool, []).append(
                {"is_error": result.is_error, "structured": result.structured_content}
            )
    return {"mode": mode, "calls": calls}


async def main():
    for mode in ("legacy", "auto"):
        print(json.dumps(await session(sys.argv[1], mode)), flush=True)


asyncio.run(main())
