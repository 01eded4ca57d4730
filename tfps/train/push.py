"""How a step's gradients travel to the PS: one class per policy, chosen by whoever builds the
input (tfps.pipeline's PipelineDataset, from the config's pipeline section) and put by whoever
builds the graph (tfps.runner) into its tfps.embedding.TrainingStep, with the model built inside
its dense_scope(); a tfps optimizer routes its gradients through it.

  PlainPush     each gradient is its own message, as TF sends it; tables stamped with the
                global step the step reads.
  FusedPush     per PS, one message of values and one of gradients (tfps.train.fused); tables
                stamped with a step the worker keeps, so the keys wait on no PS.
  DeferredPush  FusedPush whose gradients are pushed during the next step: the step never
                waits on the PS (dense values one step old).
  DeferIfRemote      DeferredPush at pipeline depth 1 when some dense variable lives on a PS,
                FusedPush otherwise; decided when the optimizer asks (the variables exist then).

A policy's route() gets the step's gradients and gives back what to apply, with the stamp of
each table update; finish() groups the applied updates and adds what else the step runs.
"""
import contextlib
import dataclasses

import tensorflow as tf

from tfps.train.fused import FusedDense


@dataclasses.dataclass
class Routed:
    """A step's gradients as a policy routes them."""
    dense: list                 # [(grad or None, variable)] to apply as TF does
    tables: list                # [(IndexedSlices, TableShard)] to apply by the table ops
    stamps: list                # the step each table update is stamped with
    after: list = dataclasses.field(default_factory=list)   # ops the step also runs
    computed: tf.Operation = None   # DeferredPush: the op that keeps this step's gradients


def _after(grad, op):
    """grad (a Tensor or IndexedSlices) available only once `op` ran."""
    with tf.control_dependencies([op]):
        if isinstance(grad, tf.IndexedSlices):
            return tf.IndexedSlices(tf.identity(grad.values), grad.indices, grad.dense_shape)
        return tf.identity(grad)


class PlainPush:
    """Each gradient travels on its own, as TF sends it."""
    defers = False

    def source(self, var):
        """What the model read for `var` (what its gradient is taken with respect to)."""
        return var

    def dense_scope(self):
        """The scope to build the model in: here nothing changes (a null context)."""
        return contextlib.nullcontext()

    def route(self, dense, tables, global_step, stager):
        del stager
        stamps = []
        if tables:
            step = tf.constant(0, tf.int64) if global_step is None else tf.cast(tf.identity(global_step), tf.int64)
            stamps = [step] * len(tables)
        return Routed(dense, tables, stamps)

    def finish(self, updates, global_step, routed):
        """(the updates the global step's increment waits for, ops the step also runs)."""
        del global_step, routed
        return updates, []


class FusedPush(PlainPush):
    """Per PS and step, one message with its dense variables' values and one with the gradients
    of its variables and table shards (tfps.train.fused.FusedDense holds the worker's copies)."""

    def __init__(self, fused):
        self.fused = fused

    def source(self, var):
        return self.fused.source(var)

    def dense_scope(self):
        """The scope whose get_variable gives worker-local copies (tfps.train.fused.FusedDense.scope)."""
        return self.fused.scope()

    def route(self, dense, tables, global_step, stager):
        del stager
        fused = self.fused
        copied = [(g, v) for g, v in dense if g is not None and v in fused.copies]
        stamp, after = tf.constant(0, tf.int64), []
        if tables and global_step is not None:
            stamp, advance = fused.step_stamp(tf.compat.v1.get_default_graph().as_graph_element(global_step))
            after.append(advance)
        copied, tables, stamps = fused.unpack(*fused.pack(copied, tables, stamp))
        dense = copied + [(g, v) for g, v in dense if g is not None and v not in fused.copies]
        return Routed(dense, tables, stamps, after)

    def finish(self, updates, global_step, routed):
        # One group per device: a PS's fused read waits only for its own updates, and the global
        # step only for those on its own device (the step's run ends once every device's group
        # ran, so the next step still sees them all) -- no control message between tasks except
        # the one that ends the step.
        groups = _by_device(updates)
        refresh, refreshed = self.fused.refresh(groups, reads_done=routed.computed)
        home = global_step.op.device if global_step is not None else ""
        after = [refresh] + ([routed.computed] if routed.computed is not None else []) + routed.after
        after += [op for device, op in groups.items() if device not in refreshed and device != home]
        return [op for device, op in groups.items() if device == home], after


class DeferredPush(FusedPush):
    """FusedPush with a step's gradients packed when computed and pushed during the next step
    (tfps.train.fused.FusedDense.stage); the pipeline's probes ahead read after the push."""
    defers = True

    def route(self, dense, tables, global_step, stager):
        if stager is None:
            raise ValueError("a deferred push needs a pipelined input (tfps.pipeline.PipelineDataset)")
        gs = tf.compat.v1.get_default_graph().as_graph_element(global_step) if global_step is not None else None
        zero = tf.constant(0, tf.int64)
        # This step's gradients wait on the worker, packed; the previous step's are pushed now.
        # Those computed in a step are pushed in the next, whose stamp is this step's read of the
        # global step plus one; the initializer's, in the first step (the global step at its start).
        present = [(g, v) for g, v in dense if g is not None]
        stamp_of = (tf.cast(gs, tf.int64) + 1, tf.cast(gs, tf.int64)) if gs is not None else (zero, zero)
        computed, first, present, tables, stamps = self.fused.stage(present, tables, stamp_of,
                                                                    after=[stager.staged_batch()])
        stager.first_step(first)
        # A variable without a worker copy is read by this step's model directly: its previous
        # gradient is applied once the step's gradients are computed (its reads done), not racing
        # them -- one step stale, as the copies are.
        dense = [(_after(g, computed), v) if v not in self.fused.copies else (g, v) for g, v in present]
        return Routed(dense, tables, stamps, computed=computed)


class DeferIfRemote(FusedPush):
    """DeferredPush at depth 1 when some dense variable has a worker copy (lives on a PS),
    FusedPush otherwise: in one process no push waits on a network, and deferring only costs a
    step of staleness. Decided once, when the optimizer first routes (the variables exist)."""

    def __init__(self, fused, depth):
        super().__init__(fused)
        self.depth = depth
        self._chosen = None

    @property
    def defers(self):
        if self._chosen is None:
            raise ValueError("defer_push=None is decided when the optimizer routes the step's gradients "
                             "(apply_gradients), once the model's variables exist; ask after minimize()")
        return self._chosen.defers

    def route(self, dense, tables, global_step, stager):
        if self._chosen is None:
            defer = self.depth == 1 and bool(self.fused.copies)
            self._chosen = (DeferredPush if defer else FusedPush)(self.fused)
        return self._chosen.route(dense, tables, global_step, stager)

    def finish(self, updates, global_step, routed):
        return self._chosen.finish(updates, global_step, routed)


def push_policy(fuse_dense, defer_push, depth, anchor):
    """The policy of a PipelineDataset's settings: PlainPush without fuse_dense; with it, a
    DeferredPush (defer_push True), FusedPush (False) or DeferIfRemote (None) over the worker-local
    copies of the dense variables, colocated with `anchor` (an op on the worker)."""
    if defer_push and not fuse_dense:
        raise ValueError("defer_push=True needs fuse_dense=True (the deferred push is part of the fused one)")
    if not fuse_dense:
        return PlainPush()
    fused = FusedDense(anchor)
    if defer_push is None:
        return DeferIfRemote(fused, depth)
    return (DeferredPush if defer_push else FusedPush)(fused)


def _by_device(ops):
    """{device: one op colocated there that runs every op of `ops` on that device}, the groups
    (tf.group NoOps) among `ops` opened up to the ops they wait for."""
    leaves, stack, seen = [], list(ops), set()
    while stack:
        op = stack.pop()
        op = op.op if isinstance(op, tf.Tensor) else op
        if op.name in seen:
            continue
        seen.add(op.name)
        if op.type == "NoOp" and op.control_inputs and not op.inputs:
            stack.extend(op.control_inputs)
        else:
            leaves.append(op)
    devices = {}
    for op in leaves:
        devices.setdefault(op.device, []).append(op)
    out = {}
    for device, members in devices.items():
        with tf.compat.v1.colocate_with(members[0], ignore_existing=True):
            out[device] = tf.group(*members, name="tfps_updates")
    return out


__all__ = ["DeferIfRemote", "DeferredPush", "FusedPush", "PlainPush", "Routed", "push_policy"]
