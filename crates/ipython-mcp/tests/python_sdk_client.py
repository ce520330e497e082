"""Drives the ipython-mcp binary with the official Python MCP SDK client, in both protocol
families, and prints one JSON line per mode with what it saw.

Usage: python python_sdk_client.py /path/to/ipython-mcp        (stdio: the client starts it)
       python python_sdk_client.py --http URL TOKEN            (a running server in the
                                                                fixtures test mode)
"""
import asyncio
import json
import os
import sys
import time

import httpx2
import jsonschema
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

FIXTURES = ("test_", "json_schema_")


def schema_problems(schema, instance):
    """Where ``instance`` breaks ``schema`` (JSON Schema 2020-12 unless it says otherwise)."""
    validator = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    return [error.message[:300] for error in validator(schema).iter_errors(instance)]


def admitted_types(schema, defs):
    """JSON types a property schema admits; None when it admits anything."""
    if "$ref" in schema:
        return admitted_types(defs[schema["$ref"].rsplit("/", 1)[-1]], defs)
    if "type" in schema:
        return [schema["type"]] if isinstance(schema["type"], str) else list(schema["type"])
    if "enum" in schema or "const" in schema:
        return ["string"]
    branches = schema.get("anyOf") or schema.get("oneOf")
    if not branches:
        return None
    types = []
    for branch in branches:
        more = admitted_types(branch, defs)
        if more is None:
            return None
        types += more
    return types


def wrong_values(types):
    """Wrong-typed values: strings that spell no boolean or number first (one that does is
    taken as that value), then other types."""
    numeric = "number" in types or "integer" in types
    values = []
    if "string" not in types:
        if "boolean" in types:
            values += ["yes", "True"]
        if numeric:
            values.append("5 s")
        values.append("text")
    else:
        values.append(12345 if not numeric else [1])
    if "object" not in types:
        values.append({"x": 1})
    if "boolean" not in types and "string" not in types:
        values.append(True)
    return values


async def bad_arguments_sweep(client, tools):
    """Every listed tool, every parameter, wrong types (plus an unknown field and a missing
    required one): each reply must be a structured invalid_arguments error that names the
    field and validates against the tool's outputSchema. Returns what went wrong, and how many
    calls were made."""
    problems, calls = [], 0
    for tool in tools:
        if tool.name.startswith(FIXTURES):
            continue
        schema = tool.input_schema
        defs = schema.get("$defs", {})
        attempts = []
        for name, prop in schema.get("properties", {}).items():
            types = admitted_types(prop, defs)
            if types is not None:
                attempts += [({name: value}, name) for value in wrong_values(types)]
        attempts.append(({"no_such_argument": 1}, "no_such_argument"))
        if schema.get("required"):
            attempts.append(({}, schema["required"][0]))
        for arguments, field in attempts:
            calls += 1
            result = await client.call_tool(tool.name, arguments)
            where = "%s %s" % (tool.name, json.dumps(arguments))
            if tool.output_schema is None:
                # A tool without an output schema (an image-bearing one in the auto shape)
                # answers in text: the code and the field, for the model to read.
                text = result_text(result)
                if result.structured_content is not None:
                    problems.append("%s: structuredContent without an outputSchema" % where)
                elif not result.is_error or "[invalid_arguments]" not in text:
                    problems.append("%s: not an invalid_arguments error: %s" % (where, text[:300]))
                elif "`%s`" % field not in text:
                    problems.append("%s: text does not name %s: %s" % (where, field, text[:300]))
                continue
            structured = result.structured_content or {}
            error = structured.get("error") or {}
            if not result.is_error or structured.get("ok") is not False:
                problems.append("%s: not an error: %s" % (where, json.dumps(structured)[:300]))
            elif error.get("code") != "invalid_arguments":
                problems.append("%s: code %r" % (where, error.get("code")))
            elif "`%s`" % field not in error.get("message", ""):
                problems.append("%s: message does not name %s: %s" % (where, field, error.get("message")))
            for problem in schema_problems(tool.output_schema, structured):
                problems.append("%s: outputSchema: %s" % (where, problem))
    return problems, calls


def result_text(result):
    return "\n".join(block.text for block in result.content if block.type == "text")


def execution(result):
    """An execute-like result for the checks: its typed fields when it has them, else its text."""
    return {"is_error": result.is_error, "structured": result.structured_content, "text": result_text(result)}


def http_transport(url, token):
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    http = httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30.0, read=300.0))
    return streamable_http_client(url, http_client=http)


async def clients_counted(client):
    """How many clients the fixtures' hook would notify now."""
    result = await client.call_tool("test_count_clients", {})
    return int(result_text(result).split()[0])


async def list_changed_heard(client, mode, changed):
    """Fires the fixtures' hook and says whether this client was told the tool list changed."""
    if mode == "legacy":
        await client.call_tool("test_trigger_tool_change", {})
        try:
            await asyncio.wait_for(changed.wait(), 60)
            return True
        except asyncio.TimeoutError:
            return False
    before = await clients_counted(client)
    async with client.listen(tools_list_changed=True) as subscription:
        # The server acknowledges a subscription before it registers it: wait for that.
        deadline = asyncio.get_running_loop().time() + 60
        while await clients_counted(client) <= before:
            if asyncio.get_running_loop().time() > deadline:
                return False
            await asyncio.sleep(0.02)
        await client.call_tool("test_trigger_tool_change", {})
        try:
            await asyncio.wait_for(subscription.__anext__(), 60)
            return True
        except asyncio.TimeoutError:
            return False


async def session(target, mode):
    changed = asyncio.Event()

    async def on_message(message):
        method = getattr(message, "method", None) or getattr(getattr(message, "root", None), "method", None)
        if method == "notifications/tools/list_changed":
            changed.set()

    if isinstance(target, tuple):
        params = http_transport(*target)
    else:
        env = {key: os.environ[key] for key in ("IPYTHON_MCP_CACHE_DIR", "PATH", "HOME") if key in os.environ}
        env["IPYTHON_MCP_LOG"] = "warn"
        env["IPYTHON_MCP_SPARE_KERNELS"] = "0"
        env["IPYTHON_MCP_WORKER_STARTUP_TIMEOUT_SECONDS"] = "120"
        if "IPYTHON_MCP_STRUCTURED_OUTPUT" in os.environ:
            env["IPYTHON_MCP_STRUCTURED_OUTPUT"] = os.environ["IPYTHON_MCP_STRUCTURED_OUTPUT"]
        params = StdioServerParameters(command=target, env=env)
    extra = {}
    async with Client(params, mode=mode, message_handler=on_message) as client:
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
        started = time.monotonic()
        slow_result = await client.call_tool("execute", {"code": slow}, progress_callback=on_progress)
        slow_ms = int((time.monotonic() - started) * 1000)
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
            # A dynamic tool: published, listed, called (schema-checked), removed.
            ("execute", {"code": "def triple(v: int, note: str = '') -> int:\n    return 3 * v"}),
            ("register_tool", {"name": "triple"}),
            ("triple", {"v": 14}),
            ("triple", {"v": "not an int"}),
            ("unregister_tool", {"names": ["triple", "execute"]}),
            # Leave the namespace as found: over HTTP the next mode shares this kernel.
            ("reset", {}),
        ]:
            result = await client.call_tool(tool, arguments)
            namespace.setdefault(tool, []).append(execution(result))
        # Every result seen above, errors included, fits its tool's outputSchema.
        schemas = {tool.name: tool.output_schema for tool in tools.tools}
        schema_errors = []
        for tool, results in namespace.items():
            if tool not in schemas:  # the dynamic tool, listed only while registered
                continue
            for seen in results:
                if schemas[tool] is None:
                    if seen["structured"] is not None:
                        schema_errors.append("%s: structuredContent without an outputSchema" % tool)
                    continue
                for problem in schema_problems(schemas[tool], seen["structured"]):
                    schema_errors.append("%s: %s" % (tool, problem))
        extra["schema_errors"] = schema_errors
        extra["bad_arguments"], extra["bad_argument_calls"] = await bad_arguments_sweep(client, tools.tools)
        if isinstance(target, tuple):
            extra["fixtures_listed"] = any(tool.name.startswith(FIXTURES) for tool in tools.tools)
            extra["list_changed"] = await list_changed_heard(client, mode, changed)
        extra["listed_after"] = sorted(tool.name for tool in (await client.list_tools()).tools)
        return extra | {
            "progress": progress,
            # The run time the server measured when the result is typed, else the client's.
            "progress_run_ms": (slow_result.structured_content or {}).get("runtime", {}).get("run_ms", slow_ms),
            "namespace": namespace,
            "mode": mode,
            "protocol": client.protocol_version,
            "tools": sorted(tool.name for tool in tools.tools if not tool.name.startswith(FIXTURES)),
            "without_output_schema": sorted(
                tool.name for tool in tools.tools if not tool.name.startswith(FIXTURES) and not tool.output_schema
            ),
            "state": status.structured_content["state"],
            "first": execution(first),
            "failed": execution(failed),
        }


async def refused_without_token(url, mode):
    """A client without the token must not get in."""
    try:
        async with Client(http_transport(url, None), mode=mode) as client:
            await client.list_tools()
    except BaseException:  # the SDK raises an ExceptionGroup or an MCPError
        return True
    return False


async def main():
    if sys.argv[1] == "--http":
        target = (sys.argv[2], sys.argv[3])
    else:
        target = sys.argv[1]
    for mode in ("legacy", "auto"):
        run = await session(target, mode)
        if isinstance(target, tuple):
            run["refused_without_token"] = await refused_without_token(target[0], mode)
        print(json.dumps(run), flush=True)


asyncio.run(main())
