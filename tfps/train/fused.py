"""Fused dense traffic: per PS task and step, one message with the values of the dense variables
it holds and one with their gradients (and the gradients of its table shards). The policies
that use it are in tfps.train.push.

Stock TF sends each dense variable to the worker as its own tensor when an op reads it, and each
gradient back as its own: 2 messages per variable and step. With a FusedDense:

  read:  inside scope() (entered by whoever builds the graph around the model's code: tfps.runner
         around a model_fn, when its input is a PipelineDataset with fuse_dense),
         tf.compat.v1.get_variable returns a worker-local copy of each trainable variable placed
         on a PS (the real variable is created as usual, on its PS, with its usual name, and
         stays what checkpoints and exports hold). After a step's updates each
         PS concatenates its variables into one tensor; the worker splits it into the copies the
         next step reads. The copies start from the variables at session start (local init,
         after restore).
  push:  the gradients for one PS travel as one tensor per dtype (dense gradients and table
         rows, flat) and one int64 tensor (the step stamp, each table shard's row count, the
         shards' keys); they are split on the PS, then applied by the optimizer as usual.

A step reads exactly the values it would read unfused (the state after the previous step's
updates), so training is numerically identical. Only variables placed on a PS task get copies;
those the model code builds otherwise (tf.Variable, Keras layers) are read the usual way.
stage() (the pipeline's defer_push) trades that identity for a step that never waits on the
PS: gradients pushed one step later (packed when computed), dense values one step old.
"""
import dataclasses

import tensorflow as tf


@dataclasses.dataclass
class _Group:
    """The gradients bound for one device."""
    where: tf.Operation            # an op there: the gradients are split colocated with it
    shards: list = dataclasses.field(default_factory=list)     # tables whose keys ride in its int64 tensor
    by_dtype: dict = dataclasses.field(default_factory=dict)   # dtype -> [("dense" | "table", index)]


@dataclasses.dataclass
class Packing:
    """How pack() laid a step's gradients out. Static facts only (devices, shapes, variables),
    so the tensors of another step (out of a queue) unpack with it."""
    groups: list      # [_Group], in the order of the tensors
    variables: list   # the dense gradients' variables, in pack()'s order
    tables: list      # [(row width, dense_shape, TableShard)], in pack()'s order


def _add_regularization(regularizer, var):
    with tf.compat.v1.name_scope(var.op.name + "/Regularizer/"):
        loss = regularizer(var)
    if loss is not None:
        tf.compat.v1.add_to_collection(tf.compat.v1.GraphKeys.REGULARIZATION_LOSSES, loss)


class FusedDense:
    """The worker-local copies of a graph's dense variables.

    Args:
      anchor: an op on the worker (copies are colocated with it).
    """

    def __init__(self, anchor):
        self._anchor = anchor
        self.copies = {}    # real variable -> its local copy
        self._seen = set()  # names of the variables the getter returned uncopied

    def scope(self):
        """A variable scope (the current one, same names) in which tf.compat.v1.get_variable gives
        the copies: its custom getter runs after any the current scope has. Enter it around the
        code that builds the model."""
        return tf.compat.v1.variable_scope(tf.compat.v1.get_variable_scope(), custom_getter=self._getter,
                                           auxiliary_name_scope=False)

    def _getter(self, getter, name, *args, **kwargs):
        # The regularizer's loss must read what the model reads (the copy), or its gradient is lost.
        regularizer = kwargs.pop("regularizer", None)
        var = getter(name, *args, **kwargs)
        trainable = kwargs.get("trainable")
        if (trainable is False or not isinstance(var, tf.Variable) or kwargs.get("partitioner") is not None
                or "/job:ps" not in (var.device or "") or not var.shape.is_fully_defined()):
            if regularizer is not None and var.name not in self._seen:   # as get_variable does, on creation
                _add_regularization(regularizer, var)
            self._seen.add(var.name)
            return var   # only what crosses to a PS is worth fusing
        if var in self.copies:
            return self.copies[var]
        with tf.compat.v1.name_scope(None):
            initial = var.read_value()
        # device(None): the copy is not a PS variable, so the PS placement never sees (or counts) it
        with tf.compat.v1.name_scope(None), tf.compat.v1.device(None), \
                tf.compat.v1.colocate_with(self._anchor, ignore_existing=True):
            copy = tf.compat.v1.Variable(initial, trainable=False, name=var.op.name + "/tfps_local_copy",
                                         collections=[tf.compat.v1.GraphKeys.LOCAL_VARIABLES],
                                         dtype=var.dtype.base_dtype, use_resource=True)
        self.copies[var] = copy
        if regularizer is not None:
            _add_regularization(regularizer, copy)
        return copy

    def source(self, var):
        """What the model read for `var`: its copy, or var itself."""
        return self.copies.get(var, var)

    @staticmethod
    def _device(var):
        return var.device or ""

    def pack(self, dense, tables, stamp):
        """The gradients for each device as few tensors as carry them, built on the worker: per
        device, one int64 tensor [stamp, the rows of each table shard there, the shards' keys]
        (when it holds table shards) and one tensor per dtype of dense gradients and table rows.

        Args:
          dense: [(grad Tensor, variable)] of variables with copies (their shapes are known).
          tables: [(IndexedSlices(rows [U, dim], keys [U]), TableShard)].
          stamp: int64 scalar, the step the table updates are stamped with.
        Returns (tensors, Packing): unpack(tensors, packing) splits them where they are applied."""
        groups = {}
        for i, (g, v) in enumerate(dense):
            group = groups.setdefault(self._device(v), _Group(v.op))
            group.by_dtype.setdefault(v.dtype.base_dtype, []).append(("dense", i))
        for i, (g, shard) in enumerate(tables):
            group = groups.setdefault(shard.handle.device or "", _Group(shard.handle.op))
            group.shards.append(i)
            group.by_dtype.setdefault(g.values.dtype, []).append(("table", i))
        tensors = []
        with tf.compat.v1.colocate_with(self._anchor, ignore_existing=True):
            for group in groups.values():
                if group.shards:
                    keys = [tables[i][0].indices for i in group.shards]
                    parts = [tf.reshape(tf.cast(stamp, tf.int64), [1]),
                             tf.stack([tf.size(k, out_type=tf.int64) for k in keys])] + keys
                    tensors.append(tf.concat(parts, 0, name="tfps_fused_keys"))
                for members in group.by_dtype.values():
                    parts = [tf.reshape(dense[i][0] if what == "dense" else tables[i][0].values, [-1])
                             for what, i in members]
                    tensors.append(parts[0] if len(parts) == 1 else tf.concat(parts, 0, name="tfps_fused_gradients"))
        packing = Packing(list(groups.values()), [v for _, v in dense],
                          [(int(g.values.shape[-1]), g.dense_shape, shard) for g, shard in tables])
        return tensors, packing

    @staticmethod
    def unpack(tensors, packing):
        """What pack() packed, split on each device: (dense, tables, stamps) with dense and
        tables as given to pack() and stamps[i] the stamp of table i's update."""
        dense, tables = [None] * len(packing.variables), [None] * len(packing.tables)
        stamps = [None] * len(packing.tables)
        it = iter(tensors)
        for group in packing.groups:
            with tf.compat.v1.colocate_with(group.where):
                counts = {}
                if group.shards:
                    k = len(group.shards)
                    packed = tf.identity(next(it))
                    n = packed[1:1 + k]
                    for j, (i, keys) in enumerate(zip(group.shards, tf.split(packed[1 + k:], n, num=k))):
                        stamps[i], counts[i], tables[i] = packed[0], n[j], keys
                for members in group.by_dtype.values():
                    flat = tf.identity(next(it))
                    sizes = [packing.variables[i].shape.num_elements() if what == "dense"
                             else counts[i] * packing.tables[i][0] for what, i in members]
                    if any(what == "table" for what, _ in members):
                        sizes = tf.stack([tf.cast(x, tf.int64) for x in sizes])
                    parts = [flat] if len(members) == 1 else tf.split(flat, sizes, num=len(members))
                    for (what, i), part in zip(members, parts):
                        if what == "dense":
                            var = packing.variables[i]
                            dense[i] = (tf.reshape(part, var.shape), var)
                        else:
                            width, dense_shape, shard = packing.tables[i]
                            tables[i] = (tf.IndexedSlices(tf.reshape(part, [-1, width]), tables[i], dense_shape), shard)
        return dense, tables, stamps

    def stage(self, dense, tables, stamps, after):
        """Defers the push by one step: this step's gradients, packed (pack()), go into a
        worker-local queue, and the previous step's come out of it (once the ops `after` ran),
        unpacked where they are applied. Packing at the end of the step that computed them lets
        the next step send them at its start, with no op to wait for in between.

        Args:
          dense: [(grad Tensor, variable)], with or without copies (those without travel as they are).
          tables: as for pack().
          stamps: (the stamp of gradients computed in a step, of those the initializer computes).
        Returns (the enqueue a step runs, the one the initializer runs, dense, tables, table stamps)
        with dense and tables as given but holding the previous step's gradients."""
        copied = [(g, v) for g, v in dense if v in self.copies]
        raw = [(g, v) for g, v in dense if v not in self.copies]
        if not copied and not raw and not tables:
            return tf.no_op(), tf.no_op(), dense, tables, []
        items = []
        for stamp in stamps:
            tensors, packing = self.pack(copied, tables, stamp)
            items.append(tensors + [g for g, _ in raw])
        with tf.compat.v1.colocate_with(self._anchor, ignore_existing=True):
            queue = tf.queue.FIFOQueue(2, [t.dtype for t in items[0]], name="tfps_deferred_gradients")
            enqueue, enqueue_first = (queue.enqueue(item) for item in items)
            with tf.control_dependencies(after):
                prev = queue.dequeue()
        prev = prev if isinstance(prev, (list, tuple)) else [prev]
        for t, now in zip(prev, items[0]):
            t.set_shape(now.shape)
        n = len(items[0]) - len(raw)
        out_copied, out_tables, out_stamps = self.unpack(prev[:n], packing)
        return (enqueue, enqueue_first, out_copied + [(t, v) for t, (_, v) in zip(prev[n:], raw)],
                out_tables, out_stamps)

    def step_stamp(self, global_step_value):
        """The step that table updates are stamped with, kept on the worker: (stamp, advance).

        The stamp is this worker's last read of the global step plus one (the step its run made),
        set from the global step when the session starts (a local variable, initialized after a
        restore). With one trainer it is exactly the global step at the start of the run; with
        several it lags by the other trainers' steps since this trainer's previous run began
        (the read at run start lagged by those since this run began). Sending it in the keys'
        message makes the keys wait on nothing the PS has: no round trip to the global step's PS
        before the tables update. `advance` (run after the stamp is read) moves it on from
        `global_step_value`, the read the step's hooks fetch anyway. (With the pipeline's
        defer_push no mirror is needed: gradients computed in a step are packed with that
        step's read plus one, which is what the mirror holds when the next step pushes them.)"""
        with tf.compat.v1.name_scope(None), tf.compat.v1.device(None), \
                tf.compat.v1.colocate_with(self._anchor, ignore_existing=True):
            mirror = tf.compat.v1.Variable(tf.cast(global_step_value, tf.int64), trainable=False,
                                           name="tfps_step_stamp", dtype=tf.int64, use_resource=True,
                                           collections=[tf.compat.v1.GraphKeys.LOCAL_VARIABLES])
            stamp = mirror.read_value()
            with tf.control_dependencies([stamp]):
                advance = mirror.assign(tf.cast(global_step_value, tf.int64) + 1, read_value=False)
        return stamp, advance

    def refresh(self, updates, reads_done=None):
        """The op that reads each PS's variables as one tensor, once that PS's updates ran, and
        writes the worker's copies (what the next step reads).

        updates: {device: the op that runs the step's updates on that device}.
        Returns (op, the devices whose updates the op waits for)."""
        groups = {}
        for var in self.copies:
            groups.setdefault((self._device(var), var.dtype.base_dtype), []).append(var)
        assigns = []
        for (device, _), members in groups.items():
            after = [updates[device]] if device in updates else []
            with tf.compat.v1.colocate_with(members[0].op), tf.control_dependencies(after):
                fused = tf.concat([tf.reshape(v.read_value(), [-1]) for v in members], 0, name="tfps_fused_values")
            with tf.compat.v1.colocate_with(self._anchor, ignore_existing=True), \
                    tf.control_dependencies([reads_done] if reads_done is not None else []):
                parts = tf.split(tf.identity(fused), [v.shape.num_elements() for v in members])
                assigns += [self.copies[v].assign(tf.reshape(p, v.shape), read_value=False)
                            for v, p in zip(members, parts)]
        return tf.group(*assigns, name="tfps_refresh_local_copies"), {d for d, _ in groups if d in updates}
