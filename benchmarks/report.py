"""Writes docs/benchmarks.md from benchmarks/results/*.json (what benchmarks/record.py kept of
each benchmark's run): `python benchmarks/report.py`. `make bench` runs it last."""
import glob
import json
import os

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
    "bench_table": "lookup and insert against tf.lookup DenseHashTable and tf.gather on a Variable",
    "bench_scaling": "lookup and Adagrad apply at 10^5..10^7 keys against DenseHashTable and a Variable; prefetch modes",
    "bench_unique_partition": "fused unique + partition against tf.unique + tf.dynamic_partition",
    "bench_step": "a DeepFM-shaped training step against the Variable hashing-trick step",
    "bench_merge": "merged against one table per feature",
    "bench_online": "admission and eviction under a stream of new ids",
    "bench_memory": "memory_stats against the process's RSS, fill and churn",
    "bench_checkpoint": "a delta against a full checkpoint",
    "bench_placement": "load-balanced against round-robin placement over 4 PS",
    "bench_cluster": "1 and 2 workers on 2 PS against one process",
    "bench_pipeline": "the embedding pipeline on against off, on loopback and behind latency relays",
    "bench_readers": "each reader's rate against the demo model's training rate",
    "bench_quality": "tfps tables against collision-free tf.Variable vocabularies (AUC)",
    "bench_serving": "tfps serve (gRPC, batching, REST) against the SavedModel called in-process",
    "bench_mtgr": "MTGR's one-pass scoring against scoring each candidate alone",
}


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
        out.append(f"| [{r['benchmark']}](#{r['benchmark']}) | {r['date']} | {r['commit']} | "
                   f"{ABOUT.get(r['benchmark'], '')} |\n")
    for r in results:
        out.append(f"\n## {r['benchmark']}\n\n`{r['command']}`, {r['date']}, commit {r['commit']}, "
                   f"{r['cores']} cores, {r['seconds']} s\n\n```\n")
        out.append("\n".join(r["lines"]) + "\n```\n")
    with open(OUT, "w") as f:
        f.write("".join(out))
    print(f"wrote {os.path.relpath(OUT)} from {len(results)} results")


if __name__ == "__main__":
    main()
