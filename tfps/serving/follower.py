"""A followed trainer's model_dir applied to loaded versions in place: its newest full
checkpoint, then the deltas that continue it, each checked against the version's manifest and
read whole first (tfps serve --follow)."""
import os
import time

import tensorflow as tf

from tfps.embedding.checkpoint_tools import check_tables
from tfps.embedding import layout
from tfps.embedding.saveable import commit_shards, stage_shards
from tfps.embedding.stock import AttachedStockTable, attached_stock_tables
from tfps.embedding.variable import attached_tables
from tfps.ops.checkpoint import TableRows, table_rows
from tfps.serving.errors import error_line
from tfps.state import disk, manifest as manifests
from tfps.state.deltas import apply_dense_op, apply_tables_op, checkpoint_step, delta_chain, delta_files


def _full_restore(graph, tables, prefix):
    """The op that replaces the rows of every table of `tables` with those of the checkpoint at
    `prefix`, each read in slices first -- a tfps table's shards each from the parts that can hold
    its keys (staged), a stock table's rows with their pad row (TfpsTableRows) -- and put in only
    once every table has read its rows, so a damaged part changes no table."""
    with graph.as_default():
        read = [table_rows(prefix, tf.constant([], tf.string), ev.name, ev.dim, pad_rows=1, with_state=False)
                if isinstance(ev, AttachedStockTable) else stage_shards(ev, prefix) for ev in tables]
        every = [t for r in read for t in ((r.keys, r.values) if isinstance(r, TableRows) else r)]
        puts = []
        for ev, r in zip(tables, read):
            if isinstance(r, TableRows):
                puts.append(ev.load({"keys": r.keys, "values": r.values}, padded=True, after=every))
            else:
                puts += commit_shards(ev, r, every)
        return tf.group(*puts)


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
        self.mismatch = {}    # version -> why model_dir's newest checkpoint is not its model's

    def _ops(self, servable):
        state = self._state.get(servable)
        if state is not None:
            return state
        with servable.graph.as_default():
            stock_tables = attached_stock_tables(servable.graph)   # a stock export's (tfps.embedding.stock)
            tables = attached_tables(servable.graph) + stock_tables
            stock_variables = {name for t in stock_tables for name in t.variables()}
            prefix = tf.compat.v1.placeholder(tf.string, [], name="tfps_follow_prefix")
            delta = apply_tables_op(tables, prefix)
            full = _full_restore(servable.graph, tables, prefix) if tables else None
            dense = {k: v for k, v in manifests.dense_variables(servable.graph).items()
                     if v.op.name not in stock_variables}
            dense_delta = apply_dense_op(dense, prefix)
            saver = tf.compat.v1.train.Saver(list(dense.values()), sharded=False) if dense else None
        # The step the version was exported at; None: unknown, the first full checkpoint of
        # model_dir is applied before any delta.
        start = servable.state_step
        state = dict(tables=tables, prefix=prefix, delta=delta, dense=dense_delta, full=full,
                     saver=saver, base=start, applied=start, chain=[])
        self._state[servable] = state
        self._check_model_dir(servable)
        return state

    def _check_model_dir(self, servable):
        """Says at once when model_dir holds another model than the version (nothing of it would
        ever apply) or no checkpoint yet; `mismatch[version]` keeps the reason."""
        try:
            latest = disk.latest_checkpoint(self.model_dir)
        except disk.CheckpointUnreadable as e:
            self._report(f"nothing of {self.model_dir} is applied to version {servable.version} while {error_line(e)}")
            return
        if latest is None:
            self._report(f"{self.model_dir} holds no checkpoint yet: version {servable.version} serves as exported "
                         f"until one appears")
            return
        try:
            self._check(servable, latest, "checkpoint")
        except (manifests.StateMismatch, ValueError, IndexError, RuntimeError, tf.errors.OpError) as e:
            self.mismatch[servable.version] = error_line(e)
            self._report(f"{self.model_dir} is not the model of version {servable.version}; nothing of it is "
                         f"applied ({error_line(e)})")

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
            self._report(f"version {servable.version} has no tfps table (a model.hashing_trick export, say): --follow "
                         f"applies tables' checkpoints and deltas, so nothing of {self.model_dir} is applied to it")
            return []
        done = []
        try:
            latest = disk.latest_checkpoint(self.model_dir)
        except disk.CheckpointUnreadable as e:   # a partial copy: never passed over for an older cut
            self._report(f"version {servable.version} keeps serving step {state['applied']}: {error_line(e)}")
            return done
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
        """Restores a full checkpoint into the servable. Every tensor of it but the served tables'
        is read here first, and the tables' ops read (and check) every table's rows before any
        table changes, so a damaged one is refused before anything changes."""
        check_tables(prefix, state["tables"], before_parts=True)   # its restore ops read that layout too
        try:
            reader = tf.train.load_checkpoint(prefix)
            tables = [ev.name for ev in state["tables"]]
            for name in reader.get_variable_to_shape_map():
                if layout.table_of(name, tables) is None:
                    reader.get_tensor(name)
        except (RuntimeError, ValueError, IndexError, tf.errors.OpError) as e:
            raise ValueError(f"{prefix} cannot be read ({error_line(e)}); nothing of it applied") from None
        with servable.writing():   # the tables (the checked part) first, then the dense variables
            servable.session.run(state["full"], {state["prefix"]: prefix})
            if state["saver"] is not None:
                state["saver"].restore(servable.session, prefix)

    def forget(self, servable):
        self._state.pop(servable, None)
