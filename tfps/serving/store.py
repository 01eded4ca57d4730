"""The versions of one served model: found under the base path, loaded and warmed off to the side,
swapped in; and, with a followed model_dir, the trainer's table deltas applied in place."""
import contextlib
import gc
import os
import threading
import time
import weakref

from tfps.serving.errors import ServingError, error_line
from tfps.serving.follower import TableFollower
from tfps.serving.servable import Servable


def version_dirs(base_path):
    """{version: path} of the SavedModels under base_path: directories named by an int64 in ASCII
    digits (others are not versions) holding a saved_model.pb."""
    out = {}
    try:
        entries = list(os.scandir(base_path))
    except OSError:
        return out
    for entry in entries:
        name = entry.name
        if name.isascii() and name.isdigit() and int(name) < 2**63 and \
                os.path.isfile(os.path.join(entry.path, "saved_model.pb")):
            out[int(name)] = entry.path
    return out


def _fingerprint(path):
    """What a version directory holds (names, sizes, mtimes): a failed load is retried when it changes."""
    out = []
    for root, _, files in os.walk(path):
        for name in sorted(files):
            try:
                st = os.stat(os.path.join(root, name))
            except OSError:
                continue
            out.append((os.path.relpath(os.path.join(root, name), path), st.st_size, st.st_mtime_ns))
    return tuple(sorted(out))


class ModelStore:
    """The loaded versions of model `name` (the newest `keep` of base_path).

    poll() loads a version newer than those served: loaded, brought up to date with the
    followed model_dir, warmed, and only then swapped in; the version it replaces is retired and
    closes once its requests in flight are done. A version that fails to load is reported
    once and skipped; the served ones stay."""

    def __init__(self, name, base_path, keep=1, follow=None, threads=0, printer=print):
        if keep < 1:
            raise ValueError(f"num_versions must be >= 1, got {keep}")
        self.name, self.base_path, self.keep, self._threads = name, base_path, keep, threads
        self._print = printer
        self._lock = threading.Lock()
        self._versions = {}          # version -> Servable
        self._failed = {}            # version -> the error that kept it from loading
        self._unloading = []         # [weak reference, collected since it closed] of retired versions not yet freed
        self.follower = TableFollower(follow, printer) if follow else None
        self.swaps = 0
        self._version_polls = self._table_polls = 0

    # -- requests ---------------------------------------------------------------------------------
    def check_name(self, name):
        """NOT_FOUND unless `name` is the served model's."""
        if name != self.name:
            raise ServingError("NOT_FOUND", f"model {name!r} not found; this server serves {self.name!r}")

    @contextlib.contextmanager
    def use(self, name, version=None):
        """The Servable for a request (the newest, or `version`), held while the request runs."""
        self.check_name(name)
        for _ in range(3):   # a version retired between the look-up and acquire: look again
            with self._lock:
                if not self._versions:
                    raise ServingError("UNAVAILABLE", f"model {name!r} has no loaded version yet (base path "
                                       f"{self.base_path})")
                if version is None:
                    servable = self._versions[max(self._versions)]
                elif int(version) in self._versions:
                    servable = self._versions[int(version)]
                else:
                    raise ServingError("NOT_FOUND", f"model {name!r} version {version} is not loaded; loaded: "
                                       f"{sorted(self._versions)}")
            if servable.acquire():
                break
        else:
            raise ServingError("UNAVAILABLE", f"model {name!r}: its versions kept changing; retry")
        try:
            yield servable
        finally:
            servable.release()

    def status(self, version=None):
        """[(version, state, error message)] as GetModelStatus reports them."""
        with self._lock:
            rows = [(v, "AVAILABLE", "") for v in sorted(self._versions)]
            rows += [(v, "END", f"failed to load: {e}") for v, (e, _) in sorted(self._failed.items())]
        if not rows:
            raise ServingError("NOT_FOUND", f"model {self.name!r} has no version yet (base path {self.base_path})")
        if version is not None:
            rows = [r for r in rows if r[0] == int(version)]
            if not rows:
                raise ServingError("NOT_FOUND", f"model {self.name!r} version {version} is not known")
        return rows

    def loaded(self):
        with self._lock:
            return dict(self._versions)

    # -- background work ----------------------------------------------------------------------------
    def poll(self):
        """poll_versions(), then poll_tables(). Returns the versions swapped in."""
        added = self.poll_versions()
        self.poll_tables()
        return added

    @property
    def polls(self):
        """Full passes of both loops (tests wait on it)."""
        return min(self._version_polls, self._table_polls)

    def poll_versions(self):
        """Serves the newest `keep` loadable versions of base_path: loads those not loaded, then
        retires the loaded ones that are no longer among them (a newer one arrived, or their
        directory was removed: a rollback) -- but never the last one while nothing replaces it.
        A failed load is retried once its directory changes. Brings the served tables up to date
        with the followed model_dir. Returns the versions swapped in."""
        found = version_dirs(self.base_path)
        with self._lock:   # status() reads _failed from request threads
            for version in [v for v in self._failed if v not in found]:
                del self._failed[version]
        loadable = [v for v in sorted(found) if v not in self._failed or
                    self._failed[v][1] != _fingerprint(found[v])]
        wanted = loadable[-self.keep:]
        added = []
        for version in wanted:
            if version in self._versions:
                continue
            try:
                servable = Servable(found[version], version, threads=self._threads)
                try:
                    if self.follower:   # what cannot be applied is reported; the version still loads
                        self.follower.catch_up(servable, live=False)
                    servable.warm_up()
                except Exception:
                    servable.retire()
                    raise
            except Exception as e:   # noqa: BLE001  (any failure: report it, keep the served versions)
                message = error_line(e)
                with self._lock:
                    self._failed[version] = (message, _fingerprint(found[version]))
                self._print(f"tfps serve: version {version} of {self.name!r} at {found[version]} failed to load: "
                            f"{message}; serving {sorted(self._versions) or 'nothing'} (retried when its directory "
                            f"changes)", flush=True)
                continue
            with self._lock:
                self._failed.pop(version, None)
                self._versions[version] = servable
                self.swaps += 1
            added.append(version)
            state = servable.state()
            self._print(f"tfps serve: {self.name!r} version {version} loaded" + (
                f" (model fingerprint {state['fingerprint']}, state at step {state['step']})" if state else
                " (no tfps_manifest.json: exported by a tfps before state manifests)"), flush=True)
        with self._lock:
            # the newest `keep` of the loaded versions still on disk (a new one that failed to
            # load retires nothing); none on disk: keep serving what is loaded
            keep = set([v for v in sorted(self._versions) if v in found][-self.keep:])
            retired = [self._versions.pop(v) for v in sorted(self._versions) if v not in keep] if keep else []
        self._retire(retired, found)
        del retired   # (the frame's references too: what is retired may be freed now)
        self._free_unloaded()
        self._version_polls += 1
        return added

    def _retire(self, retired, found):
        for old in retired:
            old.retire()
            self._unloading.append([weakref.ref(old), False])
            if self.follower:
                self.follower.forget(old)
            gone = "its directory is gone" if old.version not in found else "a newer version is served"
            self._print(f"tfps serve: {self.name!r} version {old.version} unloaded ({gone}); serving "
                        f"{sorted(self.loaded())}", flush=True)

    def _free_unloaded(self):
        """Gives back the memory of retired versions whose last request is done. A graph and its
        session are freed by Python's cycle collector, which on its own runs at allocation counts,
        not at unloads: a server swapping versions would hold several dead models at a time."""
        # A retired version goes by its reference count, its graph only by a collection: one
        # collection once it has closed, and one more if it was still held then (a request thread
        # ending) once it is gone. At most two per version, whatever holds it.
        collect, kept = False, []
        for entry in self._unloading:
            servable = entry[0]()
            if servable is None:
                collect = True
                continue
            if servable.closed and not entry[1]:
                collect = entry[1] = True
            kept.append(entry)
        servable = None
        self._unloading = kept
        if collect:
            gc.collect()

    def poll_tables(self):
        """Brings the loaded versions' tables up to date with the followed model_dir."""
        if self.follower:
            for servable in self.loaded().values():
                if servable.acquire():
                    try:
                        self.follower.catch_up(servable)
                    finally:
                        servable.release()
                        if servable.retired:   # retired meanwhile: its ops must not outlive it
                            self.follower.forget(servable)
        self._table_polls += 1

    def close(self):
        with self._lock:
            versions, self._versions = list(self._versions.values()), {}
        for servable in versions:
            servable.retire()

    def poll_forever(self, every_secs, stop):
        """Two loops until `stop` (a threading.Event) is set, each every `every_secs`: versions
        (load, warm, swap) on a thread of its own, so that loading a version never holds back the
        served tables' deltas (the calling thread). Errors are reported and the loops go on."""
        def loop(step, what):
            while not stop.is_set():
                started = time.monotonic()
                try:
                    step()
                except Exception as e:   # noqa: BLE001
                    self._print(f"tfps serve: {what} of {self.base_path} failed: {error_line(e)}", flush=True)
                stop.wait(max(0.0, every_secs - (time.monotonic() - started)))
        versions = threading.Thread(target=loop, args=(self.poll_versions, "version poll"),
                                    name="tfps-serve-versions", daemon=True)
        versions.start()
        loop(self.poll_tables, "table poll")
        versions.join()
