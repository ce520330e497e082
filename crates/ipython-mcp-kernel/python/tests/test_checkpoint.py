"""Checkpoints of the namespace (``checkpoint``): writing, restoring, what is lost and why.

The writer and the loader are plain functions over a namespace dict, tested here without a
kernel; the fork after a cell runs in the fake shell's process (a real fork). The kernel-level
flow (a kernel killed, its replacement restored) is the server's integration tests'.
"""

import json
import os
import sys
import threading
import types

import pytest


class Shell:
    """What the checkpointer reads of an IPython shell."""

    def __init__(self, **names):
        self.user_ns = dict(names)
        self.user_ns_hidden = {}
        self.execution_count = 1


def roundtrip(helper, tmp_path, names, max_bytes=1 << 30):
    checkpoint = helper.checkpoint
    checkpoint.write(str(tmp_path), sorted(names.items()), max_bytes, 7)
    shell = Shell()
    return checkpoint.restore(shell, str(tmp_path)), shell.user_ns


def test_values_functions_classes_and_modules_come_back(helper, tmp_path):
    import json as j

    main = sys.modules["__main__"]
    # Defined as a cell defines them: in __main__, so only pickling by value keeps them.
    source = (
        "def double(x):\n    return 2 * x\n"
        "class Point:\n    def __init__(self, x):\n        self.x = x\n"
        "square = lambda x: x * x\n"
    )
    namespace = {"__name__": "__main__"}
    exec(compile(source, "<cell>", "exec"), namespace)
    for name in ("double", "Point", "square"):
        setattr(main, name, namespace[name])
    try:
        names = {
            "x": 41,
            "data": {"a": [1, 2, (3, "four")]},
            "double": namespace["double"],
            "Point": namespace["Point"],
            "p": namespace["Point"](5),
            "square": namespace["square"],
            "j": j,
            "buffer": bytearray(b"\x01" * 100_000),
        }
        result, restored = roundtrip(helper, tmp_path, names)
    finally:
        for name in ("double", "Point", "square"):
            delattr(main, name)
    assert result["execution_count"] == 7
    assert result["lost"] == []
    assert result["restored"] == sorted(names)
    assert restored["x"] == 41
    assert restored["data"] == {"a": [1, 2, (3, "four")]}
    assert restored["double"](4) == 8
    assert restored["square"](3) == 9
    assert restored["p"].x == 5
    assert restored["Point"](2).x == 2
    assert restored["j"] is j
    # Out of band (protocol 5), and still writable when it comes back.
    assert restored["buffer"] == names["buffer"]
    restored["buffer"][0] = 2


def test_what_cannot_be_kept_is_lost_with_its_reason(helper, tmp_path):
    generator = (n for n in range(3))
    handle = open(os.path.join(str(tmp_path), "open.txt"), "w")
    try:
        result, restored = roundtrip(
            helper,
            tmp_path / "checkpoint",
            {"gen": generator, "handle": handle, "lock": threading.Lock(), "kept": 1},
        )
    finally:
        handle.close()
    assert result["restored"] == ["kept"]
    lost = {item["name"]: item["reason"] for item in result["lost"]}
    assert sorted(lost) == ["gen", "handle", "lock"]
    assert "generator" in lost["gen"], lost
    assert all(reason.split(":")[0].endswith("Error") for reason in lost.values()), lost
    assert "gen" not in restored and restored["kept"] == 1


def test_a_value_past_the_bound_is_lost_and_named_while_the_rest_return(helper, tmp_path):
    result, restored = roundtrip(
        helper, tmp_path, {"big": bytearray(50_000), "small": "s"}, max_bytes=10_000
    )
    assert result["restored"] == ["small"]
    assert [item["name"] for item in result["lost"]] == ["big"]
    assert "past the checkpoint bound" in result["lost"][0]["reason"]
    assert restored == {"small": "s"}


def test_only_what_changed_is_written_and_nothing_unreferenced_stays(helper, tmp_path):
    checkpoint = helper.checkpoint
    directory = str(tmp_path)
    objects = os.path.join(directory, checkpoint.OBJECTS)
    checkpoint.write(directory, [("a", bytearray(1000)), ("b", 1)], 1 << 30, 1)
    manifest = json.load(open(os.path.join(directory, checkpoint.MANIFEST)))
    a_blob = os.path.join(objects, manifest["variables"]["a"]["blob"])
    written = os.stat(a_blob).st_mtime_ns
    os.utime(a_blob, ns=(1, 1))
    checkpoint.write(directory, [("a", bytearray(1000)), ("b", 2)], 1 << 30, 2)
    assert os.stat(a_blob).st_mtime_ns == 1, "an unchanged value is not written again"
    manifest = json.load(open(os.path.join(directory, checkpoint.MANIFEST)))
    assert manifest["execution_count"] == 2
    assert sorted(os.listdir(objects)) == sorted(entry["blob"] for entry in manifest["variables"].values())
    assert written > 0


def _manifest(directory):
    with open(os.path.join(str(directory), "manifest.json")) as file:
        return json.load(file)


def test_an_unchangeable_value_is_not_pickled_again_and_a_changed_one_is(helper, tmp_path, monkeypatch):
    """The same tuple of scalars is taken from the previous checkpoint unpickled; a list
    changed in place, a list inside a tuple, and a name bound to a new object are pickled again
    and come back changed."""
    checkpoint = helper.checkpoint
    pickled = []
    real = checkpoint._pickle_value

    def recorded(pickler, value, small):
        pickled.append(value)
        return real(pickler, value, small)

    monkeypatch.setattr(checkpoint, "_pickle_value", recorded)
    same = (1, "a", (2.5, None, b"b"), frozenset({3}))
    # `buffer` is out of band, copied by the kernel's own small write.
    shell = Shell(same=same, items=[1, 2], holder=([1],), n=10**30, buffer=bytearray(200_000))
    writer = checkpoint.Checkpointer(shell, str(tmp_path), 1 << 30, set())
    writer.after_execution(1)
    assert writer.child is None and _manifest(tmp_path)["reused"] == 0
    pickled.clear()
    shell.user_ns["items"].append(3)
    shell.user_ns["holder"][0].append(2)
    shell.user_ns["n"] = 10**30 + 1
    writer.after_execution(2)
    assert not any(value is same for value in pickled), "the unchangeable tuple was pickled again"
    assert sorted(map(repr, pickled)) == sorted(map(repr, [[1, 2, 3], ([1, 2],), 10**30 + 1, bytearray(200_000)]))
    manifest = _manifest(tmp_path)
    # `same`, and `buffer`: pickled again, unchanged, so nothing written for it.
    assert manifest["reused"] == 2 and manifest["tracking"] == "hash", manifest
    shell.user_ns["buffer"][7] = 1
    writer.after_execution(3)
    assert _manifest(tmp_path)["reused"] == 4, "all but the changed buffer"
    restored = Shell()
    checkpoint.restore(restored, str(tmp_path))
    expected = {"same": same, "items": [1, 2, 3], "holder": ([1, 2],), "n": 10**30 + 1}
    assert restored.user_ns == dict(expected, buffer=shell.user_ns["buffer"])


def test_an_unchangeable_value_whose_checkpoint_did_not_finish_is_pickled_again(helper, tmp_path):
    """The manifest does not hold the value under the token it was pickled with (its writer
    was superseded, or another kernel wrote it): pickled again, never taken from another
    value's blob."""
    checkpoint = helper.checkpoint
    shell = Shell(x="first")
    writer = checkpoint.Checkpointer(shell, str(tmp_path), 1 << 30, set())
    writer.after_execution(1)
    # What the manifest now holds for `x` is another value's, under another token.
    other = checkpoint.Checkpointer(Shell(x="other"), str(tmp_path), 1 << 30, set())
    other.after_execution(1)
    writer.after_execution(2)
    manifest = _manifest(tmp_path)
    assert manifest["reused"] == 0, manifest
    restored = Shell()
    checkpoint.restore(restored, str(tmp_path))
    assert restored.user_ns == {"x": "first"}


def test_a_large_value_is_stored_in_chunks_and_only_changed_chunks_are_written(helper, tmp_path, monkeypatch):
    """A buffer and a large pickle in chunks: one byte changed writes one chunk of each; an
    unchanged value writes nothing but the manifest; each comes back as it was last."""
    checkpoint = helper.checkpoint
    chunk = 64 * 1024
    monkeypatch.setattr(checkpoint, "CHUNK_BYTES", chunk)
    monkeypatch.setattr(checkpoint, "_CHUNKED_FROM", chunk)
    directory = str(tmp_path)
    buffer = bytearray(os.urandom(10 * chunk + 100))
    numbers = [float(n) for n in range(100_000)]  # about 900 KB pickled
    checkpoint.write(directory, [("buffer", buffer), ("numbers", numbers)], 1 << 30, 1)
    first = _manifest(directory)
    assert first["written"] > len(buffer) + 800_000, first["written"]
    chunks = os.listdir(os.path.join(directory, checkpoint.CHUNKS))
    assert len(chunks) > 11 + 10, chunks

    buffer[5 * chunk + 7] ^= 0xFF
    numbers[50_000] = -1.0
    checkpoint.write(directory, [("buffer", buffer), ("numbers", numbers)], 1 << 30, 2)
    second = _manifest(directory)
    assert second["written"] < 2 * chunk + 16 * 1024 + len(json.dumps(second)), second["written"]
    assert second["reused"] == 0
    assert len(os.listdir(os.path.join(directory, checkpoint.CHUNKS))) == len(chunks), "the old chunks went"

    checkpoint.write(directory, [("buffer", buffer), ("numbers", numbers)], 1 << 30, 3)
    third = _manifest(directory)
    assert third["reused"] == 2
    assert third["written"] <= len(json.dumps(third)) + 16, third["written"]
    restored = Shell()
    result = checkpoint.restore(restored, directory)
    assert result["lost"] == []
    assert restored.user_ns["buffer"] == buffer and restored.user_ns["numbers"] == numbers
    restored.user_ns["buffer"][0] ^= 1  # writable


def test_a_chunk_rewritten_or_swapped_is_refused(helper, tmp_path, monkeypatch):
    """The kernel can write the checkpoint: a chunk rewritten in place, or replaced by a link
    to another chunk of the same size, is refused at restore; the value is lost, not loaded
    with other bytes."""
    checkpoint = helper.checkpoint
    chunk = 64 * 1024
    monkeypatch.setattr(checkpoint, "CHUNK_BYTES", chunk)
    monkeypatch.setattr(checkpoint, "_CHUNKED_FROM", chunk)
    directory = tmp_path / "checkpoint"
    names = [("a", bytearray(b"a" * 2 * chunk)), ("b", bytearray(b"b" * 2 * chunk)), ("kept", 1)]
    checkpoint.write(str(directory), names, 1 << 30, 1)
    manifest = _manifest(directory)
    chunks = directory / checkpoint.CHUNKS
    first_a = chunks / manifest["variables"]["a"]["chunked"][0][3][0][1]
    first_b = chunks / manifest["variables"]["b"]["chunked"][0][3][0][1]
    with open(first_a, "r+b") as file:  # in place: same name, same inode
        file.write(b"x" * chunk)
    first_b.unlink()
    os.symlink(str(first_a), str(first_b))
    shell = Shell()
    result = checkpoint.restore(shell, str(directory))
    assert result["restored"] == ["kept"], result
    reasons = {item["name"]: item["reason"] for item in result["lost"]}
    assert "does not match its content address" in reasons["a"], reasons
    assert "ELOOP" in reasons["b"] or "link" in reasons["b"] or "Errno 40" in reasons["b"], reasons
    assert "a" not in shell.user_ns and "b" not in shell.user_ns


class _Payload:
    """Unpickled, it creates the file at ``path``: what a planted blob would run."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def test_a_blob_rewritten_in_place_is_refused_and_its_payload_never_runs(helper, tmp_path):
    import pickle
    import struct

    checkpoint = helper.checkpoint
    directory = tmp_path / "checkpoint"
    checkpoint.write(str(directory), [("x", 1), ("y", "kept")], 1 << 30, 3)
    manifest = json.loads((directory / checkpoint.MANIFEST).read_text())
    blob = directory / checkpoint.OBJECTS / manifest["variables"]["x"]["blob"]
    marker = tmp_path / "payload-ran"
    data = pickle.dumps(_Payload(str(marker)), protocol=5)
    with open(blob, "r+b") as file:  # in place: same name, same inode
        # One part, the pickle, in the blob: a well-formed blob of another content.
        file.write(checkpoint.MAGIC + struct.pack("<QQQ", 1, len(data), 0) + data)
        file.truncate()
    shell = Shell()
    result = checkpoint.restore(shell, str(directory))
    assert not marker.exists(), "the replaced blob's payload ran"
    assert result["restored"] == ["y"]
    assert [item["name"] for item in result["lost"]] == ["x"]
    assert "does not match its content address" in result["lost"][0]["reason"]
    assert "x" not in shell.user_ns


def test_links_and_fifos_in_the_checkpoint_are_not_followed(helper, tmp_path):
    checkpoint = helper.checkpoint
    directory = tmp_path / "checkpoint"
    checkpoint.write(str(directory), [("x", 1), ("y", 2)], 1 << 30, 3)
    manifest = json.loads((directory / checkpoint.MANIFEST).read_text())
    blob = directory / checkpoint.OBJECTS / manifest["variables"]["x"]["blob"]
    # A link with the very content the name promises: still not followed.
    real = tmp_path / "elsewhere"
    real.write_bytes(blob.read_bytes())
    blob.unlink()
    blob.symlink_to(real)
    result = checkpoint.restore(Shell(), str(directory))
    assert result["restored"] == ["y"]
    assert [item["name"] for item in result["lost"]] == ["x"]
    # A FIFO in place of the manifest is refused at once, not waited on.
    (directory / checkpoint.MANIFEST).unlink()
    os.mkfifo(directory / checkpoint.MANIFEST)
    with pytest.raises(OSError, match="not a regular file"):
        checkpoint.restore(Shell(), str(directory))
    # A link in place of the manifest is not followed either.
    (directory / checkpoint.MANIFEST).unlink()
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    (directory / checkpoint.MANIFEST).symlink_to(tmp_path / "manifest.json")
    with pytest.raises(OSError):
        checkpoint.restore(Shell(), str(directory))


def test_no_checkpoint_restores_nothing(helper, tmp_path):
    assert helper.checkpoint.restore(Shell(), str(tmp_path)) is None


def test_a_small_namespace_is_written_in_place_and_a_large_one_by_a_child(helper, tmp_path):
    checkpoint = helper.checkpoint
    shell = Shell(x=1, _hidden=2, In=[], configured=types)
    writer = checkpoint.Checkpointer(shell, str(tmp_path), 1 << 30, {"configured"})
    writer.after_execution()
    assert writer.child is None, "small: no child"
    restored = Shell()
    result = checkpoint.restore(restored, str(tmp_path))
    # Private names, IPython's own and the configured bindings are not the user's.
    assert result["restored"] == ["x"]
    assert result["execution_count"] == 0, "the shell counts the next cell already"
    # Past the small bound (in bytes, or a long container): a child writes it.
    for large in (bytearray(checkpoint._SMALL_BYTES + 1), list(range(checkpoint._SMALL_LEN + 1))):
        shell.user_ns["big"] = large
        shell.execution_count += 1
        writer.after_execution(shell.execution_count)
        assert writer.child is not None
        writer.wait()
        assert writer.child is None
        restored = Shell()
        result = checkpoint.restore(restored, str(tmp_path))
        assert result["restored"] == ["big", "x"]
        assert restored.user_ns["big"] == large
        assert result["execution_count"] == shell.execution_count
    leftovers = [name for name in os.listdir(str(tmp_path)) if name.startswith(".")]
    assert leftovers == []


def test_a_failed_checkpoint_is_recorded_until_one_succeeds(helper, tmp_path):
    checkpoint = helper.checkpoint
    shell = Shell(x=1)
    writer = checkpoint.Checkpointer(shell, str(tmp_path), 1 << 30, set())
    objects = tmp_path / checkpoint.OBJECTS
    objects.write_text("a file where the objects directory goes")
    writer.after_execution(1)
    failure = json.load(open(tmp_path / checkpoint.FAILURE))
    assert failure["execution_count"] == 1 and "Error" in failure["reason"], failure
    assert not (tmp_path / checkpoint.MANIFEST).exists()
    objects.unlink()
    writer.after_execution(2)
    assert not (tmp_path / checkpoint.FAILURE).exists()
    assert json.load(open(tmp_path / checkpoint.MANIFEST))["execution_count"] == 2


def test_a_remote_kernel_s_directory_is_private_under_its_temp_directory(helper, tmp_path, monkeypatch):
    import tempfile

    checkpoint = helper.checkpoint
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    assert checkpoint.resolve("/abs/dir") == "/abs/dir", "a local kernel's: the server's path"
    resolved = checkpoint.resolve("ipython-mcp-checkpoints/s1")
    base = os.path.join(str(tmp_path), "ipython-mcp-%d" % os.getuid())
    assert resolved == os.path.join(base, "ipython-mcp-checkpoints", "s1")
    assert os.stat(base).st_mode & 0o777 == 0o700
    # Someone else may write it: refused (they could swap the checkpoint for their own pickle).
    os.chmod(base, 0o777)
    with pytest.raises(PermissionError):
        checkpoint.resolve("ipython-mcp-checkpoints/s1")
    os.rmdir(base)
    os.symlink(str(tmp_path), base)
    with pytest.raises(PermissionError):
        checkpoint.resolve("ipython-mcp-checkpoints/s1")


def test_the_writer_leaves_the_kernel_s_process_group_before_the_reply(helper, tmp_path):
    """A kernel killed just after its reply has its process group killed: the writer is out
    of it by then, even when it has not run at all yet."""
    checkpoint = helper.checkpoint

    class Slow(checkpoint.Checkpointer):
        def _write_in_child(self, *args):
            import time

            time.sleep(0.5)  # the parent's turn, the child not yet in a group of its own
            super()._write_in_child(*args)

    shell = Shell(big=bytearray(checkpoint._SMALL_BYTES + 1))
    writer = Slow(shell, str(tmp_path), 1 << 30, set())
    writer.after_execution()
    child = writer.child
    assert child is not None and os.getpgid(child) == child != os.getpgrp()
    writer.wait()
    assert checkpoint.restore(Shell(), str(tmp_path))["restored"] == ["big"]


class _Held:
    """Pickled, it creates ``started`` and waits until ``flag`` exists (bounded, in case the
    test fails first): a writer that is still working for as long as the test wants."""

    def __init__(self, started, flag):
        self.started, self.flag = started, flag

    def __reduce__(self):
        import time

        with open(self.started, "w"):
            pass
        deadline = time.monotonic() + 600
        while not os.path.exists(self.flag) and time.monotonic() < deadline:
            time.sleep(0.01)
        return (int, (7,))


class _Returns:
    """Fails the test when its block runs past ``seconds`` (SIGALRM): a checkpoint that waits
    for a held writer would otherwise wait as long as the writer is held."""

    def __init__(self, seconds=120):
        self.seconds = seconds

    def __enter__(self):
        import signal

        def too_long(signum, frame):
            raise AssertionError("a checkpoint waited for the running writer")

        self.previous = signal.signal(signal.SIGALRM, too_long)
        signal.alarm(self.seconds)

    def __exit__(self, *exc):
        import signal

        signal.alarm(0)
        signal.signal(signal.SIGALRM, self.previous)


def _wait_for_file(path, seconds=120):
    import time

    deadline = time.monotonic() + seconds
    while not os.path.exists(path):
        assert time.monotonic() < deadline, "%s never appeared" % path
        time.sleep(0.01)


@pytest.mark.parametrize("end_waiting_children", [True, False])
def test_no_checkpoint_waits_for_a_writer_and_only_the_newest_waiting_one_writes(
    helper, tmp_path, monkeypatch, end_waiting_children
):
    """While a writer works, the next checkpoints return at once (small namespaces too); of
    those that wait for their turn only the newest writes, after the running one: the manifest
    never goes back. Without ending the older waiting child (``end_waiting_children`` off),
    the generation check alone keeps it from writing."""
    import signal

    checkpoint = helper.checkpoint
    directory = str(tmp_path / "checkpoint")
    log = str(tmp_path / "commits")
    real_commit = checkpoint._commit

    def logged_commit(directory, execution_count, pickler, snapshot):
        real_commit(directory, execution_count, pickler, snapshot)
        fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        os.write(fd, b"%d\n" % execution_count)
        os.close(fd)

    monkeypatch.setattr(checkpoint, "_commit", logged_commit)
    started, flag = str(tmp_path / "started"), str(tmp_path / "flag")
    # `big` first: the kernel's small attempt gives up on it before it reaches `held`.
    shell = Shell(big=bytearray(checkpoint._SMALL_BYTES + 1), held=_Held(started, flag))
    writer = checkpoint.Checkpointer(shell, directory, 1 << 30, set())
    if not end_waiting_children:
        writer._supersede = lambda generation: None

    try:
        writer.after_execution(1)
        _wait_for_file(started)  # the writer of 1 is pickling, held
        del shell.user_ns["big"], shell.user_ns["held"]
        with _Returns():
            for count in (2, 3):
                shell.user_ns["x"] = count  # small: the kernel would write it, but the turn is taken
                writer.after_execution(count)
        assert len(writer.children) >= 2, "the newest waits in a child of its own"
        assert not os.path.exists(os.path.join(directory, checkpoint.MANIFEST))
    finally:
        with open(flag, "w"):
            pass
    writer.wait()
    with open(log) as file:
        assert file.read().split() == ["1", "3"]
    restored = Shell()
    result = checkpoint.restore(restored, directory)
    assert result["execution_count"] == 3 and restored.user_ns == {"x": 3}
    assert not os.path.exists(os.path.join(directory, checkpoint.FAILURE))
    # The turn is free again: a small namespace is written in the kernel itself.
    shell.user_ns["x"] = 4
    writer.after_execution(4)
    assert writer.child is None
    with open(log) as file:
        assert file.read().split() == ["1", "3", "4"]


def test_restore_waits_for_the_child_that_waits_for_its_turn(helper, tmp_path):
    """A kernel gone while one child writes and a newer one waits: the restore waits for both
    and loads the newest."""
    import threading

    checkpoint = helper.checkpoint
    directory = str(tmp_path / "checkpoint")
    started, flag = str(tmp_path / "started"), str(tmp_path / "flag")
    shell = Shell(big=bytearray(checkpoint._SMALL_BYTES + 1), held=_Held(started, flag))
    writer = checkpoint.Checkpointer(shell, directory, 1 << 30, set())
    try:
        writer.after_execution(1)
        _wait_for_file(started)
        del shell.user_ns["big"], shell.user_ns["held"]
        shell.user_ns["x"] = 2
        with _Returns():
            writer.after_execution(2)
        results = []
        loading = threading.Thread(target=lambda: results.append(checkpoint.restore(Shell(), directory)))
        loading.start()
    finally:
        with open(flag, "w"):
            pass
    loading.join(120)
    assert not loading.is_alive()
    assert results[0]["execution_count"] == 2 and results[0]["restored"] == ["x"]
    writer.wait()
