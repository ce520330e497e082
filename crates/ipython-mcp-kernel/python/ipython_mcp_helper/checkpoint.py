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

Layout of the checkpoint directory:

* ``manifest.json``: ``{"format", "execution_count", "variables": {name: {"blob", "bytes"}},
  "modules": {name: module}, "lost": [{"name", "reason"}], "bytes", "pickler"}``, replaced
  atomically;
* ``objects/<sha256>``: one pickled value each, content-addressed, so a value that did not
  change is not written again. A blob is ``MAGIC``, the count of out-of-band buffers (pickle
  protocol 5: a numpy array's memory is written as it is, never copied into the pickle), the
  pickle's length and each buffer's length (8 bytes each, little-endian), then the pickle and
  the buffers.

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
MAGIC = b"IPMCKPT1"
_FORMAT = 1
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
        names = list(_user_names(self.shell, self.protected))
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
            _commit(self.directory, count, self.pickler[0], snapshot)
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
            _commit(self.directory, count, self.pickler[0], snapshot)
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
    snapshot = _pickle_all(names, pickler, max_bytes, small=False)
    _commit(directory, execution_count, pickler[0], snapshot)


def _pickle_all(names, pickler, max_bytes, small):
    """``(values, modules, lost)``: each value pickled as ``(name, data, raws, size)``, each
    module by name, each name that could not be kept with its reason. With ``small``, raises
    ``_TooBig`` past ``_SMALL_BYTES`` in all or a container past ``_SMALL_LEN`` items, and
    copies out-of-band buffers (the namespace goes on changing once the cell is answered)."""
    _, pickler = pickler
    values, modules, lost = [], {}, []
    total = 0
    for name, value in names:
        if isinstance(value, types.ModuleType):
            modules[name] = value.__name__
            continue
        if small and isinstance(value, _CONTAINERS) and len(value) > _SMALL_LEN:
            raise _TooBig
        kind = type(value).__name__ if type(value) in (bytes, bytearray) else None
        if kind is not None and len(value) < _OUT_OF_BAND_BYTES:
            kind = None
        buffers = []
        try:
            data = _dumps(pickler, pickle.PickleBuffer(value) if kind else value, buffers, small)
        except BaseException as error:
            if isinstance(error, (KeyboardInterrupt, SystemExit, _TooBig)):
                raise
            lost.append({"name": name, "reason": _reason(error)})
            continue
        try:
            raws = [buffer.raw() for buffer in buffers]
        except BufferError as error:  # a buffer that is not contiguous
            lost.append({"name": name, "reason": _reason(error)})
            continue
        size = len(data) + sum(raw.nbytes for raw in raws)
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
        values.append((name, data, raws, size, kind))
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
    recorded failure)."""
    values, modules, lost = snapshot
    objects = os.path.join(directory, OBJECTS)
    os.makedirs(objects, exist_ok=True)
    variables = {}
    for name, data, raws, size, kind in values:
        variables[name] = {"blob": _store(objects, data, raws), "bytes": size}
        if kind is not None:
            variables[name]["kind"] = kind
    manifest = {
        "format": _FORMAT,
        "execution_count": execution_count,
        "variables": variables,
        "modules": modules,
        "lost": lost,
        "bytes": sum(entry["bytes"] for entry in variables.values()),
        "pickler": pickler,
    }
    temporary = os.path.join(directory, ".%s.%d" % (MANIFEST, os.getpid()))
    with open(temporary, "w", encoding="utf-8") as file:
        file.write(json.dumps(manifest))  # the C encoder: json.dump streams through the Python one
    os.replace(temporary, os.path.join(directory, MANIFEST))
    try:
        os.remove(os.path.join(directory, FAILURE))
    except FileNotFoundError:
        pass
    kept = {entry["blob"] for entry in variables.values()}
    for entry in os.listdir(objects):
        if entry not in kept:
            try:
                os.remove(os.path.join(objects, entry))
            except OSError:
                pass


def _store(objects, data, raws):
    """Writes one value's blob unless it is there already; returns its name."""
    header = MAGIC + struct.pack("<QQ", len(raws), len(data))
    header += b"".join(struct.pack("<Q", raw.nbytes) for raw in raws)
    # SHA-256: about twice as fast as BLAKE2 here (CPUs hash it in hardware), and the digest
    # is cut to 160 bits, still far from any collision.
    digest = hashlib.sha256()
    for part in (header, data, *raws):
        digest.update(part)
    blob = digest.hexdigest()[:40]
    path = os.path.join(objects, blob)
    if os.path.exists(path):
        return blob
    temporary = os.path.join(objects, ".%s.%d" % (blob, os.getpid()))
    with open(temporary, "wb") as file:
        for part in (header, data, *raws):
            file.write(part)
    os.replace(temporary, path)
    return blob


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


# A blob's name: the first 40 hexadecimal digits of its content's SHA-256 (see `_store`).
_BLOB_NAME = frozenset("0123456789abcdef")


def _load(blob, objects_fd, kind=None):
    """The value in blob ``blob`` of the objects directory ``objects_fd``; each out-of-band
    buffer is read into memory of its own, so an array or bytearray rebuilt on it takes it
    over without a copy (and stays writable).

    The blob is unpickled only once its content hashes to its name, its content address: a
    blob rewritten in place (by the kernel's code, before a restore) is refused, never run."""
    if len(blob) != 40 or not set(blob) <= _BLOB_NAME:
        raise ValueError("%r is not a checkpoint blob's name" % (blob,))
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
        count, length = struct.unpack("<QQ", read(16))
        if 8 * count > size:
            raise ValueError("blob %s is cut short" % blob)
        sizes = struct.unpack("<%dQ" % count, read(8 * count))
        if len(MAGIC) + 16 + 8 * count + length + sum(sizes) != size:
            raise ValueError("blob %s does not have the size its header says" % blob)
        data = read(length)
        buffers = []
        for buffer_size in sizes:
            buffer = bytearray(buffer_size)
            if file.readinto(buffer) != buffer_size:
                raise ValueError("blob %s is cut short" % blob)
            digest.update(buffer)
            buffers.append(buffer)
    if digest.hexdigest()[:40] != blob:
        raise ValueError("blob %s does not match its content address (changed since it was written); not loaded" % blob)
    value = pickle.loads(data, buffers=buffers)
    if kind == "bytearray":
        return value if isinstance(value, bytearray) else bytearray(value)
    if kind == "bytes":
        return bytes(value)
    return value


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
    try:
        for name, entry in variables:
            try:
                shell.user_ns[name] = _load(entry["blob"], objects_fd, entry.get("kind"))
                restored.append(name)
            except BaseException as error:
                if isinstance(error, (KeyboardInterrupt, SystemExit)):
                    raise
                lost.append({"name": name, "reason": _reason(error)})
    finally:
        if objects_fd is not None:
            os.close(objects_fd)
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
