"""Model quality on MovieLens, same split and seeds for all:
  1. AUC, GAUC, logloss of WDL, DeepFM and DCN-v2 as configs/movielens_*.yaml train them;
  2. DeepFM on tfps tables vs the same DeepFM on one tf.Variable with a collision-free vocabulary
     (every id of the data set its own row), both with Adagrad: the table optimizer and TF's sparse
     Adagrad are the same algorithm, so the two AUCs must agree within 0.002. (With Adam they would
     not be the same algorithm: tfps tables are lazy, TF's sparse Adam decays every row's moments.)
Each figure is the mean over --repeats runs (data.seed and the graph seed = the repeat), ± the
standard deviation.
"""
import argparse
import dataclasses
import json
import os
import sys
import tempfile

import numpy as np
import tensorflow as tf

sys.path.insert(0, os.path.dirname(__file__))
import common  # noqa: E402,F401  (quiet TF logs)

tf.compat.v1.disable_eager_execution()
from tfps.config import load_config  # noqa: E402
from tfps.data import movielens  # noqa: E402
from tfps.data.schema import Schema  # noqa: E402
from tfps.data.sources import make_source  # noqa: E402
from tfps.embedding.lookup import combine_padded  # noqa: E402
from tfps.models.zoo import model_fn as zoo_model_fn  # noqa: E402
from tfps.runner.graph import RunSettings  # noqa: E402
from tfps.runner.job import final_metrics, params_of, runner_evaluation  # noqa: E402
from tfps.runner.training import train  # noqa: E402
from tfps.models.common import dense_input, model_spec, padded_to_sparse  # noqa: E402
from tfps.models.deepfm import deepfm  # noqa: E402

CONFIGS = {"wdl": "configs/movielens_wdl.yaml", "deepfm": "configs/movielens_deepfm.yaml",
           "dcn_v2": "configs/movielens_dcn.yaml"}


def vocabularies(cfg):
    """Sorted distinct ids of each id feature and each list feature over both splits."""
    with tf.Graph().as_default(), tf.compat.v1.Session() as s:
        splits = [s.run(movielens.load(cfg.data.path, split, cfg.data.eval_fraction)) for split in ("train", "eval")]
    ids = np.concatenate([p["ids"] for p in splits])
    genres = np.concatenate([p["genres"].flat_values for p in splits])
    return [np.unique(ids[:, i]) for i in range(ids.shape[1])] + [np.unique(genres)]


def variable_model_fn(vocab):
    """DeepFM whose rows come from one tf.Variable [sum of vocabulary sizes, dim + 1]."""
    offsets = np.cumsum([0] + [len(v) for v in vocab])

    def index(i, ids):
        return tf.searchsorted(tf.constant(vocab[i]), ids) + offsets[i]

    def fn(features, labels, mode, params):
        m, schema = params["model"], Schema.from_params(params["schema"])
        table = tf.compat.v1.get_variable("embeddings", [int(offsets[-1]), m["embedding_dim"] + 1],
                                          initializer=tf.compat.v1.truncated_normal_initializer(
                                              stddev=m["initializer_stddev"]))
        cols = [tf.nn.embedding_lookup(table, index(i, features["ids"][:, i])) for i in range(len(schema.id_features))]
        for j, name in enumerate(schema.list_features):
            sp = padded_to_sparse(features[name])
            rows = tf.nn.embedding_lookup(table, index(len(schema.id_features) + j, sp.values))
            cols.append(combine_padded(rows, sp, None, "mean"))
        logits = deepfm(tf.stack(cols, 1), dense_input(features, schema), m)
        return model_spec(mode, logits, labels, features, schema, params["train"])
    return fn


def train_and_evaluate(cfg, seed, vocab=None):
    cfg = dataclasses.replace(cfg, model_dir=tempfile.mkdtemp(prefix="tfps_quality_"),
                              data=dataclasses.replace(cfg.data, seed=seed))
    source = make_source(cfg)
    fn = zoo_model_fn if vocab is None else variable_model_fn(vocab)
    settings = RunSettings(model_dir=cfg.model_dir, seed=seed, save_checkpoints_steps=cfg.train.steps,
                           save_summary_steps=cfg.train.steps)
    train(fn, params_of(cfg), source.train_input_fn(cfg.train.batch_size), settings, max_steps=cfg.train.steps,
          printer=lambda *a, **k: None)
    return final_metrics(cfg, source, printer=lambda *a, **k: None, evaluation=runner_evaluation(cfg, fn))


def summary(runs):
    return {k: (round(float(np.mean([r[k] for r in runs])), 4), round(float(np.std([r[k] for r in runs])), 4))
            for k in ("auc", "gauc", "logloss")}


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data", default="../shared/data/movielens-small", help="a MovieLens directory")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--only-comparison", action="store_true", help="skip the three models' figures")
    parser.add_argument("--set", action="append", default=[], help="config overrides of the comparison")
    args = parser.parse_args()
    results = {}
    for name, path in ({} if args.only_comparison else CONFIGS).items():
        cfg = load_config(path, [f"data.path={args.data}"])
        results[name] = summary([train_and_evaluate(cfg, seed) for seed in range(1, args.repeats + 1)])
        print(f"{name:7s} " + "  ".join(f"{k} {m:.4f} ± {s:.4f}" for k, (m, s) in results[name].items()), flush=True)
    cfg = load_config(CONFIGS["deepfm"], [f"data.path={args.data}", "train.optimizer=adagrad",
                                          "train.learning_rate=1.0"] + args.set)
    vocab = vocabularies(cfg)
    pairs = [(train_and_evaluate(cfg, seed), train_and_evaluate(cfg, seed, vocab))
             for seed in range(1, args.repeats + 1)]
    tables, variable = summary([p[0] for p in pairs]), summary([p[1] for p in pairs])
    gap = tables["auc"][0] - variable["auc"][0]
    print(f"DeepFM, Adagrad: tfps tables AUC {tables['auc'][0]:.4f} ± {tables['auc'][1]:.4f}, tf.Variable "
          f"({sum(len(v) for v in vocab)} rows, collision-free) AUC {variable['auc'][0]:.4f} ± "
          f"{variable['auc'][1]:.4f}: difference {gap:+.4f} (must be within 0.002)", flush=True)
    print(json.dumps({"models": results, "deepfm_tables": tables, "deepfm_variable": variable,
                      "auc_difference": round(gap, 4), "repeats": args.repeats}), flush=True)
    return 0 if abs(gap) <= 0.002 else 1


if __name__ == "__main__":
    sys.exit(main())
