"""One writer per model_dir: the trainer that writes checkpoints and deltas holds a lease.

The lease is an exclusive flock(2) on MODEL_DIR/.tfps-lease, held by an open descriptor for the
life of the process: the kernel releases it when the holder exits, however it exits (kill -9
included), so a dead holder never blocks a resume and the launcher's restarts take it over at
once. The file holds who took it (host, pid, start time, role), for the refusal message of a
second trainer. flock works across processes of one host and, on Linux, over NFSv4 (where the
client maps it to a byte-range lock); on a filesystem without locks the lease cannot be taken
and says so.
"""
import contextlib
import errno
import fcntl
import json
import os
import socket
import time

LEASE_FILE = ".tfps-lease"


class LeaseHeld(RuntimeError):
    """Another live process holds the model_dir's lease (message: who)."""


class Lease:
    """The lease of model_dir, taken on construction; `release()` (or the process's exit) gives it up."""

    def __init__(self, model_dir, role="trainer"):
        self.path = os.path.join(model_dir, LEASE_FILE)
        self._created = not os.path.exists(self.path)   # a run refused on a model_dir leaves no lease file
        os.makedirs(model_dir, exist_ok=True)
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as e:
                os.close(fd)
                if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    raise LeaseHeld(f"model_dir {model_dir} is being written by {_holder(self.path)}: one trainer "
                                    f"per model_dir (stop it, or train into another model_dir)") from None
                raise LeaseHeld(f"cannot lock {self.path} ({e.strerror}): the model_dir's filesystem has no locks, "
                                f"so tfps cannot make sure it is the only writer") from None
            try:   # the file locked is still the one at the path (a holder that removed it did so locked)
                if os.fstat(fd).st_ino == os.stat(self.path).st_ino:
                    break
            except FileNotFoundError:
                pass
            os.close(fd)
        self._fd = fd
        self.holder = {"host": socket.gethostname(), "pid": os.getpid(), "started": round(time.time(), 3),
                       "role": role}
        self._previous = os.pread(fd, 1 << 16, 0)
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(self.holder) + "\n").encode(), 0)

    def release(self):
        if self._fd is not None:
            os.close(self._fd)   # releases the flock
            self._fd = None

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is not None and self._fd is not None:   # a refused or failed run: the file as it was
            with contextlib.suppress(OSError):
                if self._created:   # removed while locked: a taker that opened it meanwhile retries
                    os.remove(self.path)
                else:
                    os.ftruncate(self._fd, 0)
                    os.pwrite(self._fd, self._previous, 0)
        self.release()


def _holder(path):
    try:
        with open(path) as f:
            h = json.loads(f.read() or "{}")
        started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(h["started"]))
        return f"{h.get('role', 'a trainer')} pid {h['pid']} on {h['host']} (since {started})"
    except (OSError, ValueError, KeyError, TypeError):
        return "another process (its lease file names no holder)"


def check_free(model_dir):
    """LeaseHeld when a live process holds model_dir's lease, as Lease would say; creates, writes
    and locks nothing (a command that must refuse before it touches model_dir asks first: `tfps
    launch`, whose chief takes the lease itself)."""
    path = os.path.join(model_dir, LEASE_FILE)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return   # no lease file (or none readable): nobody has held it
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            raise LeaseHeld(f"model_dir {model_dir} is being written by {_holder(path)}: one trainer per "
                            f"model_dir (stop it, or train into another model_dir)") from None
    finally:
        os.close(fd)
