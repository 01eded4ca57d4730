"""The versions of one served model: found under the base path, loaded and warmed off to the side,
swapped in; and, with a followed model_dir, the trainer's table deltas applied in place."""
import contextlib
import gc
import os
import threading
import time
import weakref

import tensorflow as tf

from tfps.embedding.checkpoint_tools import check_tables
from tfps.embedding.saveable import DTYPES, PARTS
from tfps.embedding.variable import attached_tables
from tfps.serving.errors import ServingError, error_line
from tfps.serving.servable import Servable
from tfps.state import manifest as manifests
from tfps.state.deltas import apply_dense_op, apply_tables_op, checkpoint_step, delta_chain, delta_files


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


class TableFollower:
    """Applies a trainer's model_dir to loaded versions, in place: a newer full checkpoint (tables
    and dense variables), then the chain of deltas that continues it (tables, then the dense
    state of the last), in step order.

    Each checkpoint and delta is checked against the version's manifest (the fingerprint of the
    model it was exported from, assets.extra/tfps_manifest.json) and read whole before anything of
    it changes: another model's state, a half-written or damaged delta is never applied; it and
    the deltas after it are refused (reported once) and the version serves what it had."""

    def __init__(self, model_dir, printer=print):
        self.model_dir, self._print = model_dir, printer
        self._state = {}      # servable -> its ops and what it holds (base full step, applied step)
        self._reported = set()
        self.applied = []     # (version, "full"/"delta", step), in the order applied
        self.lags = []        # seconds from each applied delta's appearance to its apply
        self._checked = {}    # deltas read whole (delta_chain's cache)
        self._steps = {}      # checkpoint path -> the global step it holds

    def _ops(self, servable):
        state = self._state.get(servable)
        if state is not None:
            return state
        with servable.graph.as_default():
            tables = attached_tables(servable.graph)
            prefix = tf.compat.v1.placeholder(tf.string, [], name="tfps_follow_prefix")
            delta = apply_tables_op(tables, prefix)
            parts = [p for p in PARTS if p != "admission"]
            full = []
            for ev in tables:
                with servable.graph.colocate_with(ev.handles[0].op):
                    restored = tf.raw_ops.RestoreV2(prefix=prefix, tensor_names=[f"{ev.name}-{p}" for p in parts],
                                                    shape_and_slices=[""] * len(parts),
                                                    dtypes=[DTYPES[p] for p in parts])
                full.append(ev.load(dict(zip(parts, restored))))
            dense = manifests.dense_variables(servable.graph)
            dense_delta = apply_dense_op(dense, prefix)
            saver = tf.compat.v1.train.Saver(list(dense.values()), sharded=False) if dense else None
        # The step the version was exported at; None: unknown, the first full checkpoint of
        # model_dir is applied before any delta.
        start = servable.state_step
        state = dict(tables=tables, prefix=prefix, delta=delta, dense=dense_delta, full=tf.group(*full) if full else None,
                     saver=saver, base=start, applied=start, chain=[])
        self._state[servable] = state
        return state

    def _report(self, message):
        if message not in self._reported:
            self._reported.add(message)
            self._print(f"tfps serve --follow: {message}", flush=True)

    def _check(self, servable, prefix, what):
        """StateMismatch unless the checkpoint or delta at `prefix` is the version's model's."""
        if servable.manifest is None:
            raise manifests.StateMismatch(f"version {servable.version} has no {manifests.EXPORT_MANIFEST} (exported "
                                          f"by a tfps before state manifests): its model cannot be checked")
        saved = manifests.read(prefix)
        if saved is None:
            raise manifests.StateMismatch(f"{what} {prefix} has no {manifests.MANIFEST} (written by a tfps before "
                                          f"state manifests)")
        manifests.check(saved, servable.manifest["model"], f"{what} {prefix}", exact=True)

    def catch_up(self, servable, live=True):
        """Applies what model_dir holds beyond what `servable` has, each checkpoint or delta as one
        write (requests see all of it or none). What cannot be applied is reported once and
        skipped; the servable goes on as it is. live: the servable answers requests (its deltas'
        lags are measured; a version still loading catches up on old deltas). Returns the steps
        applied."""
        state = self._ops(servable)
        if not state["tables"]:
            self._report(f"version {servable.version} has no tfps table (a model.stock_tf export, say): --follow "
                         f"applies tables' checkpoints and deltas, so nothing of {self.model_dir} is applied to it")
            return []
        done = []
        latest = tf.train.latest_checkpoint(self.model_dir)
        try:   # the global step it holds (on a cluster it can be past the one in its name)
            full_step = self._steps[latest] if latest in self._steps else checkpoint_step(latest) if latest else None
        except ValueError as e:
            self._report(f"checkpoint {latest} not applied, version {servable.version} keeps serving step "
                         f"{state['applied']}: {error_line(e)}")
            return done
        self._steps[latest] = full_step
        if full_step is not None and (state["applied"] is None or full_step > state["applied"]):
            if not self._full(servable, state, latest, full_step):
                return done
            done.append(full_step)
        if state["applied"] is None or full_step is None:
            return done
        files = tuple(delta_files(self.model_dir, after_step=full_step))
        if not files or (files, full_step) == state.get("seen"):
            return done
        state["seen"] = (files, full_step)   # read again only when the files change
        current = {prefix for _, prefix in files}
        for prefix in [p for p in self._checked if p not in current]:
            del self._checked[prefix]
        chain = None
        if servable.manifest is not None and state["applied"] > full_step:
            # On a delta: the deltas that continue it (those before it are applied already, and
            # read again only if the chain does not continue from here).
            try:
                chain = delta_chain(self.model_dir, state["applied"], state["tables"], servable.manifest["model"],
                                    exact=True, checked=self._checked)
            except ValueError:
                chain = None
        if chain is None:
            try:
                if servable.manifest is None:
                    self._check(servable, files[0][1], "delta")
                chain = delta_chain(self.model_dir, full_step, state["tables"], servable.manifest["model"],
                                    exact=True, checked=self._checked)
            except ValueError as e:
                self._report(f"version {servable.version} keeps serving step {state['applied']}: {e}")
                return done
            if state["applied"] != full_step and state["applied"] not in [s for s, _ in chain]:
                # The version holds a cut that is not on model_dir's chain (the trainer went on
                # from an earlier cut): start over from the full checkpoint.
                if not self._full(servable, state, latest, full_step):
                    return done
        for step, prefix in chain:
            if step <= state["applied"]:
                continue
            try:
                with servable.writing():
                    servable.session.run(state["delta"], {state["prefix"]: prefix})
                    if state["dense"] is not None:
                        servable.session.run(state["dense"], {state["prefix"]: prefix})
            except tf.errors.OpError as e:
                state["seen"] = None   # tried again at the next poll
                self._report(f"{prefix} not applied: {error_line(e)}")
                return done
            state["applied"] = servable.state_step = step
            lag = time.time() - os.path.getmtime(prefix + ".index")   # the index appears last
            if live:
                self.lags.append(lag)
            # after its lag: a reader that sees the step applied sees its lag as well
            self.applied.append((servable.version, "delta", step))
            self._print(f"tfps serve --follow: applied {os.path.basename(prefix)} to version {servable.version}"
                        + (f", {lag:.3f} s after it was written" if live else " (loading it)"), flush=True)
            done.append(step)
        return done

    def _full(self, servable, state, prefix, step):
        """Applies the full checkpoint at `prefix`; False (reported) when it cannot be."""
        try:
            self._check(servable, prefix, "checkpoint")
            self._apply_full(servable, state, prefix)
        except (ValueError, tf.errors.OpError) as e:
            self._report(f"checkpoint {prefix} not applied, version {servable.version} keeps serving step "
                         f"{state['applied']}: {error_line(e)}")
            return False
        state.update(base=step, applied=step)
        servable.state_step = step
        self.applied.append((servable.version, "full", step))
        self._print(f"tfps serve --follow: applied checkpoint {os.path.basename(prefix)} to version "
                    f"{servable.version}", flush=True)
        return True

    def _apply_full(self, servable, state, prefix):
        """Restores a full checkpoint into the servable: every tensor of it is read first, so a
        damaged one is refused before anything changes."""
        check_tables(prefix, state["tables"])
        try:
            reader = tf.train.load_checkpoint(prefix)
            for name in reader.get_variable_to_shape_map():
                reader.get_tensor(name)
        except (RuntimeError, ValueError, IndexError, tf.errors.OpError) as e:
            raise ValueError(f"{prefix} cannot be read ({error_line(e)}); nothing of it applied") from None
        with servable.writing():   # the tables (the checked part) first, then the dense variables
            servable.session.run(state["full"], {state["prefix"]: prefix})
            if state["saver"] is not None:
                state["saver"].restore(servable.session, prefix)

    def forget(self, servable):
        self._state.pop(servable, None)
