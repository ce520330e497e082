"""Checkpoints of the user namespace, and restoring one into a fresh kernel.

After each execution that is not silent, the namespace is pickled
(cloudpickle, else dill, else the standard pickle; imported modules by name) and what changed
is written, then the new manifest made current with one rename. A small namespace (the common
case: a fork alone costs more) is written by the kernel itself before the reply, in well under
a millisecond. A larger one by a forked child, a copy-on-write snapshot of the namespace at
that instant: the parent only pays for the fork; the reply goes out at once.

No execution waits for a checkpoint. Writers take turns (``TURN_LOCK``): one writes, and at
most the newest snapshot waits behind it, a child that takes the turn once the writer is done.
Each checkpoint gets the next generation number, shared with the children (``_Generation``);
a child that gets the turn and finds a newer generation exits without writing, so the
manifest never goes back to an older execution, and a newer checkpoint ends an older waiting
child at once (``SIGTERM``; the child ignores it once it writes). A small namespace is written
in the kernel only when the turn is free; otherwise a child waits for the turn with its bytes.
Every child holds ``WRITER_LOCK`` shared from before the fork until it exits; `restore` takes
it exclusively, so a replacement waits for every child a dead kernel left, writing or waiting,
and reads only what they finished.

Why a fork of a threaded process is safe here: the child runs only this module's code (and
the objects' own pickling methods), takes no lock another thread could hold except through
those methods, never touches zmq or the output streams, and ends with ``os._exit``. Should a
pickling method wait on a lock held by a thread that the fork left behind, ``SIGALRM`` ends
the child after ``_CHILD_SECONDS`` and the previous checkpoint stays current.

What is not written again. A value that is the same object as at the previous checkpoint and
cannot change (an exact ``int``, ``float``, ``complex``, ``bool``, ``None``, a short ``str`` or
``bytes``, a small tuple or frozenset of those: ``_unchangeable``) is not even pickled: the
kernel holds it (so its identity cannot pass to another object) and the writer takes its stored
blob again, once it has checked that the current manifest holds it under the token given when
it was pickled. Anything mutable (a list, a dict, an instance, a function: its contents or
globals may have changed under the same identity) is pickled again, and only what changed is
written. A large part of a value (its pickle, or an out-of-band buffer: a numpy array, a large
``bytes``) is stored in content-addressed chunks of ``CHUNK_BYTES``: a chunk whose CRC-32 is the
one the current manifest lists for the same place is taken again without hashing it or writing
it, so a cell that changes 1 MB of a 1 GiB array writes one or two chunks. The CRC-32 runs in
the forked child, never on the kernel's thread (a namespace written in the kernel is small and
has no chunks). A change to a chunk that leaves its CRC-32 and length as they were (about one
random change in four billion) would be missed; the SHA-256 names still guard every restore.

Layout of the checkpoint directory:

* ``manifest.json``: ``{"format", "execution_count", "variables": {name: {"blob", "bytes",
  "kind"?, "token"?, "chunked"?: [[part, length, chunk size, [[crc32, chunk], ...]], ...]}},
  "modules": {name: module}, "lost": [{"name", "reason"}], "bytes", "pickler", "written",
  "reused", "tracking"}``, replaced atomically (``written``: bytes this checkpoint wrote;
  ``reused``: values it took from the previous one without writing anything);
* ``objects/<sha256>``: one value each, content-addressed, so a value that did not change is
  not written again. A value has parts: its pickle (protocol 5), then each out-of-band buffer
  (a numpy array's memory is written as it is, never copied into the pickle). A blob is
  ``MAGIC``, the count of parts, each part's length and chunk size (0: the part is in the blob
  itself) as 8-byte little-endian numbers, the 20-byte names of the chunks of every chunked
  part in order, then the parts kept in the blob;
* ``chunks/<sha256>``: ``CHUNK_BYTES`` of a chunked part (its last chunk shorter).

The names are the first 40 hexadecimal digits of the content's SHA-256; a blob names its
chunks, so a restore checks each file against its name before anything is unpickled.

Standard library only at import time; cloudpickle or dill are used when the kernel has them.
"""

import hashlib
import io
import json
import os
import pickle
import signal
import stat
import struct
import sys
import time
import types
import warnings
import zlib

from .rpc import METHODS, RequestError, checked_params, current

try:
    import fcntl
except ImportError:  # Windows: no fork and no flock, so no checkpoints (see `supported`)
    fcntl = None

MANIFEST = "manifest.json"
# Held shared by every child until it exits, exclusively by `restore` (see Checkpointer._fork).
WRITER_LOCK = "writer.lock"
# Held exclusively by whoever writes the checkpoint, a child or the kernel: one at a time.
TURN_LOCK = "turn.lock"
# Why the latest attempt failed, until one succeeds.
FAILURE = "failure.json"
OBJECTS = "objects"
CHUNKS = "chunks"
MAGIC = b"IPMCKPT2"
_FORMAT = 2
# A part of a value from this size on is stored in chunks of CHUNK_BYTES (see the module's
# documentation); a smaller one in the value's blob.
_CHUNKED_FROM = 1 << 20
CHUNK_BYTES = 4 << 20
# How changes are found: each chunk is hashed again (CRC-32) by the writer.
_TRACKING = "hash"
# The most an unchangeable value may hold to be kept without pickling (see `_unchangeable`):
# the kernel holds it until the next checkpoint.
_SAME_ITEMS = 256
_SAME_BYTES = 64 * 1024
# A child that has not finished by then is ended (see the module's documentation).
_CHILD_SECONDS = 600
# Names IPython and the helper keep in user_ns that are not the user's.
_NOT_USERS = frozenset(("In", "Out", "exit", "quit", "get_ipython"))
_MAX_REASON = 200
# A namespace that pickles within this, none of its containers past _SMALL_LEN items, is
# written in the kernel itself (see Checkpointer.after_execution).
_SMALL_BYTES = 1 << 20
_SMALL_LEN = 10_000
_CONTAINERS = (list, tuple, dict, set, frozenset)


def _pickler():
    """(name, Pickler class) of the best pickler the kernel has."""
    try:
        import cloudpickle

        return "cloudpickle", cloudpickle.Pickler
    except Exception:
        pass
    try:
        import dill

        return "dill", dill.Pickler
    except Exception:
        pass
    return "pickle", pickle.Pickler


class _Bounded(io.BytesIO):
    """A pickle's output that stops it past ``_SMALL_BYTES`` (raising ``_TooBig``) before
    taking the bytes in: a large value is given up at once, not copied first."""

    def write(self, data):
        if self.tell() + len(data) > _SMALL_BYTES:
            raise _TooBig
        return super().write(data)


def _dumps(pickler, value, buffers, small):
    """``value`` pickled (protocol 5; large buffers out of band into ``buffers``)."""
    output = _Bounded() if small else io.BytesIO()
    pickler(output, protocol=5, buffer_callback=buffers.append).dump(value)
    return output.getvalue()


# A bytes or bytearray value from this size on is pickled as a PickleBuffer, out of band: the
# pickler copies these types into the pickle itself (it handles them before any hook), which
# would double the writer's memory, and a kernel's memory limit counts it.
_OUT_OF_BAND_BYTES = 64 * 1024


def _user_names(shell, protected):
    hidden = getattr(shell, "user_ns_hidden", {})
    for name, value in list(shell.user_ns.items()):
        if name.startswith("_") or name in _NOT_USERS or name in protected:
            continue
        if name in hidden and hidden[name] is value:
            continue
        yield name, value


_SCALARS = frozenset((int, float, complex, bool, type(None)))


def _unchangeable(value):
    """Whether ``value`` can never change while it lives, and holds little (``_SAME_ITEMS``
    items, ``_SAME_BYTES`` bytes): exact built-in scalars, ``str`` and ``bytes``, and tuples and
    frozensets of those. A subclass may carry a mutable ``__dict__``, so types are exact."""
    pending, items, size = [value], 0, 0
    while pending:
        item = pending.pop()
        kind = type(item)
        items += 1
        if items > _SAME_ITEMS:
            return False
        if kind is str or kind is bytes:
            size += len(item)
        elif kind is int:
            size += item.bit_length() // 8
        elif kind is tuple or kind is frozenset:
            pending.extend(item)
        elif kind not in _SCALARS:
            return False
        if size > _SAME_BYTES:
            return False
    return True


def _reason(error):
    text = "%s: %s" % (type(error).__name__, error)
    return text if len(text) <= _MAX_REASON else text[: _MAX_REASON - 1] + "…"


def supported():
    """Whether this kernel can take checkpoints: they need ``fork`` and ``flock``."""
    return fcntl is not None and hasattr(os, "fork")


def resolve(directory):
    """The checkpoint directory for ``directory`` as configured.

    An absolute path is the server's (a local kernel: a directory it made private). A relative
    one comes from a server on another machine (a remote kernel): it goes in a directory of
    this user's own under this machine's temp directory, ``ipython-mcp-<uid>``, made 0700 and
    refused when someone else owns it or may write it, so that kernels of the same Jupyter
    server find it again and nobody else reads it.
    """
    if os.path.isabs(directory):
        return directory
    import tempfile

    base = os.path.join(tempfile.gettempdir(), "ipython-mcp-%d" % os.getuid())
    try:
        os.mkdir(base, 0o700)
    except FileExistsError:
        pass
    info = os.lstat(base)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise PermissionError("%s is not a private directory of this user's" % base)
    return os.path.join(base, directory)


class _Generation:
    """The newest checkpoint's generation number, in memory the kernel shares with its
    children (an anonymous shared mapping made before the first fork): a waiting child reads
    it once it has the turn, to know whether a newer checkpoint replaced it."""

    def __init__(self):
        import mmap

        self._memory = mmap.mmap(-1, 8)

    def set(self, generation):
        struct.pack_into("<Q", self._memory, 0, generation)

    def get(self):
        return struct.unpack_from("<Q", self._memory, 0)[0]


class Checkpointer:
    """Takes checkpoints of one kernel's namespace into ``directory``."""

    def __init__(self, shell, directory, max_bytes, protected):
        self.shell = shell
        self.directory = directory
        self.max_bytes = max_bytes
        self.protected = protected  # configured bindings: the install brings them back
        self.children = {}  # pid: (generation, execution count) of each child not reaped yet
        self.generation = 0  # of the latest checkpoint started
        self.newest = None  # a _Generation, made before the first fork
        self.pickler = None  # imported here, once: each child would import it again
        # name: (value, token) of each unchangeable value of the latest snapshot; holding the
        # value keeps its identity from passing to a new object (see `_plan`).
        self.same = {}
        self.nonce = os.urandom(8).hex()  # tokens of another kernel never match this one's
        self.tokens = 0

    def _plan(self, names):
        """``(name, value, token, same)`` for each of ``names``: ``same`` when the value is the
        unchangeable object the previous snapshot had under that name, with that snapshot's
        token; a new unchangeable value gets a new token; anything else none."""
        plan, same = [], {}
        for name, value in names:
            known = self.same.get(name)
            if known is not None and known[0] is value:
                same[name] = known
                plan.append((name, value, known[1], True))
            elif not isinstance(value, types.ModuleType) and _unchangeable(value):
                self.tokens += 1
                token = "%s-%d" % (self.nonce, self.tokens)
                same[name] = (value, token)
                plan.append((name, value, token, False))
            else:
                plan.append((name, value, None, False))
        self.same = same
        return plan

    @property
    def child(self):
        """The newest child not reaped yet, if any."""
        if not self.children:
            return None
        return max(self.children, key=lambda pid: self.children[pid][0])

    def wait(self):
        """Waits for every child, writing or waiting for its turn (before the session's
        checkpoint is deleted, or the helper uninstalled)."""
        self._reap(block=True)

    def _reap(self, block=False):
        """Reaps the children that exited (with ``block``, all of them). One ended by a signal
        other than a newer checkpoint's ``SIGTERM`` is recorded, when it was the newest (see
        `_failed`); a child that exits with an error has recorded why itself."""
        for pid in list(self.children):
            try:
                done, status = os.waitpid(pid, 0 if block else os.WNOHANG)
            except (ChildProcessError, OSError):
                self.children.pop(pid, None)
                continue
            if done == 0:
                continue
            generation, count = self.children.pop(pid)
            if (
                os.WIFSIGNALED(status)
                and os.WTERMSIG(status) != signal.SIGTERM
                and generation == self.generation
            ):
                _failed(self.directory, count, "the writer was ended by signal %d" % os.WTERMSIG(status))

    def after_execution(self, count=None):
        """Takes a checkpoint of the namespace as it is now: after a cell that is not silent
        (``count``, its execution count) or a namespace call (the latest cell's count). Never
        waits for an earlier checkpoint's writer.

        A namespace that pickles small (``_SMALL_BYTES``, no container past ``_SMALL_LEN``
        items) is written here and now when no writer has the turn, in well under a
        millisecond: a fork alone costs more. Anything larger, or a small one while a writer
        works, is written by a forked child, off the reply's path.
        """
        if count is None:
            # The shell counts the next cell already.
            following = getattr(self.shell, "execution_count", None)
            count = following - 1 if isinstance(following, int) else None
        self._reap()
        if self.newest is None:
            self.newest = _Generation()
        self.generation += 1
        generation = self.generation
        self.newest.set(generation)
        self._supersede(generation)
        if self.pickler is None:
            self.pickler = _pickler()
        names = self._plan(_user_names(self.shell, self.protected))
        # The streams stay as they are: swapping them would drop what other threads print.
        try:
            snapshot = _pickle_all(names, self.pickler, self.max_bytes, small=True)
        except _TooBig:
            self._fork(names, count, generation, None)
            return
        except Exception as error:
            _failed(self.directory, count, _reason(error))
            return
        turn = _try_turn(self.directory)
        if turn is None:
            # A writer has the turn: a child waits for it with these bytes.
            self._fork(names, count, generation, snapshot)
            return
        try:
            _commit(self.directory, count, self.pickler, snapshot)
        except Exception as error:
            _failed(self.directory, count, _reason(error))
        finally:
            os.close(turn)

    def _supersede(self, generation):
        """Ends every older child still waiting for its turn: it would find ``generation``
        newer than its own and write nothing anyway. One already writing ignores the signal
        and finishes."""
        for pid, (older, _) in self.children.items():
            if older < generation:
                try:
                    os.kill(pid, signal.SIGTERM)
                except OSError:
                    pass  # exited, not reaped yet

    def _fork(self, names, count, generation, snapshot):
        # The writers' shared lock, taken before the fork so that no moment exists when the
        # child waits or writes unseen: the child holds it through the descriptor it inherits,
        # until it exits, and `restore` waits for it.
        os.makedirs(self.directory, exist_ok=True)
        lock = os.open(os.path.join(self.directory, WRITER_LOCK), os.O_RDWR | os.O_CREAT, 0o600)
        pid = -1
        try:
            fcntl.flock(lock, fcntl.LOCK_SH)
            with warnings.catch_warnings():
                # Python 3.12+ warns of fork in a threaded process; see the module's documentation.
                warnings.simplefilter("ignore", DeprecationWarning)
                try:
                    pid = os.fork()
                except OSError:
                    pid = -1  # no process to spare (the sandbox's bound): none this time
            if pid == 0:
                self._write_in_child(names, count, generation, snapshot)
        finally:
            if pid != 0:
                os.close(lock)
        if pid > 0:
            # Out of the kernel's process group before the reply goes out, whether or not the
            # child has run yet: a kernel killed right after its reply has its group killed
            # (the server ends what a dead kernel left behind), and the writer must not be in
            # it. The child does the same first thing; whichever runs first wins.
            try:
                os.setpgid(pid, pid)
            except OSError:
                pass  # it has exited already
            self.children[pid] = (generation, count)

    def _write_in_child(self, names, count, generation, snapshot):
        status = 1
        try:
            # Out of the kernel's process group: a kernel killed between cells (its group with
            # it) does not take the checkpoint of its last cell along.
            os.setpgid(0, 0)
            # The kernel's streams publish through a thread the fork left behind: whatever a
            # pickling method prints goes nowhere instead. The user's own SIGALRM, SIGINT and
            # SIGTERM handlers must not keep the child alive; SIGTERM is how a newer
            # checkpoint ends this one while it waits for its turn.
            sys.stdout = sys.stderr = _NOWHERE
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            signal.signal(signal.SIGALRM, signal.SIG_DFL)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            turn = os.open(os.path.join(self.directory, TURN_LOCK), os.O_RDWR | os.O_CREAT, 0o600)
            fcntl.flock(turn, fcntl.LOCK_EX)  # held until the child exits
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            if self.newest.get() != generation:
                status = 0  # a newer checkpoint replaced this one: it writes, not this one
                return
            signal.alarm(_CHILD_SECONDS)
            if snapshot is None:
                snapshot = _pickle_all(names, self.pickler, self.max_bytes, small=False)
            _commit(self.directory, count, self.pickler, snapshot)
            status = 0
        except BaseException as error:
            try:
                _failed(self.directory, count, _reason(error))
            except BaseException:
                pass
        finally:
            os._exit(status)


def _try_turn(directory):
    """The writers' turn (``TURN_LOCK``) as a descriptor holding it, or None when a writer has
    it; never waits."""
    os.makedirs(directory, exist_ok=True)
    turn = os.open(os.path.join(directory, TURN_LOCK), os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o600)
    try:
        fcntl.flock(turn, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return turn
    except BlockingIOError:
        os.close(turn)
        return None
    except BaseException:
        os.close(turn)
        raise


class _TooBig(Exception):
    """The namespace does not pickle small: a child writes it."""


class _Nowhere:
    """A stream that drops what is written (no file descriptor to leak or inherit)."""

    def write(self, text):
        return len(text)

    def flush(self):
        pass


_NOWHERE = _Nowhere()


def write(directory, names, max_bytes, execution_count, pickler=None):
    """Writes a checkpoint of ``names`` (pairs) into ``directory`` and makes it current, with
    ``pickler`` (``(name, Pickler class)``; the best the kernel has by default)."""
    pickler = pickler or _pickler()
    plan = [(name, value, None, False) for name, value in names]
    snapshot = _pickle_all(plan, pickler, max_bytes, small=False)
    _commit(directory, execution_count, pickler, snapshot)


class _Unkept(Exception):
    """A value that cannot be kept; its message is the reason."""


class _Same:
    """An unchangeable value the previous snapshot had (see `Checkpointer._plan`): its stored
    blob is taken again when the current manifest holds it under ``token``."""

    def __init__(self, name, value, token):
        self.name, self.value, self.token = name, value, token


def _pickle_value(pickler, value, small):
    """``(data, raws, size, kind)``: ``value`` pickled, its out-of-band buffers (memoryviews
    of its own memory), the bytes of both, and ``bytes``/``bytearray`` for such a value pickled
    out of band. Raises `_Unkept` with the reason when it cannot be pickled."""
    kind = type(value).__name__ if type(value) in (bytes, bytearray) else None
    if kind is not None and len(value) < _OUT_OF_BAND_BYTES:
        kind = None
    buffers = []
    try:
        data = _dumps(pickler, pickle.PickleBuffer(value) if kind else value, buffers, small)
    except BaseException as error:
        if isinstance(error, (KeyboardInterrupt, SystemExit, _TooBig)):
            raise
        raise _Unkept(_reason(error))
    try:
        raws = [buffer.raw() for buffer in buffers]
    except BufferError as error:  # a buffer that is not contiguous
        raise _Unkept(_reason(error))
    return data, raws, len(data) + sum(raw.nbytes for raw in raws), kind


def _pickle_all(plan, pickler, max_bytes, small):
    """``(values, modules, lost)`` of ``plan`` (see `Checkpointer._plan`): each value pickled
    as ``(name, data, raws, size, kind, token)`` or, the same unchangeable one as before, a
    `_Same`; each module by name; each name that could not be kept with its reason. With
    ``small``, raises ``_TooBig`` past ``_SMALL_BYTES`` in all or a container past
    ``_SMALL_LEN`` items, and copies out-of-band buffers (the namespace goes on changing once
    the cell is answered)."""
    _, pickler = pickler
    values, modules, lost = [], {}, []
    total = 0
    for name, value, token, same in plan:
        if isinstance(value, types.ModuleType):
            modules[name] = value.__name__
            continue
        if same:
            values.append(_Same(name, value, token))
            continue
        if small and isinstance(value, _CONTAINERS) and len(value) > _SMALL_LEN:
            raise _TooBig
        try:
            data, raws, size, kind = _pickle_value(pickler, value, small)
        except _Unkept as error:
            lost.append({"name": name, "reason": str(error)})
            continue
        if small and total + size > _SMALL_BYTES:
            raise _TooBig
        if total + size > max_bytes:
            lost.append(
                {
                    "name": name,
                    "reason": "%d bytes pickled, past the checkpoint bound (%d bytes per session)"
                    % (size, max_bytes),
                }
            )
            continue
        if small:
            raws = [bytes(raw) for raw in raws]
        total += size
        values.append((name, data, raws, size, kind, token))
    return values, modules, lost


def _failed(directory, execution_count, reason):
    """Records why the checkpoint after ``execution_count`` was not taken (``FAILURE``, read
    by the server for ``runtime_status``); the previous one stays current."""
    os.makedirs(directory, exist_ok=True)
    temporary = os.path.join(directory, ".%s.%d" % (FAILURE, os.getpid()))
    with open(temporary, "w", encoding="utf-8") as file:
        json.dump({"execution_count": execution_count, "reason": reason}, file)
    os.replace(temporary, os.path.join(directory, FAILURE))


def _commit(directory, execution_count, pickler, snapshot):
    """Writes what changed of ``snapshot`` and makes its manifest current (clearing a
    recorded failure); ``pickler`` is ``(name, Pickler class)``. Called by whoever has the
    writers' turn, so the current manifest is the last checkpoint that finished."""
    values, modules, lost = snapshot
    lost = list(lost)
    store = _Store(directory)
    previous = _previous(directory)
    variables = {}
    reused = 0
    for item in values:
        if isinstance(item, _Same):
            entry = previous.get(item.name)
            if isinstance(entry, dict) and entry.get("token") == item.token and store.holds(entry):
                variables[item.name] = entry
                reused += 1
                continue
            # The checkpoint that stored it did not finish: pickled now (it cannot have changed).
            try:
                data, raws, size, kind = _pickle_value(pickler[1], item.value, small=False)
            except _Unkept as error:
                lost.append({"name": item.name, "reason": str(error)})
                continue
            item = (item.name, data, raws, size, kind, item.token)
        name = item[0]
        entry, wrote = store.value(item, previous.get(name))
        variables[name] = entry
        reused += not wrote
    manifest = {
        "format": _FORMAT,
        "execution_count": execution_count,
        "variables": variables,
        "modules": modules,
        "lost": lost,
        "bytes": sum(entry["bytes"] for entry in variables.values()),
        "pickler": pickler[0],
        "written": 0,
        "reused": reused,
        "tracking": _TRACKING,
    }
    text = json.dumps(manifest)  # the C encoder: json.dump streams through the Python one
    # What this checkpoint wrote, the manifest included (its own figure is a few digits off).
    manifest["written"] = store.written + len(text) + len(str(store.written + len(text)))
    temporary = os.path.join(directory, ".%s.%d" % (MANIFEST, os.getpid()))
    with open(temporary, "w", encoding="utf-8") as file:
        file.write(json.dumps(manifest))
    os.replace(temporary, os.path.join(directory, MANIFEST))
    try:
        os.remove(os.path.join(directory, FAILURE))
    except FileNotFoundError:
        pass
    store.collect(variables.values())


_PREVIOUS = [None, {}]  # the current manifest's stamp and variables, as last read


def _previous(directory):
    """The variables of the current manifest (the last checkpoint that finished); ``{}`` when
    there is none or it cannot be read. Read again only when it was replaced. Its hints are
    checked before use: a blob or chunk it names must be there, and a restore checks each
    against its name."""
    try:
        directory_fd = _open_directory(directory)
    except OSError:
        return {}
    try:
        with _open_regular(MANIFEST, directory_fd) as file:
            info = os.fstat(file.fileno())
            stamp = (directory, info.st_dev, info.st_ino, info.st_mtime_ns, info.st_size)
            if _PREVIOUS[0] == stamp:
                return _PREVIOUS[1]
            manifest = json.loads(file.read().decode("utf-8"))
    except Exception:
        return {}
    finally:
        os.close(directory_fd)
    variables = manifest.get("variables") if isinstance(manifest, dict) else None
    if not isinstance(variables, dict) or manifest.get("format") != _FORMAT:
        variables = {}
    _PREVIOUS[:] = [stamp, variables]
    return variables


def _is_name(name):
    return isinstance(name, str) and len(name) == 40 and set(name) <= _BLOB_NAME


def _chunked(entry):
    """A previous entry's chunked parts, ``{part: (length, chunk size, [(crc, name)])}``;
    ``{}`` for anything malformed."""
    try:
        return {
            int(part): (int(length), int(size), [(int(crc), str(name)) for crc, name in listing])
            for part, length, size, listing in entry.get("chunked", ())
        }
    except Exception:
        return {}


class _Store:
    """Writes blobs and chunks into a checkpoint directory, counting the bytes written."""

    def __init__(self, directory):
        self.objects = os.path.join(directory, OBJECTS)
        self.chunks = os.path.join(directory, CHUNKS)
        os.makedirs(self.objects, exist_ok=True)
        os.makedirs(self.chunks, exist_ok=True)
        self.written = 0

    def holds(self, entry):
        """Whether the blob of ``entry`` and all its chunks are here."""
        blob = entry.get("blob")
        if not _is_name(blob) or not os.path.exists(os.path.join(self.objects, blob)):
            return False
        return all(
            _is_name(name) and os.path.exists(os.path.join(self.chunks, name))
            for _, _, listing in _chunked(entry).values()
            for _, name in listing
        )

    def value(self, item, previous):
        """Stores one pickled value; ``(entry, whether anything was written)``. A chunk whose
        CRC-32 and place are those ``previous`` lists is taken again unhashed."""
        name, data, raws, size, kind, token = item
        known = _chunked(previous) if isinstance(previous, dict) else {}
        written = self.written
        table, names, inline, chunked = [], [], [], []
        for part, view in enumerate(memoryview(part) for part in [data, *raws]):
            length = view.nbytes
            if length < _CHUNKED_FROM:
                table.append(struct.pack("<QQ", length, 0))
                inline.append(view)
                continue
            table.append(struct.pack("<QQ", length, CHUNK_BYTES))
            before = known.get(part)
            if before is not None and before[:2] != (length, CHUNK_BYTES):
                before = None
            listing = []
            for number, start in enumerate(range(0, length, CHUNK_BYTES)):
                piece = view[start : start + CHUNK_BYTES]
                crc = zlib.crc32(piece)
                chunk = None
                if before is not None and number < len(before[2]):
                    old_crc, old_name = before[2][number]
                    if old_crc == crc and _is_name(old_name) and os.path.exists(os.path.join(self.chunks, old_name)):
                        chunk = old_name
                if chunk is None:
                    chunk = self._put(self.chunks, [piece])
                listing.append([crc, chunk])
                names.append(bytes.fromhex(chunk))
            chunked.append([part, length, CHUNK_BYTES, listing])
        header = MAGIC + struct.pack("<Q", len(table)) + b"".join(table) + b"".join(names)
        entry = {"blob": self._put(self.objects, [header] + inline), "bytes": size}
        if kind is not None:
            entry["kind"] = kind
        if token is not None:
            entry["token"] = token
        if chunked:
            entry["chunked"] = chunked
        return entry, self.written != written

    def _put(self, directory, parts):
        """Writes ``parts`` as one file named by their content's SHA-256 unless it is there
        already; returns its name."""
        # SHA-256: about twice as fast as BLAKE2 here (CPUs hash it in hardware), and the digest
        # is cut to 160 bits, still far from any collision.
        digest = hashlib.sha256()
        for part in parts:
            digest.update(part)
        name = digest.hexdigest()[:40]
        path = os.path.join(directory, name)
        if os.path.exists(path):
            return name
        temporary = os.path.join(directory, ".%s.%d" % (name, os.getpid()))
        with open(temporary, "wb") as file:
            for part in parts:
                file.write(part)
        os.replace(temporary, path)
        self.written += sum(memoryview(part).nbytes for part in parts)
        return name

    def collect(self, entries):
        """Deletes every blob and chunk no entry of the new manifest names."""
        blobs, chunks = set(), set()
        for entry in entries:
            blobs.add(entry["blob"])
            for _, _, listing in _chunked(entry).values():
                chunks.update(name for _, name in listing)
        for directory, kept in ((self.objects, blobs), (self.chunks, chunks)):
            for name in os.listdir(directory):
                if name not in kept:
                    try:
                        os.remove(os.path.join(directory, name))
                    except OSError:
                        pass


def _open_regular(name, dir_fd):
    """A read-only file object for the regular file ``name`` in the directory ``dir_fd``: a
    symbolic link is not followed, a FIFO or a device is not waited on (``O_NONBLOCK``) and is
    refused once ``fstat`` shows what it is. The kernel can write the checkpoint directory, so
    nothing in it is taken for what its name says."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(name, flags, dir_fd=dir_fd)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError("%s is not a regular file" % name)
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _open_directory(name, dir_fd=None):
    """The directory ``name`` (in ``dir_fd``, not through a link when there is one) as a
    descriptor."""
    flags = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0)
    if dir_fd is not None:
        flags |= os.O_NOFOLLOW
    return os.open(name, flags, dir_fd=dir_fd)


# A blob's or chunk's name: the first 40 hexadecimal digits of its content's SHA-256.
_BLOB_NAME = frozenset("0123456789abcdef")


def _load(blob, objects_fd, chunks, kind=None):
    """The value in blob ``blob`` of the objects directory ``objects_fd``; ``chunks()`` gives
    the chunks directory's descriptor. Each part is read into memory of its own, so an array or
    bytearray rebuilt on it takes it over without a copy (and stays writable).

    The value is unpickled only once the blob hashes to its name, its content address, and
    every chunk it names to its own: a blob or chunk rewritten in place (by the kernel's code,
    before a restore) is refused, never run."""
    if not _is_name(blob):
        raise ValueError("%r is not a checkpoint blob's name" % (blob,))
    try:
        table, names, parts, digest = _read_blob(blob, objects_fd)
    except ValueError:
        # A blob this module wrote always reads: one that does not was changed since, which
        # its content address says most plainly.
        if _file_digest(blob, objects_fd) != blob:
            raise ValueError(_CHANGED % ("blob", blob)) from None
        raise
    if digest.hexdigest()[:40] != blob:
        raise ValueError(_CHANGED % ("blob", blob))
    offset = 0
    for index, (length, chunk) in enumerate(table):
        if not chunk:
            continue
        part = parts[index] = bytearray(length)
        view = memoryview(part)
        for start in range(0, length, chunk):
            _read_chunk(names[offset : offset + 20].hex(), chunks(), view[start : start + chunk])
            offset += 20
    value = pickle.loads(parts[0], buffers=parts[1:])
    if kind == "bytearray":
        return value if isinstance(value, bytearray) else bytearray(value)
    if kind == "bytes":
        return bytes(value)
    return value


_CHANGED = "%s %s does not match its content address (changed since it was written); not loaded"


def _file_digest(blob, objects_fd):
    """The first 40 hexadecimal digits of the SHA-256 of blob ``blob``'s whole file."""
    digest = hashlib.sha256()
    with _open_regular(blob, objects_fd) as file:
        for part in iter(lambda: file.read(1 << 20), b""):
            digest.update(part)
    return digest.hexdigest()[:40]


def _read_blob(blob, objects_fd):
    """Blob ``blob``'s part table, chunk names and in-line parts, with the digest of what was
    read; a ``ValueError`` when it does not read as a blob."""
    digest = hashlib.sha256()
    with _open_regular(blob, objects_fd) as file:
        size = os.fstat(file.fileno()).st_size

        def read(count):
            part = file.read(count)
            if len(part) != count:
                raise ValueError("blob %s is cut short" % blob)
            digest.update(part)
            return part

        if read(len(MAGIC)) != MAGIC:
            raise ValueError("not a checkpoint blob")
        (count,) = struct.unpack("<Q", read(8))
        if count < 1 or 16 * count > size:
            raise ValueError("blob %s is cut short" % blob)
        table = struct.unpack("<%dQ" % (2 * count), read(16 * count))
        table = list(zip(table[0::2], table[1::2]))
        chunk_count = sum(-(-length // chunk) for length, chunk in table if chunk)
        if 20 * chunk_count > size:
            raise ValueError("blob %s is cut short" % blob)
        names = read(20 * chunk_count)
        header = len(MAGIC) + 8 + 16 * count + 20 * chunk_count
        if header + sum(length for length, chunk in table if not chunk) != size:
            raise ValueError("blob %s does not have the size its header says" % blob)
        parts = []
        for length, chunk in table:
            part = bytearray(length) if not chunk else None
            if part is not None:
                if file.readinto(part) != length:
                    raise ValueError("blob %s is cut short" % blob)
                digest.update(part)
            parts.append(part)
    return table, names, parts, digest


def _read_chunk(name, chunks_fd, view):
    """Reads chunk ``name`` into ``view``, which it must fill exactly; refused unless its
    content hashes to its name."""
    with _open_regular(name, chunks_fd) as file:
        if os.fstat(file.fileno()).st_size != view.nbytes:
            raise ValueError("chunk %s does not have the size its blob says" % name)
        done = 0
        while done < view.nbytes:
            count = file.readinto(view[done:])
            if not count:
                raise ValueError("chunk %s is cut short" % name)
            done += count
    if hashlib.sha256(view).hexdigest()[:40] != name:
        raise ValueError(_CHANGED % ("chunk", name))


def restore(shell, directory):
    """Loads the current checkpoint of ``directory`` into ``shell.user_ns``.

    Returns ``{"execution_count", "restored": [names], "lost": [{"name", "reason"}]}``; None
    when there is no checkpoint. Names the checkpoint could not keep are lost too.
    """
    _wait_for_writer(directory)
    try:
        directory_fd = _open_directory(directory)
    except FileNotFoundError:
        return None
    try:
        return _restore(shell, directory_fd)
    finally:
        os.close(directory_fd)


def _restore(shell, directory_fd):
    try:
        with _open_regular(MANIFEST, directory_fd) as file:
            manifest = json.loads(file.read().decode("utf-8"))
    except FileNotFoundError:
        return None
    if manifest.get("format") != _FORMAT:
        return None
    if manifest.get("pickler") == "cloudpickle":
        try:
            import cloudpickle  # noqa: F401  (its reducers must be importable to load)
        except Exception:
            pass
    restored, lost = [], list(manifest.get("lost", []))
    import importlib

    for name, module in sorted(manifest.get("modules", {}).items()):
        try:
            shell.user_ns[name] = sys.modules.get(module) or importlib.import_module(module)
            restored.append(name)
        except BaseException as error:
            if isinstance(error, (KeyboardInterrupt, SystemExit)):
                raise
            lost.append({"name": name, "reason": _reason(error)})
    variables = sorted(manifest.get("variables", {}).items())
    try:
        objects_fd = _open_directory(OBJECTS, directory_fd) if variables else None
    except OSError as error:
        objects_fd = None
        lost.extend({"name": name, "reason": _reason(error)} for name, _ in variables)
        variables = []
    chunks_fd = []

    def chunks():
        if not chunks_fd:
            chunks_fd.append(_open_directory(CHUNKS, directory_fd))
        return chunks_fd[0]

    try:
        for name, entry in variables:
            try:
                shell.user_ns[name] = _load(entry["blob"], objects_fd, chunks, entry.get("kind"))
                restored.append(name)
            except BaseException as error:
                if isinstance(error, (KeyboardInterrupt, SystemExit)):
                    raise
                lost.append({"name": name, "reason": _reason(error)})
    finally:
        for fd in chunks_fd + ([objects_fd] if objects_fd is not None else []):
            os.close(fd)
    restored.sort()
    lost.sort(key=lambda item: item["name"])
    return {
        "execution_count": manifest.get("execution_count"),
        "restored": restored,
        "lost": lost,
    }


def _wait_for_writer(directory):
    """Waits until no child writes a checkpoint into ``directory``: one that outlived its
    kernel finishes (or is ended by its alarm) before the checkpoint is read."""
    try:
        lock = os.open(os.path.join(directory, WRITER_LOCK), os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return  # no child ever wrote here (or something that is not its lock is there)
    try:
        if not stat.S_ISREG(os.fstat(lock).st_mode):
            return
        deadline = time.monotonic() + _CHILD_SECONDS
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if time.monotonic() > deadline:
                    return
                time.sleep(0.01)
    finally:
        os.close(lock)


def _method_discard(params):
    """Deletes the session's checkpoint (a remote kernel's, when its session closes): once no
    child writes it, the directory goes."""
    checked_params(params, ())
    checkpointer = current().checkpointer
    if checkpointer is None:
        return None
    checkpointer.wait()
    _wait_for_writer(checkpointer.directory)
    import shutil

    shutil.rmtree(checkpointer.directory, ignore_errors=True)
    return None


def _method_restore(params):
    """Loads the session's checkpoint into the namespace (a replacement kernel, first thing)."""
    checked_params(params, ())
    installation = current()
    checkpointer = installation.checkpointer
    if checkpointer is None:
        return None  # none taken here (off, or this machine cannot): nothing comes back
    return restore(installation.shell, checkpointer.directory)


METHODS["restore"] = _method_restore
METHODS["discard_checkpoint"] = _method_discard
