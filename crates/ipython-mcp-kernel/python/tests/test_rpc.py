"""Tests of the helper's comm protocol (``rpc``): every request gets a reply.

Run from the workspace root:  python -m pytest crates/ipython-mcp-kernel/python/tests -q
"""

from harness import load_helper


def test_requests_always_get_a_reply(helper):
    assert helper.rpc.handle_request({"id": "1", "method": "ping", "params": {"x": 1}}) == {
        "id": "1",
        "ok": True,
        "result": {"x": 1},
    }
    unknown = helper.rpc.handle_request({"id": "2", "method": "nope", "params": {}})
    assert unknown["ok"] is False and unknown["error"]["code"] == "unknown_method"
    for bad in (None, [], {"id": "3"}, {"id": "3", "method": "ping", "params": []}):
        reply = helper.rpc.handle_request(bad)
        assert reply["ok"] is False and reply["error"]["code"] == "invalid_request"
    not_installed = helper.rpc.handle_request({"id": "4", "method": "config"})
    assert not_installed["error"]["code"] == "not_installed"


def test_requests_report_exceptions_from_methods():
    module = load_helper()
    module.rpc.METHODS["boom"] = lambda params: 1 / 0
    reply = module.rpc.handle_request({"id": "5", "method": "boom", "params": {}})
    assert reply == {
        "id": "5",
        "ok": False,
        "error": {"code": "internal_error", "message": "ZeroDivisionError: division by zero"},
    }


def test_module_constants(helper):
    assert helper.HELPER_VERSION == "1"
    assert helper.COMM_TARGET == "ipython_mcp"


def test_error_fields_travel_in_the_reply(helper):
    def raising(params):
        raise helper.rpc.RequestError("execution_error", "m", ename="E", evalue="v", traceback=["t"])

    helper.rpc.METHODS["raising"] = raising
    reply = helper.rpc.handle_request({"id": "1", "method": "raising", "params": {}})
    assert reply["error"] == {"code": "execution_error", "message": "m", "ename": "E", "evalue": "v", "traceback": ["t"]}
