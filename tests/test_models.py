"""The model zoo: a DCN-v2 cross layer against its formula, and every model (deepfm, wdl, dcn_v2)
learning on every reader (synthetic, criteo text, MovieLens, TFRecord)."""
import dataclasses

import numpy as np
import pytest
import tensorflow as tf

import ml_tiny
from tfps.config import load_config
from tfps.data.convert import convert
from tfps.data.sources import make_source
from tfps.models.common import split_rows
from tfps.models.spec import ModeKeys
from tfps.models.dcn import cross_layer
from tfps.models.zoo import model_fn


def test_a_cross_layer_equals_its_formula(graph):
    rng = np.random.default_rng(0)
    x0, x = rng.normal(size=(4, 6)).astype(np.float32), rng.normal(size=(4, 6)).astype(np.float32)
    out = cross_layer(tf.constant(x0), tf.constant(x), "cross")
    with tf.compat.v1.variable_scope("cross", reuse=True):
        w, b = tf.compat.v1.get_variable("kernel"), tf.compat.v1.get_variable("bias")
    with tf.compat.v1.Session() as s:
        s.run(tf.compat.v1.global_variables_initializer())
        s.run(b.assign(rng.normal(size=6).astype(np.float32)))
        got, w, b = s.run([out, w, b])
    np.testing.assert_allclose(got, x0 * (x @ w + b) + x, rtol=1e-5, atol=1e-6)


def test_split_rows_gives_the_slices_and_their_gradients(graph):
    # Oracle: the strided slices split_rows replaces, forward and backward.
    rng = np.random.default_rng(1)
    rows = tf.constant(rng.normal(size=(5, 3, 9)).astype(np.float32))
    v, w = split_rows(rows)
    sv, sw = rows[:, :, :8], rows[:, :, 8]

    def loss(a, b):
        return tf.reduce_sum(tf.square(a) * tf.range(1.0, 9.0)) + tf.reduce_sum(b * tf.range(1.0, 4.0))
    grads = tf.gradients(loss(v, w), rows)[0], tf.gradients(loss(sv, sw), rows)[0]
    with tf.compat.v1.Session() as s:
        got_v, got_w, want_v, want_w, got_g, want_g = s.run([v, w, sv, sw, *grads])
    assert got_v.shape == (5, 3, 8) and got_w.shape == (5, 3)
    for got, want in ((got_v, want_v), (got_w, want_w), (got_g, want_g)):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("name", ["deepfm", "wdl", "dcn_v2"])
def test_a_dense_kernel_too_large_is_refused_before_its_variable_is_made(graph, name):
    """The largest embedding_dim the tables allow, times 26 features, into a 400-unit MLP (or a
    DCN cross layer): 174 G values, refused by name (TF would fail to make it, or the process run
    out of memory) before any dense variable exists."""
    from tfps.config import ConfigError, MAX_DIM
    from tfps.data.sources import schema_of
    cfg = load_config("configs/demo.yaml", [f"model.name={name}", f"model.embedding_dim={MAX_DIM - 1}",
                                            "model.hidden_units=[400]"])
    features = {"dense": tf.zeros([2, 13]), "ids": tf.zeros([2, 26], tf.int64)}
    params = {"model": dataclasses.asdict(cfg.model), "train": dataclasses.asdict(cfg.train),
              "schema": schema_of(cfg).to_params()}
    with pytest.raises(ConfigError, match=r"dense variable \S+/kernel of shape \[436207603, (400|436207603)\]"):
        model_fn(features, tf.zeros([2]), ModeKeys.TRAIN, params)
    assert not [v for v in tf.compat.v1.global_variables() if v.shape.num_elements() > 1 << 30]
    with tf.Graph().as_default():   # the same model at dim 8 builds
        small = dataclasses.replace(cfg.model, embedding_dim=8)
        features = {"dense": tf.zeros([2, 13]), "ids": tf.zeros([2, 26], tf.int64)}
        model_fn(features, tf.zeros([2]), ModeKeys.TRAIN, {**params, "model": dataclasses.asdict(small)})


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """Overrides pointing a config at each reader's tiny data."""
    d = tmp_path_factory.mktemp("data")
    ml_tiny.write_criteo(d, "train.txt", 4096, "eval.txt.gz", 1024)
    ml = d / "ml"
    ml.mkdir()
    ml_tiny.write_larger(ml)
    convert("movielens", str(ml), str(d / "rec"), printer=None)
    return {"synthetic": ["eval.examples=1024"],
            "criteo": ["data.format=criteo", f"data.path={d / 'train.txt'}", f"data.eval_path={d / 'eval.txt.gz'}"],
            "movielens": ["data.format=movielens", f"data.path={ml}", "eval.examples=null"],
            "tfrecord": ["data.format=tfrecord", f"data.path={d / 'rec' / 'train'}", f"data.eval_path={d / 'rec' / 'eval'}"]}


def _learns(data, fmt, model, optimizer="adagrad", learning_rate=0.05):
    """30 steps on one batch of the reader lower the loss of that batch by 10%."""
    cfg = load_config(None, data[fmt] + [f"model.name={model}", "model.hidden_units=[32, 16]", "train.batch_size=256",
                                         "model.embedding_dim=8", f"train.learning_rate={learning_rate}",
                                         f"train.optimizer={optimizer}"])
    source = make_source(cfg)
    params = {"model": dataclasses.asdict(cfg.model), "train": dataclasses.asdict(cfg.train),
              "schema": source.schema.to_params()}
    with tf.Graph().as_default():
        tf.compat.v1.set_random_seed(0)
        features, labels = tf.compat.v1.data.make_one_shot_iterator(
            source.train_input_fn(256)().take(1).cache().repeat()).get_next()
        spec = model_fn(features, labels, ModeKeys.TRAIN, params)
        with tf.compat.v1.Session() as s:
            s.run(tf.compat.v1.global_variables_initializer())
            losses = [s.run([spec.train_op, spec.loss])[1] for _ in range(30)]
    assert losses[-1] < 0.9 * losses[0], losses


@pytest.mark.parametrize("fmt", ["synthetic", "criteo", "movielens", "tfrecord"])
@pytest.mark.parametrize("model", ["deepfm", "wdl", "dcn_v2"])
def test_every_model_learns_on_every_reader(data, fmt, model):
    _learns(data, fmt, model)


@pytest.mark.parametrize("optimizer,learning_rate", [("sgd", 0.5), ("adam", 0.01), ("ftrl", 0.1)])
def test_every_optimizer_trains_the_models(data, optimizer, learning_rate):
    _learns(data, "movielens", "deepfm", optimizer, learning_rate)
