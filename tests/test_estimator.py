"""tf.estimator checkpoints hold the tables; a restored model predicts what the trained one did."""
import dataclasses

import numpy as np
import pytest
import tensorflow as tf

import tfps
from tfps.config import load_config
from tfps.embedding.merged import Feature
from tfps.embedding import layout
from tfps.models.deepfm import deepfm_logits
from tfps.data import SyntheticCriteo
from tfps.data.sources import eval_set, train_input_fn

pytestmark = pytest.mark.estimator


def test_estimator_checkpoint_restores_tables(tmp_path):
    cfg = load_config("configs/demo.yaml", ["train.steps=30", "train.batch_size=128", "model.hidden_units=[16]",
                                            "data.vocab_max=2000", f"model_dir={tmp_path}"])
    from tfps.estimator.runner import make_estimator
    gen = SyntheticCriteo(cfg.data)
    est = make_estimator(cfg)
    est.train(train_input_fn(gen, cfg.train.batch_size), max_steps=cfg.train.steps)
    ckpt = tf.train.latest_checkpoint(str(tmp_path))
    names = layout.table_names(dict(tf.train.list_variables(ckpt)))
    assert len(names) == 1 and names[0].startswith("tfps_merged/")  # 26 features, one merged table
    keys = layout.read_table(tf.train.load_checkpoint(ckpt), names[0], ("keys",))["keys"]
    batches_ids = np.concatenate([gen.batch(i, cfg.train.batch_size)[1] for i in range(cfg.train.steps)])
    # Every (feature, id) seen in training has a row in the checkpoint, under the feature's tag.
    tags = keys >> 48
    for f in range(26):
        tag = Feature(f"C{f + 1}", 9).tag
        np.testing.assert_array_equal(np.sort(keys[tags == tag] & ((1 << 48) - 1)), np.unique(batches_ids[:, f]))
    features, _, _ = eval_set(gen, 512, 256)

    def predict(estimator):
        out = estimator.predict(lambda: tf.data.Dataset.from_tensor_slices(features).batch(256),
                                yield_single_examples=False)
        return np.concatenate([p["probabilities"] for p in out])
    first = predict(est)
    again = predict(make_estimator(dataclasses.replace(cfg)))  # a new Estimator restores the checkpoint
    np.testing.assert_array_equal(first, again)
    # Oracle: the same model filled from the checkpoint's tensors read as numpy, without Saver.
    ckpt = est.latest_checkpoint()
    with tf.Graph().as_default():
        logits = deepfm_logits({k: tf.constant(v) for k, v in features.items()}, 26, cfg.model.embedding_dim,
                               cfg.model.hidden_units, insert=False)
        with tf.compat.v1.Session() as s:
            for v in tf.compat.v1.global_variables():
                s.run(v.assign(tf.train.load_variable(ckpt, v.op.name)))
            for ev in tfps.embedding_variables():
                s.run(ev.load(layout.read_table(tf.train.load_checkpoint(ckpt), ev.name)))
            manual = s.run(tf.sigmoid(logits))
    np.testing.assert_allclose(first, manual, rtol=1e-5, atol=1e-6)
    assert first.std() > 0
