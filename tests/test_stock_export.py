"""`tfps export --format stock` of DeepFM, WDL, DCN-v2 (TFRecords of Examples with string keys
and a list feature) and MTGR (MovieLens sequences), each trained for a few steps: loaded in a
fresh interpreter that never imports tfps (tests/stock_check.py), every op in TensorFlow's own
registry, its Predict, Classify and Regress outputs on held-out rows -- ids and strings never
seen in training among them -- equal to the tfps-format export's (<= 1e-6). The cluster-trained
model's stock export is checked in test_launch. Also: saved_model.pb does not grow with the
rows, and the warm-up file holds requests the export answers."""
import json
import os

import numpy as np
import pytest
import tensorflow as tf

import ml_tiny
from stock_check import run_signatures
from stock_compare import assert_same_scores

pytestmark = [pytest.mark.slow, pytest.mark.compat, pytest.mark.xdist_group("stock_export")]

SPECS = [{"name": "dense", "type": "float", "length": 2}, {"name": "user", "type": "int"},
         {"name": "country", "type": "string"}, {"name": "tags", "type": "int_list"}]
COUNTRIES = [f"c{i}" for i in range(40)]


def _example(rng, country=None, user=None):
    user = int(rng.integers(0, 300)) if user is None else user
    country = COUNTRIES[int(rng.integers(0, len(COUNTRIES)))] if country is None else country
    tags = rng.integers(0, 50, int(rng.integers(0, 4))).tolist()
    dense = rng.standard_normal(2).astype(np.float32)
    label = float((user % 3 == 0) ^ (country in COUNTRIES[:10]) ^ (dense[0] > 1))
    f = tf.train.Feature
    return tf.train.Example(features=tf.train.Features(feature={
        "dense": f(float_list=tf.train.FloatList(value=dense)), "user": f(int64_list=tf.train.Int64List(value=[user])),
        "country": f(bytes_list=tf.train.BytesList(value=[country.encode()])),
        "tags": f(int64_list=tf.train.Int64List(value=tags)), "label": f(float_list=tf.train.FloatList(value=[label]))}))


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """TFRecords of Examples (a string feature, a list feature) and a MovieLens directory."""
    d = tmp_path_factory.mktemp("stock_data")
    rng = np.random.default_rng(3)
    for split, n in (("train", 3000), ("eval", 64)):
        os.makedirs(d / split)
        with tf.io.TFRecordWriter(str(d / split / "part-0.tfrecord")) as w:
            for _ in range(n):
                w.write(_example(rng).SerializeToString())
    ml = d / "ml"
    ml.mkdir()
    ml_tiny.write_larger(ml)
    return d


def _sets(data, model, tmp_path):
    common = [f"model_dir={tmp_path / 'model'}", "train.batch_size=64", "train.steps=40", "eval.examples=null",
              "train.log_every_steps=1000"]
    if model == "mtgr":
        return ["--config", "configs/movielens_mtgr.yaml"] + [x for s in common + [
            f"data.path={data / 'ml'}", "data.history_len=8", "data.realtime_len=4", "model.blocks=1",
            "train.steps=20", "train.batch_size=16"] for x in ("--set", s)]
    return [x for s in common + [
        f"model.name={model}", "data.format=tfrecord", f"data.path={data / 'train'}", f"data.eval_path={data / 'eval'}",
        f"data.features={json.dumps(SPECS)}", "model.hidden_units=[16]", "model.embedding_dim=4"] for x in ("--set", s)]


def _exports(cli, sets, tmp_path):
    code, _, err = cli("train", *sets)
    assert code == 0, err[-3000:]
    paths = {}
    for fmt in ("tfps", "stock"):
        code, out, err = cli("export", *sets, "--format", fmt, "--export-dir", str(tmp_path / fmt))
        assert code == 0, err[-3000:]
        paths[fmt] = json.loads(out.strip().splitlines()[-1])["saved_model"]
    return paths


def _held_out(sets):
    """The first 16 eval rows as `serving_default` inputs (tfps.runner.job.warmup_requests)."""
    from tfps.config import load_config
    from tfps.runner.job import warmup_requests
    args = dict(zip(sets[::2], sets[1::2]))
    cfg = load_config(args.get("--config"), [v for k, v in zip(sets[::2], sets[1::2]) if k == "--set"])
    return warmup_requests(cfg, (16,))[0]


@pytest.mark.parametrize("model", ["deepfm", "wdl", "dcn_v2"])
def test_stock_export_scores_examples_and_rows_as_the_tfps_export(data, model, cli, tmp_path):
    sets = _sets(data, model, tmp_path)
    paths = _exports(cli, sets, tmp_path)
    rows = _held_out(sets)
    rows["ids"][:4] = np.arange(4 * rows["ids"].shape[1]).reshape(4, -1) + 2**45   # ids never seen
    rows["ids"][4, 0] = -7                                                          # mixed into 48 bits
    rng = np.random.default_rng(9)
    held_out = [r for _, r in zip(range(24), tf.compat.v1.io.tf_record_iterator(str(data / "eval" / "part-0.tfrecord")))]
    unseen = [_example(rng, country=f"never-seen-{i}", user=10**6 + i).SerializeToString() for i in range(4)]
    rows["examples"] = np.array(held_out + unseen, dtype=object)
    assert_same_scores(paths["tfps"], paths["stock"], rows, tmp_path,
                       signatures=("serving_default", "classification", "regression"))
    _check_files(paths)


def _check_files(paths):
    """The stock export's graph holds no constant as large as a table (the rows are in
    variables/), and its warm-up requests are answered as the tfps export answers them."""
    from tensorflow.core.protobuf import saved_model_pb2
    from tensorflow_serving.apis import prediction_log_pb2
    stock_path = paths["stock"]
    saved = saved_model_pb2.SavedModel()
    with open(os.path.join(stock_path, "saved_model.pb"), "rb") as f:
        saved.ParseFromString(f.read())
    variables = os.path.join(stock_path, "variables", "variables")
    rows = min(s[0] for n, s in tf.train.list_variables(variables) if n.endswith("/stock_keys"))
    consts = [tf.make_ndarray(n.attr["value"].tensor).size for n in saved.meta_graphs[0].graph_def.node
              if n.op == "Const"]
    assert rows > 100 and max(consts) < rows, (rows, max(consts))
    records = list(tf.compat.v1.io.tf_record_iterator(os.path.join(stock_path, "assets.extra",
                                                                   "tf_serving_warmup_requests")))
    assert len(records) >= 2
    for record in records:
        request = prediction_log_pb2.PredictionLog.FromString(record).predict_log.request
        inputs = {k: tf.make_ndarray(v) for k, v in request.inputs.items()}
        _, got = run_signatures(stock_path, inputs)
        _, want = run_signatures(paths["tfps"], inputs)
        np.testing.assert_allclose(got["serving_default"]["probabilities"], want["serving_default"]["probabilities"],
                                   rtol=0, atol=1e-6)
        assert len(got["serving_default"]["probabilities"]) == len(next(iter(inputs.values())))


def test_stock_export_of_mtgr_scores_as_the_tfps_export(data, cli, tmp_path):
    sets = _sets(data, "mtgr", tmp_path)
    paths = _exports(cli, sets, tmp_path)
    rows = _held_out(sets)
    rows["candidate_movie"][:2] = 10**9 + np.arange(2)[:, None]   # movies never seen
    assert_same_scores(paths["tfps"], paths["stock"], rows, tmp_path)
