"""Tests of the helper's bounds (``bounds``): sanitizing, MIME bundles, tracebacks.

Run from the workspace root:  python -m pytest crates/ipython-mcp-kernel/python/tests -q
"""

import base64
import json

from harness import load_helper

helper = load_helper()


def test_sanitize_replaces_lone_surrogates_one_for_one():
    assert helper.bounds.sanitize_text("plain") == "plain"
    assert helper.bounds.sanitize_text("é𝄞") == "é𝄞"
    assert helper.bounds.sanitize_text("a\ud800b\udfffc") == "a\ufffdb\ufffdc"
    json.dumps(helper.bounds.sanitize_text("\udc80")).encode("utf-8")


def test_bound_bundle_cuts_strings_and_drops_big_images():
    png = base64.b64encode(b"\x89PNG" + b"\0" * 2000).decode("ascii")
    data = {
        "text/plain": "t" * 50,
        "image/svg+xml": "<svg>" + "s" * 100,
        "image/png": png,
        "image/jpeg": "j" * 4000,
        "application/json": {"nested": ["n" * 30, {"deep": "d" * 30}], "n": 3},
    }
    metadata = {"image/png": {"width": 10}, "note": "m" * 40}
    original = json.dumps([data, metadata])

    kept, meta = helper.bounds.bound_bundle(data, metadata, max_string_chars=20, max_image_bytes=2500)

    assert json.dumps([data, metadata]) == original  # inputs untouched
    assert kept["text/plain"] == "t" * 20
    assert kept["image/svg+xml"] == "<svg>" + "s" * 100  # an image: kept whole while it fits
    assert kept["image/png"] == png  # 2004 decoded bytes fit; images are never cut
    assert "image/jpeg" not in kept
    assert kept["application/json"] == {"nested": ["n" * 20, {"deep": "d" * 20}], "n": 3}
    assert meta["note"] == "m" * 20
    assert meta["image/png"] == {"width": 10}
    assert meta["ipython_mcp"] == {"omitted_images": {"image/jpeg": 3000}}


def test_oversized_png_and_jpeg_go_to_the_server_whole_for_downscaling():
    # The server downscales them (for every kernel); the helper only decides what it sends.
    data = {"image/png": "p" * 4000, "image/jpeg": "j" * 4000, "image/gif": "g" * 4000}
    kept, meta = helper.bounds.bound_bundle(data, {}, 100, 1000, max_fit_input_bytes=3000)
    assert kept == {"image/png": "p" * 4000, "image/jpeg": "j" * 4000}
    assert meta == {"ipython_mcp": {"omitted_images": {"image/gif": 3000}}}
    # Past the largest image the server decodes, they are omitted like any other.
    kept, meta = helper.bounds.bound_bundle(data, {}, 100, 1000, max_fit_input_bytes=2999)
    assert kept == {}
    assert meta == {"ipython_mcp": {"omitted_images": {"image/png": 3000, "image/jpeg": 3000, "image/gif": 3000}}}


def test_bound_bundle_drops_an_svg_too_big_to_return():
    kept, meta = helper.bounds.bound_bundle({"image/svg+xml": "<svg>" + "é" * 10, "text/plain": "x"}, {}, 100, 20)
    assert kept == {"text/plain": "x"}
    assert meta == {"ipython_mcp": {"omitted_images": {"image/svg+xml": 25}}}


def test_bound_bundle_handles_raw_bytes_images_and_missing_metadata():
    kept, meta = helper.bounds.bound_bundle({"image/png": b"\0" * 10, "image/gif": b"\0" * 11}, None, 5, 10)
    assert kept == {"image/png": b"\0" * 10}
    assert meta == {"ipython_mcp": {"omitted_images": {"image/gif": 11}}}


def test_bound_bundle_sanitizes_surrogates():
    kept, meta = helper.bounds.bound_bundle({"text/plain": "x\ud800"}, {"k\udc00": "v"}, 100, 100)
    assert kept == {"text/plain": "x\ufffd"}
    assert meta == {"k\ufffd": "v"}


def test_traceback_is_stripped_of_ansi_and_kept_when_short():
    stb = ["\x1b[31m-----\x1b[39m", "\x1b[0;31mValueError\x1b[0m: boom", "\x1b]8;;http://x\x07link\x1b]8;;\x07"]
    assert helper.bounds.bound_traceback(stb, 100) == ["-----", "ValueError: boom", "link"]


def test_traceback_bound_keeps_head_and_tail_with_exact_count():
    stb = ["header\n", "frame " * 200, "frame2 " * 200, "\x1b[31mValueError\x1b[39m: the end"]
    plain = [helper.bounds.strip_ansi(entry) for entry in stb]
    bounded = helper.bounds.bound_traceback(stb, 200)

    marker = [entry for entry in bounded if entry.startswith("... ")]
    assert len(marker) == 1
    kept = [entry for entry in bounded if not entry.startswith("... ")]
    assert sum(map(len, kept)) == 200
    assert bounded[0] == "header\n"
    assert bounded[-1] == "ValueError: the end"
    omitted = sum(map(len, plain)) - 200
    assert marker[0] == "... %d characters of traceback omitted ..." % omitted


def test_traceback_single_huge_entry_keeps_both_ends():
    bounded = helper.bounds.bound_traceback(["S" + "x" * 10_000 + "SyntaxError: bad"], 400)
    assert bounded[0].startswith("Sxxx") and len(bounded[0]) == 100
    assert bounded[2].endswith("SyntaxError: bad") and len(bounded[2]) == 300
    assert bounded[1] == "... 9617 characters of traceback omitted ..."
