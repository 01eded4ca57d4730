"""The embedding pipeline: the lookups of batch t + depth run while batch t trains.

A Pipeline is the iterator a PipelineDataset gives tf.estimator. Its get_next() returns the
batch the main graph trains now, read from a FIFO queue (the *staged* batch); the user's
model_fn is built once, on it. Each training lookup that model_fn makes
(tfps.embedding_lookup, feature columns, lookup_feature_matrix) is split in two:

  embedding graph: the fresh batch from the dataset -> the lookup's keys, re-derived from it
                   (tfps.pipeline.replay) -> unique/partition -> shard probes on the PS ->
                   (unique ids, inverse, offsets, rows) into the lookup's queue;
  main graph:      the staged (unique ids, inverse, offsets, rows) of batch t out of that queue
                   -> gather -> the dense model -> gradients pushed to the tables.

The Pipeline is a tfps.embedding.Stager; it comes with the push policy (tfps.train.push) its
dataset's settings choose. Whoever builds the graph (tfps.runner) puts both into the model
graph's TrainingStep (step.use(pipeline, pipeline.push)) and builds the model inside
pipeline.push.dense_scope(). The embedding graph of a step is built when the
optimizer asks for it (lookahead_op()), after the step's pushes exist, so a probe that must read
after a push is built to (control dependencies), not edited afterwards.

A tfps optimizer's train op also runs the embedding graph (lookahead_op()), so one session.run
trains batch t and probes batch t + depth, concurrently. When a session starts (and again
whenever it is re-created) the iterator's initializer fills the queues with batches 0 ..
depth - 1, one after the other.

Staleness: the rows batch t trains on were read during step t - depth, concurrently with that
step's updates: they hold every update of the steps before t - depth, maybe that of t - depth,
and none of steps t - depth + 1 .. t - 1. So a row is at most `depth` steps old. Every
gradient is applied once, to the rows of the batch it was computed on.

With defer_push (and fused dense traffic, tfps.train.fused) a step's gradients are pushed
during the next step, so no step waits on the PS; the step's probes run after its push
(lookahead_op(after=...)), so rows hold exactly the updates of the batches before t - depth; dense values
are 1 step old. The initializer also computes batch 0's gradients, and the global step counts
pushed gradients, so a checkpoint at step s holds batches 0 .. s - 1 exactly.

End of data: the embedding graph reads the dataset through get_next_as_optional; past the end
it enqueues nothing and closes the queues, the main graph trains what is staged, then its
dequeue raises OutOfRangeError before any update: no batch is lost or trained twice. (With
defer_push one more step runs, on a copy of a trained batch, to push the last gradient.)

Graphs without a tfps train op (evaluation, prediction) feed the queues from a background
thread (a tf.compat.v1.train.QueueRunner) instead.
"""
import tensorflow as tf

from tfps.pipeline.replay import replay, depends_on
from tfps.process import without_autotune
from tfps.train.push import push_policy

MAX_DEPTH = 8
DEQUEUE_OPS = ("QueueDequeueV2", "QueueDequeueManyV2", "QueueDequeueUpToV2")


class _Stage:
    """One queue: the tensors `build(fresh, has_value, after)` makes from a fresh batch (of the
    given dtypes and shapes), and their dequeued counterparts for the main graph."""

    def __init__(self, name, build, depth, dtypes, shapes):
        self.name, self.build = name, build
        self.dtypes, self.shapes = list(dtypes), [tf.TensorShape(s) for s in shapes]
        # depth + 1: the lookahead enqueue never waits for the same step's dequeue.
        self.queue = tf.queue.FIFOQueue(depth + 1, self.dtypes, name=f"tfps_pipeline_{name}")
        self.dequeued = self.queue.dequeue(name=f"tfps_pipeline_{name}_staged")
        if not isinstance(self.dequeued, (list, tuple)):
            self.dequeued = [self.dequeued]
        for t, shape in zip(self.dequeued, self.shapes):
            t.set_shape(shape)


class Pipeline:
    """The iterator of a PipelineDataset: get_next() and initializer, as a tf.data iterator; and
    the stager (a tfps.embedding.Stager) of the lookups of a model built on get_next(), with the
    push policy `push` that carries that model's gradients.

    Args:
      dataset: the tf.data.Dataset of (features, labels) batches.
      depth: how many batches the lookups run ahead (1 .. MAX_DEPTH).
      fuse_dense: read and push the dense variables of each PS as one tensor (tfps.train.fused).
      defer_push: (with fuse_dense) push a step's gradients during the next step; None: decided
        by tfps.train.push.DeferIfRemote when the optimizer routes the gradients.
    """

    @staticmethod
    def check_depth(depth):
        if not isinstance(depth, int) or isinstance(depth, bool) or not 1 <= depth <= MAX_DEPTH:
            raise ValueError(f"pipeline depth must be an int in [1, {MAX_DEPTH}], got {depth!r}")

    def __init__(self, dataset, depth, fuse_dense=True, defer_push=None):
        self.check_depth(depth)
        self._first_step = None
        self.depth = depth
        self._spec = dataset.element_spec
        self._specs = tf.nest.flatten(self._spec, expand_composites=True)
        self._iterator = tf.compat.v1.data.make_initializable_iterator(without_autotune(dataset))
        self._stages = []
        self._lookahead = None
        self._lookahead_after = None
        self._initializer = None
        self._fresh = self._next_batch()
        self._batch = self._add_stage("batch", lambda fresh, has_value, after=None: list(fresh),
                                      [t.dtype for t in self._fresh[0]], [t.shape for t in self._fresh[0]])
        self._staged_names = {t.name for t in self._batch.dequeued}
        self.push = push_policy(fuse_dense, defer_push, depth, anchor=self._batch.dequeued[0].op)

    @property
    def defer_push(self):
        """Whether a step's gradients are pushed during the next step (the push policy's choice;
        for defer_push=None, made when the optimizer asks: tfps.train.push.DeferIfRemote)."""
        return self.push.defers

    # -- the iterator protocol tf.estimator uses --------------------------------------------
    @property
    def element_spec(self):
        return self._spec

    def get_next(self, name=None):
        """The staged batch (batch t of the step), structured as the dataset's elements."""
        del name
        return tf.nest.pack_sequence_as(self._spec, list(self._batch.dequeued), expand_composites=True)

    @property
    def initializer(self):
        """Initializes the dataset's iterator, then stages batches 0 .. depth - 1 (runs of the
        embedding graph, one after the other); with a deferred push, batches 0 .. depth, and
        computes batch 0's gradients. Without a lookahead op (no tfps train op) or in an evaluation,
        a QueueRunner feeds the queues instead."""
        if self._initializer is None:
            self._initializer = self._build_initializer()
        return self._initializer

    # -- the stager protocol tfps.embedding_lookup uses --------------------------------------
    def stage(self, ev, keys, insert, probe):
        """The probe of `keys` run `depth` batches ahead: (unique ids, inverse, offsets, rows) of
        the staged batch. None (probe in place) for serving lookups (insert=False) and for keys
        that do not come from the batch."""
        if not insert or not depends_on(keys, self._staged_names):
            return None
        staged = self._batch.dequeued
        index = len(self._stages)

        def build(fresh, has_value, after=None):
            next_keys, = replay([keys], dict(zip(staged, fresh)), name=f"tfps_pipeline_keys_{index}",
                                forbidden=DEQUEUE_OPS)
            # Past the end of the data the fresh batch is a placeholder: probe no keys.
            next_keys = next_keys[:tf.size(next_keys) * tf.cast(has_value, tf.int32)]
            uids, inverse, offsets, rows = probe(ev, next_keys, insert, after=after)
            return [uids, inverse, rows] + ([] if offsets is None else [offsets])
        sharded = ev.num_shards > 1
        # what probe() gives: unique ids, inverse (int32 below 2^31 keys), rows, and the offsets
        dtypes = [tf.int64, tf.int32, tf.float32] + [tf.int64] * sharded
        shapes = [[None], [None], [None, ev.dim]] + [[ev.num_shards + 1]] * sharded
        stage = self._add_stage(f"{ev.name.replace('/', '_')}_{index}", build, dtypes, shapes)
        uids, inverse, rows = stage.dequeued[:3]
        return uids, inverse, (stage.dequeued[3] if len(stage.dequeued) > 3 else None), rows

    def staged_batch(self):
        """The op that dequeues the step's staged batch."""
        return self._batch.dequeued[0].op

    def first_step(self, op):
        """With a deferred push: the op that computes a step's gradients and keeps them for the
        next step to push; the initializer runs it once on batch 0."""
        self._first_step = op

    def lookahead_op(self, after=None):
        """The embedding graph of this step's fresh batch: enqueues each stage's item (nothing
        past the end of the data, where it closes the queues instead). A train op runs it.

        after: None, or [(table handle tensor, update op)]: the step's pushes, each of which the
        probe of its table shard runs after. With a deferred push the update (the previous
        step's gradients) waits on nothing the step computes, so the probe of the batch `depth`
        ahead then reads every update before it, on the shard's own device (no message)."""
        ids = [(id(h), id(op)) for h, op in after or ()]
        if self._lookahead is not None:
            if ids and ids != self._lookahead_after:
                raise ValueError("tfps pipeline: a second optimizer's pushes cannot be ordered before the probes "
                                 "ahead (a deferred push): train the tables and dense variables with one optimizer")
            return self._lookahead
        self._lookahead_after = ids
        order = {}
        for handle, op in after or ():
            order.setdefault(handle.name, []).append(op.op if isinstance(op, tf.Tensor) else op)
        fresh, has_value = self._fresh
        # outside any control context the train op is built in: the embedding graph waits on
        # nothing of the step but the pushes it is ordered after
        with tf.control_dependencies(None):
            items = [s.build(fresh, has_value, order) for s in self._stages]
        enqueue = self._enqueue(items, has_value, "tfps_pipeline_lookahead",
                                fallback=[s.dequeued for s in self._stages])
        # Each step takes one item from every queue, used or not, so the queues stay aligned.
        self._lookahead = tf.group(enqueue, *self._dequeues(), name="tfps_pipeline_step")
        return self._lookahead

    # -- building ----------------------------------------------------------------------------
    def _dequeues(self):
        return [s.dequeued[0].op for s in self._stages]

    def _add_stage(self, name, build, dtypes, shapes):
        if self._lookahead is not None:
            raise ValueError("tfps pipeline: a training lookup was built after the optimizer's train op; with a "
                             "PipelineDataset, build every tfps.embedding_lookup before minimize()/apply_gradients()")
        stage = _Stage(name, build, self.depth, dtypes, shapes)
        self._stages.append(stage)
        return stage

    def _next_batch(self, optional=True):
        """(flat tensors of the next batch, has_value). Past the end of the data (optional=True)
        the tensors are a placeholder batch: zeros, 0 along each dimension the spec leaves open."""
        if not optional:
            return tf.nest.flatten(self._iterator.get_next(), expand_composites=True), tf.constant(True)
        nxt = self._iterator.get_next_as_optional()
        has_value = nxt.has_value()
        placeholder = [tf.zeros([0 if d is None else d for d in s.shape.as_list()], s.dtype) for s in self._specs]
        flat = tf.cond(has_value, lambda: tf.nest.flatten(nxt.get_value(), expand_composites=True),
                       lambda: placeholder)
        for t, s in zip(flat, self._specs):
            t.set_shape(s.shape)
        return flat, has_value

    def _enqueue(self, items, has_value, name, fallback=None):
        """Enqueues one item per stage; past the end of the data, closes the queues instead.

        With a deferred push the main graph must run once more after the last batch, so that
        its gradient is pushed: the first time the data is found exhausted, `fallback` (a real
        batch's items, already trained) is enqueued before the close; that extra step's own
        gradient is never pushed (the run after it stops at the empty queue before its push)."""
        closed = self._batch.queue.is_closed()
        if self.defer_push and fallback is not None:
            flat = tf.cond(has_value, lambda: [t for item in items for t in item],
                           lambda: [t for item in fallback for t in item])
            sizes = [len(item) for item in items]
            items = [flat[sum(sizes[:i]):sum(sizes[:i + 1])] for i in range(len(sizes))]
            for item, like in zip(items, fallback):
                for t, l in zip(item, like):
                    t.set_shape(l.shape)
            n = tf.cast(tf.logical_or(has_value, tf.logical_not(closed)), tf.int32)
        else:
            n = tf.cast(has_value, tf.int32)
        enqueues = [s.queue.enqueue_many([tf.expand_dims(t, 0)[:n] for t in item])
                    for s, item in zip(self._stages, items)]
        with tf.control_dependencies(enqueues):
            close = tf.cond(tf.logical_or(has_value, closed), tf.no_op,
                            lambda: tf.group(*[s.queue.close() for s in self._stages]))
        return tf.group(*enqueues, close, name=name)

    def _build_initializer(self):
        init = self._iterator.initializer
        evaluating = bool(tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.EVAL_STEP))
        if self._lookahead is None or evaluating:
            # No train op runs the embedding graph (none was built, or this is an evaluation,
            # which never runs it): a background thread does. Its threads start
            # before the iterator is initialized, so each of its runs first takes a token that
            # the initializer puts in a gate queue (and puts it back).
            gate = tf.queue.FIFOQueue(1, [tf.int32], name="tfps_pipeline_gate")
            token = gate.dequeue()
            with tf.control_dependencies([token]):
                fresh, has_value = self._next_batch(optional=False)
            items = [s.build(fresh, has_value) for s in self._stages]
            enqueues = [s.queue.enqueue([tf.identity(t) for t in item]) for s, item in zip(self._stages, items)]
            with tf.control_dependencies(enqueues):
                enqueue = gate.enqueue(token)
            close = tf.group(*[s.queue.close() for s in self._stages], gate.close(cancel_pending_enqueues=True))
            cancel = tf.group(*[s.queue.close(cancel_pending_enqueues=True) for s in self._stages],
                              gate.close(cancel_pending_enqueues=True))
            tf.compat.v1.train.add_queue_runner(tf.compat.v1.train.QueueRunner(
                self._batch.queue, [enqueue], close_op=close, cancel_op=cancel))
            with tf.control_dependencies([init]):
                return gate.enqueue(tf.constant(0, tf.int32))
        step, previous = init, None
        for i in range(self.depth + (self._first_step is not None)):
            with tf.control_dependencies([step]):
                fresh, has_value = self._next_batch()
                items = [s.build(fresh, has_value) for s in self._stages]
                step = self._enqueue(items, has_value, f"tfps_pipeline_prime_{i}", fallback=previous)
                # the fallback of the next priming step: the last batch that was there
                previous = items if previous is None else [
                    tf.cond(has_value, lambda it=it: list(it), lambda pr=pr: list(pr))
                    for it, pr in zip(items, previous)]
        if self._first_step is not None:
            # every stage dequeues its first item, whatever the gradients depend on
            step = tf.group(step, self._first_step, *self._dequeues())
        return step
