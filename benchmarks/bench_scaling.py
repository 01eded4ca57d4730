"""Lookups and sparse Adagrad updates as the table grows: tfps against TF's built-ins.

For each dim (16, 64) and table size (10^5, 10^6, 10^7, 5*10^7 keys), in one process per cell,
each phase in turn (one structure in memory at a time):
  tfps:      a table filled with the keys (TfpsTableAssign, 2^20 per batch; insert rate), then
             find-or-insert of 2^20 present ids (TfpsTableFind) and TfpsTableApplyAdagrad of
             the distinct ones, uniform and Zipf(1.2) ids; bytes per key and where they go
             (index, key and floats, meta, arena slack) before and after Adagrad's slot
  DenseHashTable: the same keys inserted (insert rate), the same 2^20 ids looked up
  Variable:  a tf.Variable of the same row count and its accumulator; the same rows updated
             by TF's ResourceSparseApplyAdagrad (the update path's anchor) and gathered
Both sparse applies get a batch's distinct ids in order of first appearance (what tf.unique
gives a training step), not sorted: sorted indices would let the Variable stream its memory.
Ratios are tfps / built-in in the same run. Tables prefetch in their default mode (rolling);
--prefetch-modes also times tfps with each mode (off | group | rolling, set by the op
tfps.ops.embedding_table.set_prefetch_mode), each in a fresh process.
Draws throughput against table size to docs/scaling.png (matplotlib).

Usage: python benchmarks/bench_scaling.py [--quick] [--sizes 1e5,1e6] [--dims 16] [--prefetch-modes]
                                           [--baseline OTHER_CHECKOUT]
A cell that does not fit in memory (5*10^7 keys at dim 64: ~27 GB for tfps with its Adagrad slot
alone) is skipped with the reason.
"""
import argparse
import gc
import json
import os
import subprocess
import sys
import time

import numpy as np
import tensorflow as tf

sys.path.insert(0, os.path.dirname(__file__))
from common import pyplot, report, session, time_op  # noqa: E402

tf.compat.v1.disable_eager_execution()
from tfps.ops import embedding_table as et  # noqa: E402
from tfps.ops import training as tr  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PLOT = os.path.join(ROOT, "docs", "scaling.png")
BATCH = 1 << 20
FILL = 1 << 20
REPEATS = 5
LR = 0.05
# Small cells run in milliseconds, where one run says little: they are timed more often, and
# their insert rate is the median over fills of this many fresh tables.
SMALL = 10**6
SMALL_REPEATS = 15
SMALL_FILLS = 5


def repeats(n):
    return SMALL_REPEATS if n <= SMALL else REPEATS


def fills(n):
    return SMALL_FILLS if n <= SMALL else 1


def keys_of(positions):
    """Distinct non-negative keys for row positions (a bijection on [0, 2^62))."""
    with np.errstate(over="ignore"):
        return ((positions.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(2)).astype(np.int64)


def draws(n, dist, rng):
    """BATCH row positions in [0, n): uniform, or Zipf(1.2) ranks scattered over the rows."""
    if dist == "uniform":
        return rng.integers(0, n, BATCH, dtype=np.int64)
    ranks = rng.zipf(1.2, BATCH).astype(np.uint64)
    with np.errstate(over="ignore"):
        return ((ranks * np.uint64(0xD1B54A32D192ED03)) % np.uint64(n)).astype(np.int64)


def fits(n, dim):
    """(ok, why not): the largest phase must fit in this machine's memory with room to spare."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    tfps_bytes = n * (8 + 4 * dim * 2 + 8 + 40)          # key, value and Adagrad slot, meta, index
    dht_bytes = 2 * n / 0.8 * (8 + 4 * dim) * 1.5       # doubling: old and new buckets at once
    var_bytes = 2 * n * 4 * dim                          # variable and accumulator
    need = max(tfps_bytes, dht_bytes, var_bytes)
    if need > 0.75 * total:
        return False, f"needs ~{need / 2**30:.0f} GiB in one phase, this machine has {total / 2**30:.0f} GiB"
    return True, ""


def distinct(positions):
    """The distinct positions in order of first appearance, as tf.unique gives a step's ids."""
    _, first = np.unique(positions, return_index=True)
    return positions[np.sort(first)]


def fill_rate(sess, inserts, keys_ph, n):
    """Inserts keys_of(0..n) in batches of FILL into each of the tables the ops `inserts` fill
    (the first is the one measured afterwards; the others are fresh tables, filled only to be
    timed); returns the median rate in keys per second."""
    for insert in inserts:   # an op's first run sets up its executor
        sess.run(insert, {keys_ph: np.zeros([0], np.int64)})
    batches = [keys_of(np.arange(begin, min(n, begin + FILL))) for begin in range(0, n, FILL)]
    rates = []
    for insert in inserts:
        t = time.perf_counter()
        for keys in batches:
            sess.run(insert, {keys_ph: keys})
        rates.append(n / (time.perf_counter() - t))
    return float(np.median(rates))


def tfps_phase(n, dim, ids, prefetch=None):
    """Insert rate, lookup and Adagrad rates per distribution, memory before and after the slot;
    with `prefetch`, the tables' prefetch mode is set first."""
    out = {}
    with tf.Graph().as_default():
        handles = [et.table_handle(dim, "zeros", shared_name=f"scaling_{n}_{dim}_{i}") for i in range(fills(n))]
        set_mode = tf.group(*[et.set_prefetch_mode(t, prefetch) for t in handles]) if prefetch else None
        h = handles[0]
        keys_ph = tf.compat.v1.placeholder(tf.int64, [None])
        zeros = tf.zeros(tf.stack([tf.size(keys_ph), dim]))
        inserts = [et.table_assign(t, keys_ph, zeros) for t in handles]
        stats, split = et.table_memory_stats(h), et.table_memory_split(h)
        ops = {}
        for dist, pos in ids.items():
            uniq = distinct(pos)
            ops[dist] = (et.table_find(h, tf.constant(keys_of(pos))).op,
                         tr.table_apply_adagrad(h, tf.constant(keys_of(uniq)), tf.fill([len(uniq), dim], 0.01),
                                                LR, tf.constant(1, tf.int64)), len(uniq))
        with session() as s:
            if set_mode is not None:
                s.run(set_mode)
            out["insert"] = fill_rate(s, inserts, keys_ph, n)
            out["memory"] = (s.run(stats), s.run(split))
            for dist, (lookup, _, _) in ops.items():
                out[f"lookup_{dist}"] = BATCH / time_op(s, lookup, repeats=repeats(n), warmup=1)
            for dist, (_, apply, u) in ops.items():
                out[f"adagrad_{dist}"] = u / time_op(s, apply, repeats=repeats(n), warmup=1)
            out["memory_slot"] = (s.run(stats), s.run(split))
    return out


def dht_phase(n, dim, ids):
    out = {}
    with tf.Graph().as_default():
        tables = [tf.lookup.experimental.DenseHashTable(tf.int64, tf.float32, default_value=tf.zeros([dim]),
                                                        empty_key=-1, deleted_key=-2) for _ in range(fills(n))]
        table = tables[0]
        keys_ph = tf.compat.v1.placeholder(tf.int64, [None])
        zeros = tf.zeros(tf.stack([tf.size(keys_ph), dim]))
        inserts = [t.insert(keys_ph, zeros) for t in tables]
        lookups = {dist: table.lookup(tf.constant(keys_of(pos))).op for dist, pos in ids.items()}
        with session() as s:
            out["insert"] = fill_rate(s, inserts, keys_ph, n)
            for dist, op in lookups.items():
                out[f"lookup_{dist}"] = BATCH / time_op(s, op, repeats=repeats(n), warmup=1)
    return out


def variable_phase(n, dim, ids):
    out = {}
    with tf.Graph().as_default():
        var = tf.Variable(tf.zeros([n, dim]), use_resource=True)
        acc = tf.Variable(tf.fill([n, dim], 0.1), use_resource=True)
        ops = {}
        for dist, pos in ids.items():
            uniq = distinct(pos)
            ops[dist] = (tf.raw_ops.ResourceSparseApplyAdagrad(
                var=var.handle, accum=acc.handle, lr=tf.constant(LR), grad=tf.fill([len(uniq), dim], 0.01),
                indices=tf.constant(uniq)), tf.gather(var, tf.constant(pos)).op, len(uniq))
        with session() as s:
            s.run(tf.compat.v1.global_variables_initializer())
            for dist, (apply, gather, u) in ops.items():
                out[f"adagrad_{dist}"] = u / time_op(s, apply, repeats=repeats(n), warmup=1)
                out[f"gather_{dist}"] = BATCH / time_op(s, gather, repeats=repeats(n), warmup=1)
    return out


def cell(n, dim):
    rng = np.random.default_rng(n + dim)
    ids = {dist: draws(n, dist, rng) for dist in ("uniform", "zipf")}
    result = {"n": n, "dim": dim, "tfps": tfps_phase(n, dim, ids)}
    gc.collect()
    result["dht"] = dht_phase(n, dim, ids)
    gc.collect()
    result["variable"] = variable_phase(n, dim, ids)
    gc.collect()
    return result


def jsonable(r):
    """A cell's results with numpy arrays as lists."""
    def plain(x):
        if hasattr(x, "tolist"):
            return x.tolist()
        return [plain(y) for y in x] if isinstance(x, (tuple, list)) else x
    return {k: v if k in ("n", "dim") else {name: plain(x) for name, x in v.items()} for k, v in r.items()}


def memory_rows(r):
    n, dim = r["n"], r["dim"]
    rows = []
    for key, slots in (("memory", 0), ("memory_slot", 1)):
        (count, reserved, *_), (index, row_bytes, meta, slack, side) = r["tfps"][key]
        ideal = 8 + 4 * dim * (1 + slots)
        rows.append((f"  bytes/key, {slots} slot{'s' if slots != 1 else ''}",
                     f"{reserved / count:.1f} reserved = {ideal / 1:.0f} ideal x {reserved / count / ideal:.2f} "
                     f"(bound 1.25x = {1.25 * ideal:.0f}): index {index / count:.1f} (4-byte slots), "
                     f"key and floats {(row_bytes - meta) / count:.1f}, meta {meta / count:.1f}, arena slack "
                     f"{slack / count:.1f}, side {side / count:.1f}"))
    return rows


def print_cell(r):
    n, dim = r["n"], r["dim"]
    t, d, v = r["tfps"], r["dht"], r["variable"]
    m = lambda x: f"{x / 1e6:6.2f} M/s"  # noqa: E731
    rows = [(f"{n:.0e} keys, dim {dim}", ""),
            ("  insert tfps / DenseHashTable", f"{m(t['insert'])} / {m(d['insert'])} = {t['insert'] / d['insert']:.2f}x")]
    for dist in ("uniform", "zipf"):
        rows += [(f"  lookup {dist}: tfps / DenseHashTable",
                  f"{m(t[f'lookup_{dist}'])} / {m(d[f'lookup_{dist}'])} = "
                  f"{t[f'lookup_{dist}'] / d[f'lookup_{dist}']:.2f}x  (Variable gather {m(v[f'gather_{dist}'])})"),
                 (f"  Adagrad {dist}: tfps / Variable",
                  f"{m(t[f'adagrad_{dist}'])} / {m(v[f'adagrad_{dist}'])} = "
                  f"{t[f'adagrad_{dist}'] / v[f'adagrad_{dist}']:.2f}x rows/s")]
    report(rows + memory_rows(r))
    sys.stdout.flush()


def plot(results, path):
    plt = pyplot(path)
    if plt is None:
        return
    dims = sorted({r["dim"] for r in results})
    fig, axes = plt.subplots(len(dims), 2, figsize=(10, 3.4 * len(dims)), dpi=110, squeeze=False)
    for row, dim in enumerate(dims):
        cells = sorted((r for r in results if r["dim"] == dim), key=lambda r: r["n"])
        ns = [r["n"] for r in cells]
        for col, dist in enumerate(("uniform", "zipf")):
            ax = axes[row][col]
            for label, get, style in (
                    ("tfps lookup", lambda r: r["tfps"][f"lookup_{dist}"], "o-"),
                    ("DenseHashTable lookup", lambda r: r["dht"][f"lookup_{dist}"], "s--"),
                    ("tfps Adagrad", lambda r: r["tfps"][f"adagrad_{dist}"], "o-"),
                    ("Variable Adagrad (TF)", lambda r: r["variable"][f"adagrad_{dist}"], "s--")):
                ax.plot(ns, [get(r) / 1e6 for r in cells], style, label=label)
            ax.set_xscale("log")
            ax.set_xlabel("keys in the table")
            ax.set_ylabel("M ids (rows) / s")
            ax.set_title(f"dim {dim}, {dist} ids, 2 threads")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7)
    fig.tight_layout()
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fig.savefig(path)
    print(f"throughput vs table size drawn to {os.path.relpath(path, ROOT)}")


RATES = ("insert", "lookup_uniform", "adagrad_uniform", "lookup_zipf", "adagrad_zipf")


def tfps_only(n, dim, tree=ROOT, mode=None):
    """tfps's rates at (n, dim) measured in a fresh process, with `tree`'s build (another
    checkout of tfps: the baseline) and the prefetch mode `mode` (None: the build's default)."""
    env = dict(os.environ, PYTHONPATH=tree)
    out = subprocess.run([sys.executable, os.path.join(tree, "benchmarks", "bench_scaling.py"), "--tfps-only",
                          f"{n}", f"{dim}"] + (["--prefetch", mode] if mode else []), env=env, cwd=tree,
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def prefetch_modes(n, dim):
    """tfps alone at (n, dim) in each prefetch mode, each in a fresh process."""
    rows = []
    for mode in ("off", "group", "rolling"):
        t = tfps_only(n, dim, mode=mode)
        rows.append((f"prefetch {mode:7s} {n:.0e} keys dim {dim}", ", ".join(f"{k} {t[k] / 1e6:.2f} M/s" for k in RATES)))
    report(rows)


def against(baseline, cells):
    """This tree's tfps against the baseline tree's, cell by cell, each in fresh processes."""
    rows = []
    for n, dim in cells:
        old, new = tfps_only(n, dim, baseline), tfps_only(n, dim)
        rows.append((f"{n:.0e} keys dim {dim}: now / baseline",
                     ", ".join(f"{k} {new[k] / 1e6:.1f}/{old[k] / 1e6:.1f} = {new[k] / old[k]:.2f}x" for k in RATES)))
    report(rows)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="10^5 keys at dim 16 only (the test suite's run)")
    parser.add_argument("--sizes", default="1e5,1e6,1e7,5e7")
    parser.add_argument("--dims", default="16,64")
    parser.add_argument("--prefetch-modes", action="store_true", help="also time tfps at 10^7 keys in each mode")
    parser.add_argument("--baseline", metavar="TREE", help="also time tfps of another built checkout (e.g. the "
                        "last release) in each cell: this tree / that tree")
    parser.add_argument("--cell", nargs=2, type=float, metavar=("N", "DIM"), help=argparse.SUPPRESS)
    parser.add_argument("--tfps-only", nargs=2, type=float, metavar=("N", "DIM"), help=argparse.SUPPRESS)
    parser.add_argument("--prefetch", choices=("off", "group", "rolling"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.cell:
        print(json.dumps(jsonable(cell(int(args.cell[0]), int(args.cell[1])))))
        return
    if args.tfps_only:
        n, dim = int(args.tfps_only[0]), int(args.tfps_only[1])
        rng = np.random.default_rng(n + dim)
        t = tfps_phase(n, dim, {dist: draws(n, dist, rng) for dist in ("uniform", "zipf")}, args.prefetch)
        print(json.dumps({k: v for k, v in t.items() if not k.startswith("memory")}))
        return
    sizes = [10**5] if args.quick else [int(float(x)) for x in args.sizes.split(",")]
    dims = [16] if args.quick else [int(x) for x in args.dims.split(",")]
    print(f"{time.strftime('%Y-%m-%d')}: {BATCH} ids per batch, 2 threads, prefetch rolling (the default)")
    results = []
    for dim in dims:
        for n in sizes:
            ok, why = fits(n, dim)
            if not ok:
                print(f"{n:.0e} keys, dim {dim}: skipped, {why}")
                continue
            # Each cell in a fresh process (its three phases in that one process): memory one
            # cell's structures left behind never weighs on the next.
            out = subprocess.run([sys.executable, __file__, "--cell", f"{n}", f"{dim}"], capture_output=True, text=True)
            if out.returncode != 0:
                raise SystemExit(f"cell {n:.0e} keys, dim {dim} failed (exit {out.returncode}):\n{out.stderr[-2000:]}")
            results.append(json.loads(out.stdout.strip().splitlines()[-1]))
            print_cell(results[-1])
    if args.prefetch_modes:
        prefetch_modes(10**7, 16)
    if args.baseline:
        against(os.path.abspath(args.baseline), [(r["n"], r["dim"]) for r in results])
    if not args.quick:
        plot(results, PLOT)
    print(json.dumps(results))


if __name__ == "__main__":
    main()
