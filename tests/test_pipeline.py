"""tfps.pipeline: lookups run `depth` batches ahead, staged in queues, on tfps's runner (and, on
TensorFlow 2.15, through a tf.estimator.Estimator of one's own).

Oracle: a counting table. Each id's row gets gradient -1 per occurrence (SGD, lr 1), so a row's
first column is the number of updates it received: it must end equal to the id's occurrences in
the batches trained (each gradient applied exactly once), and when batch t trains, each row it
reads must already hold the updates of every batch before t - depth (with defer_push, exactly those)."""
import numpy as np
import pytest
import tensorflow as tf

import tfps
from tfps.embedding import layout

BATCH, IDS, DIM = 64, 40, 2


def _batches(n, seed=0):
    rng = np.random.default_rng(seed)
    # distinct ids within a batch (one gradient per id and step), a few hundred ids overall
    return [rng.choice(IDS * 8, size=BATCH, replace=False).astype(np.int64) for _ in range(n)]


class _Seen(tf.compat.v1.train.SessionRunHook):
    """Records (global step, ids, rows read) of every training step."""

    def __init__(self, ids, rows):
        self._ids, self._rows, self.steps = ids, rows, []

    def before_run(self, run_context):
        return tf.compat.v1.train.SessionRunArgs([tf.compat.v1.train.get_global_step(), self._ids, self._rows])

    def after_run(self, run_context, run_values):
        self.steps.append(run_values.results)


class _Run:
    """A model_fn on tfps's runner in model_dir, used as the tests used an Estimator: train to the
    input's end (or max_steps), evaluate, the latest checkpoint and its values."""

    def __init__(self, model_fn, model_dir):
        import tfps.runner
        self._runner = tfps.runner
        self._model_fn = lambda features, labels, mode, params: model_fn(features, labels, mode)
        self._settings = tfps.runner.RunSettings(str(model_dir), save_checkpoints_secs=600)   # and at the end

    def train(self, input_fn, max_steps=10**9):
        self._runner.train(self._model_fn, {}, input_fn, self._settings, max_steps, printer=lambda *a, **k: None)

    def evaluate(self, input_fn):
        return self._runner.evaluate(self._model_fn, {}, input_fn, self._settings)

    def latest_checkpoint(self):
        return tf.train.latest_checkpoint(self._settings.model_dir)

    def get_variable_value(self, name):
        return tf.train.load_variable(self.latest_checkpoint(), name)


def _model_fn(seen):
    def model_fn(features, labels, mode):
        ev = tfps.get_embedding_variable("counts", DIM, initializer=tf.compat.v1.zeros_initializer())
        rows = tfps.embedding_lookup(ev, features["ids"])
        loss = -tf.reduce_sum(rows[:, 0]) + 0.0 * tf.reduce_sum(labels)
        gs = tf.compat.v1.train.get_or_create_global_step()
        train_op = tfps.train.GradientDescentOptimizer(1.0).minimize(loss, global_step=gs)
        hook = _Seen(features["ids"], rows)
        seen.append(hook)
        return tfps.runner.ModelSpec(mode, loss=loss, train_op=train_op, training_hooks=(hook,))
    return model_fn


def _input(batches, depth, defer, start=0, repeat=False):
    def input_fn():
        data = np.stack(batches[start:])
        ds = tf.data.Dataset.from_tensor_slices(({"ids": data}, np.zeros(len(data), np.float32)))
        ds = ds.repeat() if repeat else ds
        return tfps.data.PipelineDataset(ds, depth=depth, defer_push=defer)
    return input_fn


def _counts(est, part="values"):
    """{key: the first column of its row} of the latest checkpoint, or {key: its last_step}."""
    ckpt = est.latest_checkpoint()
    reader = tf.train.load_checkpoint(ckpt)
    tables = [n for n in layout.table_names(reader.get_variable_to_shape_map()) if n.startswith("counts")]
    assert len(tables) == 1, reader.get_variable_to_shape_map()
    rows = layout.read_table(reader, tables[0], ("keys", part))
    got = rows[part]
    return dict(zip(rows["keys"].tolist(), (got[:, 0] if got.ndim == 2 else got).tolist()))


@pytest.mark.parametrize("depth,defer", [(1, False), (2, False), (1, True), (3, True), (5, True), (8, True)])
def test_every_gradient_is_applied_once_and_rows_are_at_most_depth_steps_old(tmp_path, depth, defer):
    seen = []
    _check_every_gradient_once(_Run(_model_fn(seen), tmp_path), seen, depth, defer)


@pytest.mark.estimator
def test_an_estimator_of_ones_own_trains_through_the_pipeline(tmp_path):
    """The same checks with a tf.estimator.Estimator (the model_fn through tfps.estimator's adapter)."""
    from tfps.estimator import estimator_model_fn, pipelined_input_fn
    seen = []
    model_fn = _model_fn(seen)
    est = tf.estimator.Estimator(estimator_model_fn(lambda features, labels, mode, params: model_fn(
        features, labels, mode)), model_dir=str(tmp_path))
    train = est.train
    est.train = lambda input_fn, *a, **k: train(pipelined_input_fn(input_fn), *a, **k)
    _check_every_gradient_once(est, seen, 3, True)


def _check_every_gradient_once(est, seen, depth, defer):
    batches = _batches(12)
    est.train(_input(batches, depth, defer))          # a finite input: trains to its end
    assert est.get_variable_value("global_step") == len(batches)
    occurrences = {}
    for b in batches:
        for x in b.tolist():
            occurrences[x] = occurrences.get(x, 0) + 1
    assert _counts(est) == {x: float(c) for x, c in occurrences.items()}
    # Each row is stamped with the global step of the run that applied its last update: batch t
    # is pushed in the run that starts at global step t (with defer_push too, one run after the
    # one that computed it, and the initializer's batch 0 in the first run).
    last = {x: t for t, b in enumerate(batches) for x in b.tolist()}
    assert _counts(est, "last_step") == last
    # With defer_push a step's probes of the batch `depth` ahead run after that step's push
    # (the previous batch's gradients), so a row holds exactly the batches before t - depth.
    bound = depth
    # With defer_push the session's first gradient (batch 0's) is computed when the session
    # starts, and one more step runs after the last batch (a repeat, never pushed).
    first = 1 if defer else 0
    steps = seen[-1].steps
    assert len(steps) == len(batches) - first + (1 if defer else 0)
    for t, (_, ids, rows) in enumerate(steps[:len(batches) - first], start=first):
        assert ids.tolist() == batches[t].tolist()
        for x, row in zip(ids.tolist(), rows[:, 0].tolist()):
            before = sum(x in b for b in batches[:t])
            at_least = sum(x in b for b in batches[:max(t - bound, 0)])
            assert at_least <= row <= (at_least if defer else before), (t, x, row, at_least, before)


def test_a_checkpoint_taken_mid_pipeline_resumes_at_the_next_batch(tmp_path):
    batches = _batches(20, seed=1)
    seen = []
    est = _Run(_model_fn(seen), tmp_path)
    est.train(_input(batches, 2, True, repeat=True), max_steps=7)   # batches 7..9 staged, 7's gradient computed
    step = int(est.get_variable_value("global_step"))
    assert step == 7
    est.train(_input(batches, 2, True, start=step, repeat=True), max_steps=15)
    occurrences = {}
    for b in batches[:15]:
        for x in b.tolist():
            occurrences[x] = occurrences.get(x, 0) + 1
    counts = _counts(est)
    assert {x: c for x, c in counts.items() if c} == {x: float(c) for x, c in occurrences.items()}
    # rows that never trained: new ids of the batches looked up ahead (15, 16 and 17)
    ahead = set(np.concatenate(batches[15:18]).tolist())
    assert {x for x, c in counts.items() if not c} <= ahead


def test_evaluation_reads_a_pipeline_dataset_through_a_background_feeder(tmp_path):
    batches = _batches(6, seed=2)
    seen = []
    est = _Run(_model_fn(seen), tmp_path)
    est.train(_input(batches, 1, False))
    result = est.evaluate(_input(batches, 2, False))
    # the loss of each batch is -(sum of its rows' counts): the tables do not change in eval
    counts = _counts(est)
    expected = np.mean([-sum(counts[x] for x in b.tolist()) for b in batches])
    assert result["loss"] == pytest.approx(expected, rel=1e-6)


@pytest.mark.parametrize("on_ps", [False, True])
def test_defer_push_by_default_is_on_only_where_dense_variables_live_on_a_ps(on_ps):
    """defer_push=None: decided once the variables exist -- a step of dense staleness buys
    nothing in one process, where no push waits on a network."""
    with tf.Graph().as_default():
        ds = tf.data.Dataset.from_tensor_slices({"ids": np.zeros([4, 3], np.int64), "x": np.ones([4, 2], np.float32)})
        pipeline = tfps.data.PipelineDataset(ds.batch(2), depth=1).pipeline()
        tfps.ModelGraph.of().step.use(pipeline, pipeline.push)
        batch = pipeline.get_next()
        with pipeline.push.dense_scope():   # where get_variable gives worker copies (as tfps.runner builds)
            ev = tfps.get_embedding_variable("t", 2)
            with tf.compat.v1.device("/job:ps/task:0" if on_ps else None):
                w = tf.compat.v1.get_variable("w", [2, 1])
            loss = tf.reduce_sum(tfps.embedding_lookup(ev, batch["ids"])) + tf.reduce_sum(tf.matmul(batch["x"], w))
            tfps.train.AdagradOptimizer(0.1).minimize(loss,
                                                      global_step=tf.compat.v1.train.get_or_create_global_step())
        assert pipeline.defer_push is on_ps


def test_with_defer_push_a_dense_variable_is_exactly_one_step_stale(tmp_path):
    """A dense variable without a worker copy (one process) under defer_push: step k computes
    its gradient at w after the pushes of steps < k - 1, i.e. w_k = w_{k-1} - lr * g(w_{k-2}).
    Oracle: that recurrence in numpy. (Its reads used to race the deferred update.)"""
    rng = np.random.default_rng(3)
    scale = rng.uniform(0.5, 1.5, size=(12, BATCH)).astype(np.float32)
    batches, lr = _batches(12, seed=4), 0.05

    def model_fn(features, labels, mode):
        ev = tfps.get_embedding_variable("counts", DIM, initializer=tf.compat.v1.zeros_initializer())
        rows = tfps.embedding_lookup(ev, features["ids"])
        w = tf.compat.v1.get_variable("w", [], initializer=tf.compat.v1.constant_initializer(1.0))
        loss = 0.5 * w * w * tf.reduce_sum(features["x"]) + 0.0 * tf.reduce_sum(rows) + 0.0 * tf.reduce_sum(labels)
        train_op = tfps.train.GradientDescentOptimizer(lr).minimize(
            loss, global_step=tf.compat.v1.train.get_or_create_global_step())
        return tfps.runner.ModelSpec(mode, loss=loss, train_op=train_op)

    def input_fn():
        ds = tf.data.Dataset.from_tensor_slices(({"ids": np.stack(batches), "x": scale}, np.zeros(12, np.float32)))
        return tfps.data.PipelineDataset(ds, depth=1, defer_push=True)
    results = []
    for run in range(2):
        est = _Run(model_fn, tmp_path / str(run))
        est.train(input_fn)
        results.append(est.get_variable_value("w"))
    sums = scale.astype(np.float64).sum(1)
    w = [1.0, 1.0]                       # w^{-1} = w^0: batches 0 and 1 both see the initial value
    for k in range(12):
        w.append(w[-1] - lr * w[-2] * sums[k])
    np.testing.assert_allclose(results, [w[-1]] * 2, rtol=1e-5)
