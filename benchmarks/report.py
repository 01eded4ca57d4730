"""Writes docs/benchmarks.md from benchmarks/results/*.json (what benchmarks/record.py kept of
each benchmark's run): `python benchmarks/report.py`. `make bench` runs it last."""
import glob
import json
import os
import re

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(os.path.dirname(HERE), "docs", "benchmarks.md")

HEAD = """# Benchmarks

Written by `make bench` (benchmarks/report.py) from what each benchmark printed
(benchmarks/results/*.json): do not edit by hand, re-measure. Every benchmark prints ratios
against the TF built-in (or the peer) it replaces, measured in the same run; each section says
when, on which commit, and how long the run took. The machine: 2 cores (AVX-512), no GPU; runs
vary by about ±15%. The cluster benchmarks run every task on the same 2 cores: they show the
framework's and gRPC's overhead, not scaling.

| benchmark | measured | commit | what it compares |
|---|---|---|---|
"""

# what each benchmark compares (its module docstring says more)
ABOUT = {
    "bench_index": "the table's index against tbb::concurrent_hash_map and std::unordered_map + mutex (C++)",
    "bench_unique_paths": "the dedup paths (sort, hash, parallel) on uniform and Zipf ids (C++)",
    "bench_op_mix": "lookup-insert, update, remove, evict and stats from 2 threads against std::unordered_map + mutex",
    "bench_floor": "the table's lookups and applies at 10^6..10^8 keys on 1 and 2 threads against the memory floor (C++)",
    "bench_table": "lookup and insert against tf.lookup DenseHashTable and tf.gather on a Variable",
    "bench_scaling": "lookups and applies at 10^5..10^8 keys on 1 and 2 threads against DenseHashTable, a Variable and the memory floor; prefetch modes",
    "bench_unique_partition": "fused unique + partition against tf.unique + tf.dynamic_partition",
    "bench_step": "a DeepFM-shaped training step against the Variable hashing-trick step",
    "bench_merge": "merged against one table per feature",
    "bench_online": "admission and eviction under a stream of new ids",
    "bench_memory": "memory_stats against the process's RSS, fill and churn",
    "bench_checkpoint": "a delta against a full checkpoint",
    "bench_checkpoint_ps": "a table's save and restore over 1, 2 and 4 PS (and 3 into 4): time, MB/s and each PS's peak growth over its shard, against a partitioned tf.Variable of the same bytes saved by TF's own Saver",
    "bench_placement": "load-balanced against round-robin placement over 4 PS",
    "bench_cluster": "1 and 2 workers on 2 PS against one process",
    "bench_cluster_batch": "a pipelined 1-worker cluster against one process at batch 512..4096: the fixed cost per step",
    "bench_stock_step": "stock TensorFlow's own cluster step against one process, 1 and 16 steps per session.run",
    "bench_pipeline": "the embedding pipeline on against off, on loopback and behind latency relays",
    "bench_readers": "each reader's rate against the demo model's training rate",
    "bench_quality": "tfps tables against collision-free tf.Variable vocabularies (AUC)",
    "bench_serving": "tfps serve (gRPC, batching, REST) against the SavedModel called in-process",
    "bench_export": "the stock-ops export against the tfps export at 10^3..10^7 rows: size, export and load memory, req/s",
    "bench_mtgr": "MTGR against DeepFM and DCN-v2 on MovieLens (each tuned, 5 seeds), its ablations; token-budget "
                  "against fixed-count batches",
    "bench_torchrec": "the demo's DeepFM on tfps (1 process; 2 PS + 1 worker) against TorchRec on CPU (fixed-size "
                      "fused-Adagrad tables; MCH dynamic tables): examples/s, CPU per example, AUC (`make bench-torchrec`)",
    "scaling_model": "a cost model fit on small clusters (benchmarks/results/scaling/runs.json), checked on held-out runs; "
                     "predictions to 100 workers, tfps against stock TensorFlow",
}

# the make target of a benchmark that `make bench` does not run
RUN_BY = {"bench_torchrec": "make bench-torchrec"}

# The figures set side by side for the two TensorFlow lines (`make bench-lines`, results in
# benchmarks/results/tf-<line>/): (benchmark, what it is, label, how to read it from the run,
# unit, higher is better). A line's figure is the first number after `label` on the line that starts with it.
LINE_FIGURES = [
    ("bench_table", "lookup, tfps (train path)", "warm lookup tfps (train path)", None, "M ids/s", True),
    ("bench_table", "insert, tfps", "insert new keys tfps (assign rows)", None, "M ids/s", True),
    ("bench_table", "lookup, DenseHashTable", "warm lookup DenseHashTable", None, "M ids/s", True),
    ("bench_step", "step, tfps tables", "tfps tables step", None, "ms", False),
    ("bench_step", "step, tf.Variable hashing trick", "tf.Variable hashing-trick step", None, "ms", False),
    ("bench_cluster", "one process", "1 process: examples/s (steady)", None, "examples/s", True),
    ("bench_cluster", "2 PS + 1 worker", "2 PS + 1 worker: examples/s (steady)", None, "examples/s", True),
    ("bench_cluster", "2 PS + 2 workers", "2 PS + 2 workers: examples/s (steady)", None, "examples/s", True),
    ("bench_cluster", "one process", "1 process: examples/s (steady)", r"AUC ([0-9.]+)", "AUC", None),
    ("demo", "2 PS + 2 workers (`make demo`)", "examples_per_sec", "json", "examples/s", True),
    ("demo", "2 PS + 2 workers (`make demo`)", "auc", "json", "AUC", None),
]


def _figure(result, label, how):
    if how == "json":
        return (result.get("json") or {}).get(label)
    for line in result["lines"]:
        if line.startswith(label):
            found = re.search(how or r"([0-9]+(?:\.[0-9]+)?)", line[len(label):])
            return float(found.group(1)) if found else None
    return None


def tf_lines_section():
    """Both TensorFlow lines' figures side by side, with 2.21's speed relative to 2.15's (a time:
    2.15's over 2.21's), or "" when `make bench-lines` has not run."""
    lines = sorted(os.path.basename(d)[len("tf-"):] for d in glob.glob(os.path.join(HERE, "results", "tf-*")))
    if len(lines) < 2:
        return ""
    runs = {}
    for line in lines:
        for path in glob.glob(os.path.join(HERE, "results", f"tf-{line}", "*.json")):
            with open(path) as f:
                r = json.load(f)
            runs[(line, os.path.basename(path)[:-len(".json")])] = r
    old, new = lines[0], lines[-1]
    out = [f"\n## TensorFlow {old} and {new}\n\n`make bench-lines`: each line's venv and op library in turn, on "
           f"the same machine; {new}'s speed relative to {old}'s (for a time: {old}'s over {new}'s). Runs vary by "
           f"about ±15% (the cluster figures more: every task shares the 2 cores).\n\n"
           f"| benchmark | figure | TF {old} | TF {new} | {new} / {old} |\n|---|---|---|---|---|\n"]
    for bench, what, label, how, unit, higher in LINE_FIGURES:
        a, b = (runs.get((line, bench)) for line in (old, new))
        if a is None or b is None:
            continue
        x, y = _figure(a, label, how), _figure(b, label, how)
        if x is None or y is None:
            continue
        ratio = "" if higher is None or not x or not y else f"{(y / x if higher else x / y):.2f}x"
        if a["commit"] != b["commit"]:   # the two runs measured different code: say so on the row
            ratio += f" ({old} at {_stamp(a['commit'])}, {new} at {_stamp(b['commit'])})"
        out.append(f"| {bench} | {what}: {unit} | {x:g} | {y:g} | {ratio} |\n")
    dates = sorted({r["date"] for r in runs.values()})
    commits = sorted({_stamp(r["commit"]) for r in runs.values()})
    out.append(f"\nMeasured {', '.join(dates)}, commit {', '.join(commits)}; each run's full output is in "
               f"benchmarks/results/tf-<line>/.\n")
    return "".join(out)


def _stamp(commit):
    """A result's commit, flagged when the tree it was measured on had uncommitted changes
    (record.py now refuses those): such a figure is to be re-measured."""
    return f"{commit} (uncommitted changes: to re-measure)" if commit.endswith("-dirty") else commit


def main():
    results = []
    for path in sorted(glob.glob(os.path.join(HERE, "results", "*.json"))):
        with open(path) as f:
            results.append(json.load(f))
    order = list(ABOUT)
    results.sort(key=lambda r: (order.index(r["benchmark"]) if r["benchmark"] in order else len(order),
                                r["benchmark"]))
    out = [HEAD]
    for r in results:
        out.append(f"| [{r['benchmark']}](#{r['benchmark']}) | {r['date']} | {_stamp(r['commit'])} | "
                   f"{ABOUT.get(r['benchmark'], '')} |\n")
    missing = [name for name in ABOUT if name not in {r["benchmark"] for r in results}]
    for name in missing:   # in `make bench`, no result kept yet: said, so that a link to it lands
        out.append(f"| [{name}](#{name}) | not recorded | | {ABOUT[name]} |\n")
    out.append(tf_lines_section())
    for r in results:
        out.append(f"\n## {r['benchmark']}\n\n`{r['command']}`, {r['date']}, commit {_stamp(r['commit'])}, "
                   f"{r['cores']} cores, {r['seconds']} s\n\n```text\n")
        out.append("\n".join(r["lines"]) + "\n```\n")
    for name in missing:
        out.append(f"\n## {name}\n\nNot recorded: `{RUN_BY.get(name, 'make bench')}` runs it (benchmarks/{name}.py says "
                   f"what it measures and how long it takes), and this page then shows its figures.\n")
    with open(OUT, "w") as f:
        f.write("".join(out))
    print(f"wrote {os.path.relpath(OUT)} from {len(results)} results")


if __name__ == "__main__":
    main()
