"""The version directories of an export base path, as TF Serving reads them: `BASE/<int>/`, the
newest served. An export is a new newest version there, or a refusal that says why.

An export is written aside, in `BASE/.tfps-export-<version>/` (a name no server takes for a
version), then renamed to `BASE/<version>/` whole. The version is reserved under an exclusive
lock (flock) of the directory BASE itself, so that exports running at once never pick the same
one:

- by default the export's time in seconds, or one above the highest version there (finished, or
  reserved by an export still running) when that is at or past it (exports in the same second);
- a highest version more than a day ahead of the clock is refused, naming it: it is no
  timestamp, and an export numbered below it would never be served. `version=N` names one
  instead, which must be above every version there.

Each aside directory holds a `.lock` its export keeps locked (flock) while it runs: an aside
whose lock is free belongs to an export that died (kill -9), and the next export removes it.
"""
import contextlib
import fcntl
import os
import re
import shutil
import time

_ASIDE = ".tfps-export-"
_ASIDE_NAME = re.compile(re.escape(_ASIDE) + r"(\d+)$")
_AHEAD_SECS = 86400
_MAX_VERSION = 2**63 - 1


class ExportRefused(ValueError):
    """An export that would not be the newest version of its base path, or whose base path is
    not a directory: nothing was written."""


def versions(base):
    """{version: directory name} of the versions under `base`: directories named by an int64 in
    ASCII digits (leading zeros and all, as TF Serving reads them)."""
    out = {}
    for entry in os.scandir(base):
        if entry.name.isascii() and entry.name.isdigit() and int(entry.name) <= _MAX_VERSION and entry.is_dir():
            out[int(entry.name)] = entry.name
    return out


class Slot:
    """An export's place in a base path while it runs: `path`, where to write its SavedModel;
    `reserved`, the version it holds while it runs; `version`, its version once it is published
    (new_version)."""

    def __init__(self, path, reserved):
        self.path, self.reserved, self.version = path, reserved, None


@contextlib.contextmanager
def new_version(base, version=None, now=None):
    """Reserves the next version of export base path `base` (see the module docstring) and yields
    a Slot whose `path` the SavedModel is written at. On a clean exit the SavedModel is renamed
    into `base/<version>/` and `slot.version` set: the reserved version, or -- when an export that
    started later finished first with a higher one -- one above it, so that the version is the
    newest when it appears (with version=N given, ExportRefused instead). On an error nothing is
    left. Removes the aside directories of exports that are no longer running. ExportRefused
    when `base` cannot be written, or the version would not be the newest."""
    if version is not None and not 0 <= version <= _MAX_VERSION:
        raise ExportRefused(f"export: --version must be in [0, 2^63), got {version}")
    if os.path.exists(base) and not os.path.isdir(base):
        raise ExportRefused(f"export: {base!r} is not a directory (a file is there): choose another --export-dir")
    made = _missing(base)   # the directories this export makes: removed again (if empty) when it fails
    try:
        with _reserved(base, version, now) as slot:
            yield slot
    except BaseException:
        for path in made:   # deepest first; one another export has put something in stays
            try:
                os.rmdir(path)
            except OSError:
                break
        raise


def _missing(path):
    """The directories of `path` that are not there, deepest first."""
    out = []
    path = os.path.abspath(path)
    while path and not os.path.exists(path):
        out.append(path)
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return out


@contextlib.contextmanager
def _reserved(base, version, now):
    """new_version's work on a base path that is there."""
    with _locked(base):
        remove_abandoned(base)
        chosen = _choose(base, version, int(time.time() if now is None else now))
        aside = os.path.join(base, f"{_ASIDE}{chosen}")
        try:
            os.mkdir(aside)
        except OSError as e:
            raise ExportRefused(f"export: cannot write in {base!r}: {e.strerror}: nothing exported") from None
        held = open(os.path.join(aside, ".lock"), "w")   # locked while this export runs
        fcntl.flock(held, fcntl.LOCK_EX)
    slot = Slot(os.path.join(aside, "saved_model"), chosen)
    try:
        yield slot
        with _locked(base):   # published one at a time: each is the newest when it appears
            done = versions(base)
            final = chosen if not done or max(done) < chosen else max(done) + 1
            if final != chosen and version is not None:
                raise ExportRefused(f"export: version {max(done)} appeared in {base} while this export of --version "
                                    f"{version} ran: a server would keep serving {max(done)}; nothing exported")
            try:
                os.rename(slot.path, os.path.join(base, str(final)))
            except OSError as e:   # a version made meanwhile by something other than a tfps export
                raise ExportRefused(f"export: cannot move version {final} into {base}: {e}; nothing exported") from None
        slot.version = final
    finally:
        shutil.rmtree(aside, ignore_errors=True)
        held.close()


@contextlib.contextmanager
def _locked(base):
    """The base path, made if need be, under an exclusive flock of its directory."""
    try:
        os.makedirs(base, exist_ok=True)
        lock = os.open(base, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as e:   # a file on the path, no permission, a read-only file system
        raise ExportRefused(f"export: cannot make or open {base!r}: {e.strerror}: choose another --export-dir") from None
    try:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)
        except OSError as e:   # a file system without flock
            raise ExportRefused(f"export: cannot lock {base!r} ({e.strerror}): exports into it could collide; "
                                f"choose a local --export-dir") from None
        yield
    finally:
        os.close(lock)   # (and its flock)


def _choose(base, version, now):
    taken = versions(base)
    taken.update({int(m.group(1)): m.group(0) for m in map(_ASIDE_NAME.match, os.listdir(base))
                  if m and int(m.group(1)) not in taken})
    highest = max(taken, default=None)
    where = os.path.join(base, taken[highest]) if highest is not None else None
    if version is not None:
        if highest is not None and version <= highest:
            raise ExportRefused(f"export: {base} already holds version {highest} ({where}), at or above --version "
                                f"{version}: a server would keep serving {highest}; name a version above it")
        return version
    if highest is not None and highest > now + _AHEAD_SECS:
        raise ExportRefused(
            f"export: {base} holds version {highest}, more than a day ahead of this export's timestamp {now}: "
            f"an export below it would never be served (a server serves the highest); remove "
            f"{where}, or name a version above it with --version")
    return max(now, highest + 1) if highest is not None else now


def remove_abandoned(base):
    """Removes `base`'s aside directories of exports that are no longer running (their lock is
    free); call under the base path's lock. Returns the paths removed."""
    removed = []
    for name in os.listdir(base):
        if not name.startswith(_ASIDE):
            continue
        path = os.path.join(base, name)
        try:
            with open(os.path.join(path, ".lock"), "r") as held:
                fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            continue   # its export is running
        except OSError:
            pass       # no lock: its export died before it took one (under the base path's lock)
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed
