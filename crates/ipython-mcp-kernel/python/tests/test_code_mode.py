"""Code mode's module (``code_mode``): tools as functions with real signatures, results as
Python objects, errors, search; the server's answers are faked here (the stdin round trip
through a real server is the server's integration tests')."""

import inspect

import pytest

TOOLS = {
    "weather-api": [
        {
            "name": "get-forecast",
            "description": "The forecast for a city.\nSecond line.",
            "inputSchema": {
                "type": "object",
                "properties": {
                    "days": {"type": "integer", "description": "How many days", "default": 1},
                    "city": {"type": "string"},
                    "class": {"type": ["string", "null"]},
                },
                "required": ["city"],
            },
        },
        {"name": "ping", "description": "", "inputSchema": {"type": "object"}},
    ]
}


@pytest.fixture
def module(helper, monkeypatch):
    code_mode = helper.code_mode
    asked = []

    def ask(request):
        asked.append(request)
        if request["op"] == "tools":
            return {"ok": True, "tools": TOOLS[request["server"]]}
        if request["op"] == "catalog":
            servers = {name: {"tools": tools} for name, tools in TOOLS.items()}
            servers["down"] = {"error": "connecting to upstream \"down\" failed: refused"}
            return {"ok": True, "servers": servers}
        if request["tool"] == "ping":
            return {"ok": True, "result": {"content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}}
        if request["arguments"].get("city") == "Atlantis":
            return {"ok": True, "result": {"isError": True, "content": [{"type": "text", "text": "no such city"}]}}
        return {"ok": True, "result": {"structuredContent": {"asked": request["arguments"]}, "content": []}}

    monkeypatch.setattr(code_mode, "_ask", ask)
    return code_mode.Module(["weather-api", "down"]), asked


def test_a_tool_is_a_function_with_the_signature_its_schema_says(module):
    mcp, _ = module
    assert "weather_api" in dir(mcp)
    forecast = mcp.weather_api.get_forecast
    # Required first, in declared order; the others show the schema's default, else None;
    # names made identifiers.
    assert str(inspect.signature(forecast)) == "(city: str, days: int = 1, class_: str = None)"
    assert forecast.__doc__.startswith("The forecast for a city.")
    assert "days: How many days" in forecast.__doc__


def test_calls_send_the_schema_s_names_and_return_structured_content(module):
    mcp, asked = module
    assert mcp.weather_api.get_forecast("Paris", 3) == {"asked": {"city": "Paris", "days": 3}}
    assert asked[-1] == {"op": "call", "server": "weather-api", "tool": "get-forecast", "arguments": {"city": "Paris", "days": 3}}
    mcp.weather_api.get_forecast(city="Oslo", class_="x")
    assert asked[-1]["arguments"] == {"city": "Oslo", "class": "x"}, "a default not passed is the upstream's to apply"
    mcp.weather_api.get_forecast("Oslo", None, None)
    assert asked[-1]["arguments"] == {"city": "Oslo"}, "None leaves it out"
    assert mcp.weather_api.ping() == ["a", "b"], "several blocks: a list"
    with pytest.raises(TypeError, match="city"):
        mcp.weather_api.get_forecast()


def test_errors_unknown_names_and_search(module, helper):
    mcp, asked = module
    with pytest.raises(helper.code_mode.ToolError, match="no such city"):
        mcp.weather_api.get_forecast("Atlantis")
    with pytest.raises(AttributeError, match="configured: down, weather_api"):
        mcp.nowhere
    with pytest.raises(AttributeError, match="it has: get_forecast, ping"):
        mcp.weather_api.forecast
    found = mcp.search("forecast city")
    # One request for every server; one that cannot be reached says so and hides nothing.
    assert [request["op"] for request in asked] == ["tools", "call", "catalog"]
    assert list(found) == [
        'down: unavailable - connecting to upstream "down" failed: refused',
        "weather_api.get_forecast(city: str, days: int = 1, class_: str = None) - The forecast for a city.",
    ]
    assert len(mcp.search("")) == 3


def test_the_async_twin_awaits_the_same_call(module):
    import asyncio

    mcp, _ = module
    result = asyncio.run(mcp.aio.weather_api.get_forecast("Rome"))
    assert result == {"asked": {"city": "Rome"}}
