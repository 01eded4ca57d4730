"""MTGR on MovieLens next to DeepFM and DCN-v2, same eval ratings (each user's last 20% by time):
AUC, GAUC, logloss. Each of the three is first tuned the same way (learning rate and steps, a
3 x 3 grid around its config) on a validation share that never reads the test ratings
(data.validation: each user's last 20% of the training ratings), then trained on the whole
training share and measured on the test share over 5 seeds. Then MTGR without Group-Layer Norm,
without the dynamic mask, without cross features, and at 1 and 4 blocks with its forward FLOPs
per sample, each with MTGR's tuned settings. Then token-budget vs fixed-count batches on
long-tailed lengths: the coefficient of variation of step time and tokens/s of the same MTGR
training step.

Usage: python benchmarks/bench_mtgr.py [--repeats N] [--tune-repeats N] [--no-tune] [--skip-quality] [--skip-batching]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from common import report  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MOVIELENS = os.path.join(ROOT, "..", "shared", "data", "movielens-small")   # ml-latest-small
COST_WIDTH = 64


def train(config, sets, seed):
    model_dir = tempfile.mkdtemp(prefix="tfps_bench_mtgr_")
    args = [sys.executable, "-m", "tfps.cli", "train", "--config", config, "--set", f"model_dir={model_dir}",
            "--set", f"data.seed={seed}", "--set", f"train.seed={seed}", "--set", f"data.path={MOVIELENS}"]
    for s in sets:
        args += ["--set", s]
    out = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=3600)
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
    flops = [line for line in out.stdout.splitlines() if line.startswith("MTGR forward:")]
    return json.loads(out.stdout.strip().splitlines()[-1]), (float(flops[0].split()[2]) if flops else None)


MODELS = {"DeepFM": "configs/movielens_deepfm.yaml", "DCN-v2": "configs/movielens_dcn.yaml",
          "MTGR": "configs/movielens_mtgr.yaml"}
VARIANTS = {"MTGR without GLN": ["model.gln=false"], "MTGR without dynamic mask": ["model.dynamic_mask=false"],
            "MTGR without cross features": ["model.cross_features=false"], "MTGR, 1 block": ["model.blocks=1"],
            "MTGR, 4 blocks": ["model.blocks=4"]}
GRID = [(lr, st) for lr in (0.5, 1.0, 2.0) for st in (0.5, 1.0, 2.0)]   # x the config's learning rate, steps


def training_share_ratio():
    """Training ratings of the test split over those of the validation split (each user keeps
    count - floor(eval_fraction count), then that again): the test run trains this much longer, so both
    see the data the same number of times."""
    ratings = np.loadtxt(os.path.join(MOVIELENS, "ratings.csv"),
                         delimiter=",", skiprows=1, usecols=0, dtype=np.int64)
    import yaml
    with open(os.path.join(ROOT, MODELS["MTGR"])) as f:
        fraction = yaml.safe_load(f)["data"]["eval_fraction"]   # every MovieLens config splits alike
    count = np.bincount(ratings)
    count = count[count > 0]
    rest = count - np.floor(fraction * count).astype(np.int64)
    return rest.sum() / (rest - np.floor(fraction * rest).astype(np.int64)).sum()


def tune(name, config, seeds):
    """The grid's best (learning rate, steps) for a model by mean GAUC on the validation share
    (data.validation: each user's test ratings are never read)."""
    import yaml
    with open(os.path.join(ROOT, config)) as f:
        train_cfg = yaml.safe_load(f)["train"]
    best = None
    for lr_x, steps_x in GRID:
        lr, steps = train_cfg["learning_rate"] * lr_x, int(train_cfg["steps"] * steps_x)
        gauc = np.mean([train(config, ["data.validation=true", f"train.learning_rate={lr}", f"train.steps={steps}"],
                              seed)[0]["gauc"] for seed in seeds])
        print(f"tune {name}: learning rate {lr:g}, {steps} steps: validation GAUC {gauc:.4f}", flush=True)
        if best is None or gauc > best[0]:
            best = (gauc, lr, steps)
    return best


def quality(repeats, tune_repeats, no_tune):
    """Each model tuned on the validation share (unless no_tune), then trained on the whole
    training share and measured on the test share over `repeats` seeds."""
    ratio = training_share_ratio()
    chosen, rows = {}, []
    for name, config in MODELS.items():
        if no_tune:
            chosen[name] = []
            continue
        gauc, lr, steps = tune(name, config, range(101, 101 + tune_repeats))
        chosen[name] = [f"train.learning_rate={lr}", f"train.steps={round(steps * ratio)}"]
        rows.append((f"{name}, tuned", f"learning rate {lr:g}, {steps} steps on validation (GAUC {gauc:.4f}); "
                                       f"{round(steps * ratio)} steps on the whole training share"))
        print(rows[-1][0] + ": " + rows[-1][1], flush=True)
    runs = {**{n: (c, chosen[n]) for n, c in MODELS.items()},
            **{n: (MODELS["MTGR"], chosen["MTGR"] + sets) for n, sets in VARIANTS.items()}}
    gaucs = {}
    for name, (config, sets) in runs.items():
        got = [train(config, sets, seed) for seed in range(1, repeats + 1)]
        m = {k: np.array([g[0][k] for g in got]) for k in ("auc", "gauc", "logloss")}
        gaucs[name] = m["gauc"]
        flops = got[0][1]
        rows.append((name, "  ".join(f"{k} {v.mean():.4f} ± {v.std():.4f}" for k, v in m.items())
                     + (f"  ({flops:.2f} MFLOPs/sample)" if flops else "")))
        print(f"{name}: {rows[-1][1]}", flush=True)
    for other in ("DeepFM", "DCN-v2"):
        d = gaucs["MTGR"] - gaucs[other]
        rows.append((f"MTGR - {other} GAUC, same seeds",
                     f"{d.mean():+.4f} ± {d.std(ddof=1) / np.sqrt(len(d)) if len(d) > 1 else 0:.4f} (standard error); "
                     f"higher in {int((d > 0).sum())} of {len(d)} seeds"))
        print(rows[-1][0] + ": " + rows[-1][1], flush=True)
    return rows


def batching(steps):
    """One MTGR training step timed on fixed-count and on token-budget batches of samples whose
    history lengths are log-normal up to 1024 (tokens per batch about the same on average)."""
    import tensorflow as tf
    tf.compat.v1.disable_eager_execution()
    from tfps.data.balance import balance_by_tokens
    from tfps.data.sequences import movielens_user_samples, sample_dataset, token_count, tokens
    from tfps.models.mtgr import mtgr_model_fn
    from tfps.models.spec import ModeKeys
    base = movielens_user_samples(MOVIELENS, "train",
                                  window=8, history_len=1024, realtime_len=16)
    rng = np.random.default_rng(0)
    samples = []
    for s in base:   # long-tailed history lengths: cut each user's history to a log-normal length
        n = int(min(np.exp(rng.normal(4.0, 1.3)), 1024))
        samples.append({**s, **{k: s[k][-n:] if n else s[k][:0] for k in ("history_movie", "history_rating",
                                                                          "history_time")}})
    lengths = np.array([token_count(s) for s in samples])
    mean_tokens = float(lengths.mean())
    fixed = 32
    budget = int(fixed * mean_tokens)

    def cost(x):   # tokens plus the attention's quadratic part (the blocks' L^2 work per sample)
        n = tokens(x)
        return n + n * n // COST_WIDTH
    costs = lengths + lengths ** 2 // COST_WIDTH
    cost_budget = int(max(fixed * costs.mean(), costs.max()))
    params = {"model": {"d_model": 32, "heads": 2, "blocks": 2, "gln": True, "dynamic_mask": True,
                        "cross_features": True, "embedding_dim": 16, "initializer_stddev": 0.02},
              "train": {"optimizer": "adam", "learning_rate": 0.001,
                        "adam": {"beta1": 0.9, "beta2": 0.999, "epsilon": 1e-8}}}
    out = {}
    for name, make in (("fixed count (32 samples)", lambda ds: ds.padded_batch(fixed)),
                       (f"token budget ({budget} tokens)", lambda ds: balance_by_tokens(ds, budget, tokens)),
                       (f"cost budget (L + L^2/{COST_WIDTH})", lambda ds: balance_by_tokens(ds, cost_budget, cost))):
        with tf.Graph().as_default():
            ds = make(sample_dataset(samples).shuffle(len(samples), seed=1).repeat()).prefetch(2)
            features = tf.compat.v1.data.make_one_shot_iterator(ds).get_next()
            spec = mtgr_model_fn(features, None, ModeKeys.TRAIN, params)
            real = (3 * tf.shape(features["profile"])[0]
                    + tf.math.count_nonzero(features["history_movie"], dtype=tf.int32)
                    + tf.math.count_nonzero(features["realtime_movie"], dtype=tf.int32)
                    + tf.math.count_nonzero(features["candidate_movie"], dtype=tf.int32))
            with tf.compat.v1.Session() as s:
                s.run(tf.compat.v1.global_variables_initializer())
                s.run(tf.compat.v1.local_variables_initializer())
                for _ in range(10):
                    s.run(spec.train_op)
                times, counts = [], []
                for _ in range(steps):
                    t = time.perf_counter()
                    _, n = s.run([spec.train_op, real])
                    times.append(time.perf_counter() - t)
                    counts.append(n)
        times = np.array(times)
        out[name] = (times.std() / times.mean(), sum(counts) / times.sum())
        print(f"{name}: step time CV {out[name][0]:.3f}, {out[name][1]:.0f} tokens/s", flush=True)
    (fname, (fcv, frate)), *budgets = out.items()
    rows = [(fname, f"step time CV {fcv:.3f}, {frate:.0f} tokens/s")]
    for bname, (bcv, brate) in budgets:
        rows += [(bname, f"step time CV {bcv:.3f}, {brate:.0f} tokens/s"),
                 (f"{bname.split(' (')[0]} vs fixed count", f"CV {bcv / fcv:.2f}x, tokens/s {brate / frate:.2f}x")]
    return rows


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5, help="seeds of each test-share run")
    parser.add_argument("--tune-repeats", type=int, default=3, help="seeds of each validation run of the grid")
    parser.add_argument("--no-tune", action="store_true", help="the configs as they are, no tuning")
    parser.add_argument("--batching-steps", type=int, default=150)
    parser.add_argument("--skip-quality", action="store_true")
    parser.add_argument("--skip-batching", action="store_true")
    args = parser.parse_args()
    rows = []
    if not args.skip_quality:
        rows += quality(args.repeats, args.tune_repeats, args.no_tune)
    if not args.skip_batching:
        rows += batching(args.batching_steps)
    report(rows)


if __name__ == "__main__":
    main()
