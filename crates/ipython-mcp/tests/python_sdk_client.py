"""Drives the ipython-mcp binary with the official Python MCP SDK client, in both protocol
families, and prints one JSON line per mode with what it saw.

Usage: python python_sdk_client.py /path/to/ipython-mcp
"""
import asyncio
import json
import os
import sys

from mcp import Client
from mcp.client.stdio import StdioServerParameters


async def session(binary, mode):
    env = {key: os.environ[key] for key in ("IPYTHON_MCP_CACHE_DIR", "PATH", "HOME") if key in os.environ}
    env["IPYTHON_MCP_LOG"] = "warn"
    params = StdioServerParameters(command=binary, env=env)
    async with Client(params, mode=mode) as client:
        tools = await client.list_tools()
        for _ in range(6000):
            status = await client.call_tool("runtime_status", {})
            if status.structured_content["state"] != "starting":
                break
            await asyncio.sleep(0.1)
        first = await client.call_tool("execute", {"code": "x = 20\nprint('hello')\nx * 2 + 2"})
        failed = await client.call_tool("execute", {"code": "raise ValueError('nope')"})
        # Progress: the latest output line, at most once a second, while the cell runs.
        progress = []

        async def on_progress(value, total, message):
            progress.append({"progress": value, "message": message})

        slow = "import time\nfor i in range(5):\n    print(f'step {i}', flush=True)\n    time.sleep(0.6)"
        await client.call_tool("execute", {"code": slow}, progress_callback=on_progress)
        # Every namespace tool, so the SDK checks each result against its advertised schema.
        await client.call_tool("execute", {"code": "def double(v: int) -> int:\n    return 2 * v\ntable = {'k': [1, 2]}"})
        namespace = {}
        for tool, arguments in [
            ("list", {}),
            ("search", {"query": "tab"}),
            ("inspect", {"name": "double"}),
            ("call_function", {"name": "double", "arguments": {"v": 21}}),
            ("call_function", {"name": "double", "arguments": {"nope": 1}}),
            ("reload", {"modules": ["json", "not_imported_here"]}),
            ("remove", {"names": ["table", "ghost", "_x"]}),
            ("reset", {}),
            # The kernels toolset and background output, checked against their schemas too.
            ("execute", {"code": "for i in range(3): print('row', i)", "background": True}),
            ("get_output", {"wait_seconds": 30}),
            ("get_output", {"wait_seconds": 30, "stream": "stdout", "pattern": "row [12]"}),
            ("kernel_list", {}),
            ("kernel_discover", {}),
            ("kernel_start", {"spec": status.structured_content["kernel"]["python"], "kernel": "second"}),
            ("kernel_stop", {"kernel": "second"}),
        ]:
            result = await client.call_tool(tool, arguments)
            namespace.setdefault(tool, []).append(
                {"is_error": result.is_error, "structured": result.structured_content}
            )
        return {
            "progress": progress,
            "namespace": namespace,
            "mode": mode,
            "protocol": client.protocol_version,
            "tools": sorted(tool.name for tool in tools.tools),
            "output_schemas": all(tool.output_schema for tool in tools.tools),
            "state": status.structured_content["state"],
            "result": first.structured_content["result"]["text/plain"],
            "stdout": first.structured_content["stdout"],
            "first_is_error": first.is_error,
            "text": [block.text for block in first.content if block.type == "text"],
            "failed_is_error": failed.is_error,
            "failed_code": failed.structured_content["error"]["code"],
            "failed_ename": failed.structured_content["error"]["ename"],
        }


async def main():
    for mode in ("legacy", "auto"):
        print(json.dumps(await session(sys.argv[1], mode)), flush=True)


asyncio.run(main())
