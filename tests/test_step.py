"""tfps.TrainingStep: a step's lookups, stager and push policy as one object handed from the
lookups to the optimizer; mixing it with the graph's own is refused, never silently untrained."""
import numpy as np
import pytest
import tensorflow as tf

import tfps
from tfps.embedding.model_graph import ModelGraph, TrainingStep


def _train(explicit, steps=5):
    """Table rows and dense weight after `steps` Adagrad steps, the step passed or the graph's."""
    with tf.Graph().as_default():
        step = TrainingStep() if explicit else None
        ev = tfps.get_embedding_variable("e", 4, initializer=tf.compat.v1.constant_initializer(0.1))
        w = tf.compat.v1.get_variable("w", [4, 1], initializer=tf.compat.v1.constant_initializer(0.5))
        ids = tf.constant([1, 2, 2, 7], tf.int64)
        loss = tf.reduce_sum(tf.square(tf.matmul(tfps.embedding_lookup(ev, ids, step=step), w) - 1.0))
        train_op = tfps.train.AdagradOptimizer(0.1).minimize(loss, step=step)
        if explicit:   # nothing went through the graph's own step
            assert not TrainingStep.of().lookups and len(step.lookups) == 1
        # Every op made before the session runs: one made after can change an op the session ran
        # (a control dependency on a table's initializer).
        from tensorflow.python.ops import resources
        init = [tf.compat.v1.global_variables_initializer(), tf.compat.v1.tables_initializer(),
                resources.initialize_resources(resources.shared_resources())]
        export = ev.export()
        with tf.compat.v1.Session() as s:
            s.run(init)
            for _ in range(steps):
                s.run(train_op)
            exported = s.run(export)
            order = np.argsort(exported["keys"])
            return exported["values"][order], s.run(w)


def test_an_explicit_step_trains_exactly_as_the_graphs_own():
    rows, w = _train(explicit=True)
    want_rows, want_w = _train(explicit=False)
    assert rows.shape == (3, 4) and not np.allclose(rows, 0.1)   # trained
    np.testing.assert_array_equal(rows, want_rows)
    np.testing.assert_array_equal(w, want_w)


def test_lookups_in_one_step_and_an_optimizer_on_another_is_an_error(graph):
    ev = tfps.get_embedding_variable("e", 4)
    loss = tf.reduce_sum(tfps.embedding_lookup(ev, tf.constant([1, 2], tf.int64)))   # the graph's own step
    with pytest.raises(ValueError, match="went into the graph's own TrainingStep"):
        tfps.train.AdagradOptimizer(0.1).minimize(loss, step=TrainingStep())


def test_a_pipelined_graph_refuses_a_step_of_its_own(graph):
    ds = tf.data.Dataset.from_tensors(({"ids": tf.constant([1, 2], tf.int64)}, tf.constant([1.0]))).repeat()
    pipeline = tfps.pipeline.PipelineDataset(ds).pipeline()
    ModelGraph.of().step.use(pipeline, pipeline.push)   # what tfps.runner does with an input_fn's PipelineDataset
    features, _ = pipeline.get_next()
    ev = tfps.get_embedding_variable("e", 4)
    w = tf.compat.v1.get_variable("w", [4, 1])
    loss = tf.reduce_sum(tf.matmul(tfps.embedding_lookup(ev, features["ids"]), w))
    with pytest.raises(ValueError, match="defer_push=None is decided when the optimizer routes"):
        pipeline.defer_push   # DeferIfRemote: not decided before the variables exist
    with pytest.raises(ValueError, match="reads a tfps PipelineDataset"):
        tfps.train.AdagradOptimizer(0.1).minimize(loss, step=TrainingStep())
    tfps.train.AdagradOptimizer(0.1).minimize(loss)   # the graph's own: fine
    assert pipeline.defer_push is False   # one process: w has no PS copy, nothing to defer
