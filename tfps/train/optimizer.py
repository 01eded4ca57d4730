"""The part every tfps optimizer shares: dense variables as TF does them, tables by fused sparse-apply ops.

compute_gradients builds one backward pass for dense variables and table lookups together;
each table shard's gradient becomes IndexedSlices(values=[U, dim] rows, indices=[U] keys),
one row per distinct key (duplicates summed).
"""
import inspect

import tensorflow as tf
from tensorflow.python.training import training_util   # the key of the global step read the hooks fetch

from tfps.embedding.model_graph import ModelGraph
from tfps.embedding.variable import EmbeddingVariable, TableShard
from tfps.state import manifest as manifests
from tfps.train.push import PlainPush


def _rows_per_unique(grad, num_unique):
    """Gradient w.r.t. unique_values [U, dim] as a dense [U, dim] tensor."""
    if isinstance(grad, tf.IndexedSlices):
        return tf.math.unsorted_segment_sum(grad.values, grad.indices, num_unique)
    return grad


def _merge_by_key(keys, rows):
    """Sums rows of equal keys: (unique keys [U], rows [U, dim])."""
    uniq, idx = tf.unique(keys)
    return uniq, tf.math.unsorted_segment_sum(rows, idx, tf.size(uniq))


def _push_of(step):
    return step.push if step.push is not None else PlainPush()


def _step_of(step):
    """`step`, or the graph's own (its ModelGraph's) for None. A step of its own is refused in a
    graph that reads a PipelineDataset: its lookups are staged, and its dense variables read,
    through the graph's."""
    own = ModelGraph.of().step
    if step is None or step is own:
        return own
    if own.stager is not None or own.push is not None:
        raise ValueError("this graph reads a tfps PipelineDataset: its lookups and dense variables go through the "
                         "graph's own TrainingStep; pass step=None (or the model graph's: model_graph.step)")
    return step


class TableOptimizerMixin:
    """Mixed into a tf.compat.v1.train optimizer (the class right after it among the bases);
    subclasses define _apply_table.

    It takes the TF optimizer's constructor arguments and keeps them, bound to that constructor's
    signature with its defaults, for the table updates (_argument(name)): TF keeps them in
    private attributes of its own naming (Adam's learning rate is _lr, the others' _learning_rate).

    minimize, compute_gradients and apply_gradients take the tfps.embedding.TrainingStep whose
    lookups they train and whose push policy carries the gradients (step=; None: the graph's
    own, which a tf.estimator model_fn uses)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)   # TF's checks of the arguments first
        mro = type(self).__mro__
        tf_optimizer = mro[mro.index(TableOptimizerMixin) + 1]
        bound = inspect.signature(tf_optimizer.__init__).bind(self, *args, **kwargs)
        bound.apply_defaults()
        # A dict: the optimizer's fingerprint record (tfps.state.manifest) takes plain values only.
        self._tfps_arguments = dict(list(bound.arguments.items())[1:])

    def _argument(self, name):
        """The value of the TF constructor's argument `name` (a callable one called, as TF does
        when it builds its update)."""
        value = self._tfps_arguments[name]
        return value() if callable(value) else value

    def _apply_table(self, shard, keys, grads, lr, step):
        raise NotImplementedError

    def minimize(self, loss, global_step=None, var_list=None, gate_gradients=tf.compat.v1.train.Optimizer.GATE_OP,
                 aggregation_method=None, colocate_gradients_with_ops=False, name=None, grad_loss=None, step=None):
        step = _step_of(step)
        grads_and_vars = self.compute_gradients(loss, var_list=var_list, gate_gradients=gate_gradients,
                                                aggregation_method=aggregation_method,
                                                colocate_gradients_with_ops=colocate_gradients_with_ops,
                                                grad_loss=grad_loss, step=step)
        if not any(g is not None for g, _ in grads_and_vars):
            raise ValueError(f"No gradients provided for any variable: {[v.name for _, v in grads_and_vars]}")
        return self.apply_gradients(grads_and_vars, global_step=global_step, name=name, step=step)

    def compute_gradients(self, loss, var_list=None, gate_gradients=tf.compat.v1.train.Optimizer.GATE_OP,
                          aggregation_method=None, colocate_gradients_with_ops=False, grad_loss=None, step=None):
        step = _step_of(step)
        if callable(loss):
            raise ValueError("tfps optimizers run in graph mode; pass a loss tensor")
        if var_list is None:
            dense = (tf.compat.v1.trainable_variables() +
                     tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.TRAINABLE_RESOURCE_VARIABLES))
            dense = list(dict.fromkeys(dense))
            tables = ModelGraph.of().trainable_tables()
        else:
            var_list = tf.nest.flatten(var_list)
            dense = [v for v in var_list if not isinstance(v, EmbeddingVariable)]
            tables = [v for v in var_list if isinstance(v, EmbeddingVariable)]
        records = [(r.variable, r) for r in step.lookups_of(tables)]
        own = ModelGraph.of().step
        elsewhere = {r.variable.name for r in own.lookups_of(tables)} if step is not own else ()
        if elsewhere:
            raise ValueError(f"lookups of {sorted(elsewhere)} went into the graph's own TrainingStep, not the step "
                             f"passed: hand the same step to every lookup (step=) and to the optimizer")
        if not dense and not records:
            raise ValueError("No variables to optimize: no trainable variables and no training lookups "
                             "(tfps.embedding_lookup with insert=True) of trainable embedding variables")
        # With fused dense traffic the model read worker-local copies of the variables.
        push = _push_of(step)
        xs = [push.source(v) for v in dense] + [r.unique_values for _, r in records]
        grads = tf.compat.v1.gradients(loss, xs, grad_ys=grad_loss,
                                       gate_gradients=(gate_gradients == self.GATE_OP),
                                       aggregation_method=aggregation_method,
                                       colocate_gradients_with_ops=colocate_gradients_with_ops)
        if gate_gradients == self.GATE_GRAPH:
            present = [i for i, g in enumerate(grads) if g is not None]
            for i, g in zip(present, tf.tuple([grads[i] for i in present])):
                grads[i] = g
        grads_and_vars = list(zip(grads[:len(dense)], dense))
        by_shard = {}
        for (ev, record), grad in zip(records, grads[len(dense):]):
            if grad is None:
                continue
            # One row per distinct id, summed on the worker before it is sent to its shard.
            rows = _rows_per_unique(grad, tf.size(record.unique_ids))
            if record.offsets is None:
                pieces = [(0, record.unique_ids, rows)]
            else:
                sizes = record.offsets[1:] - record.offsets[:-1]
                pieces = zip(range(ev.num_shards), tf.split(record.unique_ids, sizes, num=ev.num_shards),
                             tf.split(rows, sizes, num=ev.num_shards))
            for shard, keys, shard_rows in pieces:
                by_shard.setdefault((ev.name, shard), (ev, shard, []))[2].append((keys, shard_rows))
        for ev, shard, parts in by_shard.values():
            with tf.compat.v1.get_default_graph().colocate_with(ev.handles[shard].op):
                if len(parts) == 1:
                    keys, rows = parts[0]
                else:
                    keys, rows = _merge_by_key(tf.concat([k for k, _ in parts], 0),
                                               tf.concat([r for _, r in parts], 0))
            grads_and_vars.append((tf.IndexedSlices(rows, keys), TableShard(ev, shard)))
        return grads_and_vars

    def apply_gradients(self, grads_and_vars, global_step=None, name=None, step=None):
        step = _step_of(step)
        grads_and_vars = list(grads_and_vars)
        manifests.record_optimizer(self)   # the optimizer is part of the model's fingerprint
        dense = [(g, v) for g, v in grads_and_vars if not isinstance(v, TableShard)]
        tables = [(g, v) for g, v in grads_and_vars if isinstance(v, TableShard) and g is not None]
        name = name or self.get_name()
        graph = tf.compat.v1.get_default_graph()
        push, stager = _push_of(step), step.stager
        routed = push.route(dense, tables, global_step, stager)
        updates, pushed = [], []
        if routed.tables:
            lr = tf.cast(self._argument("learning_rate"), tf.float32)
            for (grad, shard), stamp in zip(routed.tables, routed.stamps):
                with graph.colocate_with(shard.handle.op):
                    updates.append(self._apply_table(shard, grad.indices, grad.values, lr, stamp))
                pushed.append((shard.handle, updates[-1]))
        if any(g is not None for g, _ in routed.dense):
            updates.append(super().apply_gradients(routed.dense, name=name + "_dense"))
        if not updates:
            raise ValueError(f"No gradients provided for any variable: {[v.name for _, v in grads_and_vars]}")
        updates, after = push.finish(updates, global_step, routed)
        # With a pipelined input (tfps.pipeline) the step also runs the embedding graph of the
        # batch `depth` steps ahead, concurrently with this one's; with a deferred push the push
        # carries the previous step's gradients, and the probes ahead read after it.
        if stager is not None:
            after.append(stager.lookahead_op(after=pushed if push.defers else None))
        if global_step is not None:   # the read the hooks fetch (and the step stamp) comes first
            updates = updates + [graph.as_graph_element(global_step).op]
        with tf.control_dependencies(updates):
            if global_step is None:
                return tf.group(*updates, *after, name=name)
            # After the read the hooks fetch, as TF's own increment, when that read runs beside
            # the global step (one process; tfps.cluster.replica_device_setter): the fetched value
            # plus one is then the step this run made (hooks.CheckpointSaverHook counts on it).
            # A read on another task is left unordered: waiting on it would cost a round trip.
            home = _device(global_step.op.device)
            read = [t for t in tf.compat.v1.get_collection(training_util.GLOBAL_STEP_READ_KEY)
                    if _device(t.device) == home]
            with graph.colocate_with(global_step.op), tf.control_dependencies(read):
                train_op = tf.compat.v1.assign_add(global_step, 1, name=name).op
        if after:
            train_op = tf.group(train_op, *after, name=name + "_step")
        train_ops = tf.compat.v1.get_collection_ref(tf.compat.v1.GraphKeys.TRAIN_OP)
        if train_op not in train_ops:
            train_ops.append(train_op)
        return train_op


def _device(name):
    return tf.DeviceSpec.from_string(name or "").to_string()
