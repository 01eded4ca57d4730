"""tfps.ModelGraph: what a model graph holds, handed down explicitly (as tfps.runner does) or found
as the graph's own (a graph written with today's API, passing nothing); both ways are one object
and train alike. Oracle: the implicit way's trained rows, dense weights and model description."""
import numpy as np
import pytest
import tensorflow as tf
from tensorflow.python.ops import resources

import tfps
from tfps.embedding.model_graph import ModelGraph
from tfps.state import manifest as manifests


def _train(explicit, steps=4):
    """(rows, w, description, the graph's ModelGraph holds what was built) after Adagrad steps."""
    with tf.Graph().as_default():
        mg = ModelGraph.new() if explicit else None
        kw = {"model_graph": mg} if explicit else {}
        ev = tfps.get_embedding_variable("e", 4, initializer=tf.compat.v1.constant_initializer(0.1), **kw)
        w = tf.compat.v1.get_variable("w", [4, 1], initializer=tf.compat.v1.constant_initializer(0.5))
        ids = tf.constant([1, 2, 2, 7], tf.int64)
        rows = tfps.embedding_lookup(ev, ids, step=mg.step if explicit else None)
        loss = tf.reduce_sum(tf.square(tf.matmul(rows, w) - 1.0))
        train_op = tfps.train.AdagradOptimizer(0.1).minimize(loss, step=mg.step if explicit else None)
        own = ModelGraph.of()
        held = (own.tables == {"e": ev} and [r.variable for r in own.step.lookups] == [ev]
                and len(own.optimizers) == 1 and (mg is None or mg is own))
        description = manifests.describe()
        with tf.compat.v1.Session() as s:
            s.run([tf.compat.v1.global_variables_initializer(),
                   resources.initialize_resources(resources.shared_resources())])
            for _ in range(steps):
                s.run(train_op)
            exported = s.run(ev.export())
            order = np.argsort(exported["keys"])
            return exported["values"][order], s.run(w), description, held


def test_handed_down_and_implicit_model_graphs_are_one_object_and_train_alike():
    rows, w, description, held = _train(explicit=True)
    want_rows, want_w, want_description, want_held = _train(explicit=False)
    assert held and want_held
    assert rows.shape == (3, 4) and not np.allclose(rows, 0.1)   # trained
    np.testing.assert_array_equal(rows, want_rows)
    np.testing.assert_array_equal(w, want_w)
    assert description == want_description and list(description["tables"]) == ["e"]
    assert description["optimizer"] and "AdagradOptimizer" in description["optimizer"][0]


def test_a_second_model_in_one_graph_is_refused(graph):
    tfps.get_embedding_variable("e", 4)
    with pytest.raises(ValueError, match="already holds a model"):
        ModelGraph.new()


def test_the_runner_hands_its_model_graph_to_a_model_fn_that_takes_one(tmp_path):
    """tfps.runner makes the graph's ModelGraph and passes it as model_fn(..., model_graph=);
    the tables a model makes through it are the ones the saved state describes."""
    import tfps.runner
    received = []

    def model_fn(features, labels, mode, params, model_graph):
        received.append((model_graph, model_graph is ModelGraph.of()))
        ev = tfps.get_embedding_variable("e", 2, model_graph=model_graph)
        rows = tfps.embedding_lookup(ev, features, step=model_graph.step)
        loss = tf.reduce_sum(rows) + 0.0 * tf.reduce_sum(labels)
        train_op = tfps.train.GradientDescentOptimizer(0.1).minimize(
            loss, global_step=tf.compat.v1.train.get_global_step(), step=model_graph.step)
        return tfps.runner.ModelSpec(mode, loss=loss, train_op=train_op, examples=tf.size(labels))

    def input_fn():
        return tf.data.Dataset.from_tensor_slices((np.arange(6, dtype=np.int64), np.ones(6, np.float32))).batch(2)
    settings = tfps.runner.RunSettings(str(tmp_path), save_checkpoints_steps=100)
    tfps.runner.train(model_fn, {}, input_fn, settings, max_steps=10, printer=lambda *a, **k: None)
    (mg, is_the_graphs), = received
    assert isinstance(mg, ModelGraph) and is_the_graphs
    assert list(mg.tables) == ["e"] and mg.examples is not None and len(mg.step.lookups) == 1
    ckpt = tf.train.latest_checkpoint(str(tmp_path))
    saved = manifests.read(ckpt)
    assert list(saved["model"]["tables"]) == ["e"]
