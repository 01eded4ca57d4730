"""Lookups and sparse Adagrad updates as the table grows: tfps against TF's built-ins.

For each dim (16, 64) and table size (10^5, 10^6, 10^7, 10^8 keys), in one process per cell,
each phase in turn (one structure in memory at a time; a phase that does not fit this machine's
memory is skipped with the reason):
  tfps:      a table filled with the keys (TfpsTableAssign, 2^20 per batch; insert rate), then
             find-or-insert of 2^20 present ids (TfpsTableFind, the training path), the same
             read-only (insert=False) and TfpsTableApplyAdagrad of the distinct ones, uniform
             and Zipf(1.2) ids; bytes per key and where they go (index, key and floats, meta,
             arena slack) before and after Adagrad's slot; then TfpsTableApplyAdam of the
             uniform batch's distinct ids on a fresh table
  DenseHashTable: the same keys inserted (insert rate), the same 2^20 ids looked up
  Variable:  a tf.Variable of the same row count and its accumulator; the same rows updated
             by TF's ResourceSparseApplyAdagrad (the update path's anchor) and gathered
Threads: the table's batch work runs on the session's intra-op threads (2 here; docs/table.md).
The tfps phase runs again in a process whose sessions have one intra-op thread for the 1-thread
figures, and bench_floor (benchmarks/bench_floor.cc,
built here) gives the memory floor at 1 and 2 threads in the same run: two dependent random
reads per id over arrays of the table's sizes (index slot, then row), and a row's
read-modify-write for the applies, on transparent huge pages (the anchor) and on 4 KiB pages.
Printed per cell (uniform ids): 2 threads / 1 thread, tfps / the 2-thread floor,
find-or-insert / DenseHashTable, applies / the floor's read-modify-write, bytes per key.
Both sparse applies get a batch's distinct ids in order of first appearance (what tf.unique
gives a training step), not sorted: sorted indices would let the Variable stream its memory.
Ratios are tfps / built-in in the same run. Tables prefetch in their default mode (rolling);
--prefetch-modes also times tfps with each mode (off | group | rolling, set by the op
tfps.ops.embedding_table.set_prefetch_mode), each in a fresh process.
Draws throughput against table size to docs/scaling.png (matplotlib).

Usage: python benchmarks/bench_scaling.py [--quick] [--sizes 1e5,1e6] [--dims 16] [--prefetch-modes]
                                           [--baseline OTHER_CHECKOUT]
--quick: 10^5 keys at dim 16 (every phase, both thread counts and the floor, in short).
A phase that does not fit in memory (10^8 keys: DenseHashTable and Adam; 10^8 at dim 64: all)
is skipped with the reason.
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
from common import report, session, time_op  # noqa: E402
from scaling_plot import plot  # noqa: E402

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


def fits(n, dim, phase="tfps"):
    """(ok, why not): the phase must fit in this machine's memory with room to spare."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    need = {"tfps": n * (8 + 4 * dim * 2 + 8 + 12),        # key, value and Adagrad slot, meta, index
            "adam": n * (8 + 4 * dim * 3 + 8 + 12),        # value and Adam's two slots
            "dht": 2 * n / 0.8 * (8 + 4 * dim) * 1.5,      # doubling: old and new buckets at once
            "variable": 2 * n * 4 * dim}[phase]            # variable and accumulator
    if need > 0.75 * total:
        return False, f"needs ~{need / 2**30:.0f} GiB, this machine has {total / 2**30:.0f} GiB"
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
            keys = tf.constant(keys_of(pos))
            ops[dist] = (et.table_find(h, keys).op,
                         tr.table_apply_adagrad(h, tf.constant(keys_of(uniq)), tf.fill([len(uniq), dim], 0.01),
                                                LR, tf.constant(1, tf.int64)), len(uniq),
                         et.table_find(h, keys, insert=False).op)
        with session(THREADS) as s:
            if set_mode is not None:
                s.run(set_mode)
            out["insert"] = fill_rate(s, inserts, keys_ph, n)
            out["memory"] = (s.run(stats), s.run(split))
            for dist, (lookup, _, _, read_only) in ops.items():
                out[f"lookup_{dist}"] = BATCH / time_op(s, lookup, repeats=repeats(n), warmup=1)
                out[f"lookup_ro_{dist}"] = BATCH / time_op(s, read_only, repeats=repeats(n), warmup=1)
            for dist, (_, apply, u, _) in ops.items():
                out[f"adagrad_{dist}"] = u / time_op(s, apply, repeats=repeats(n), warmup=1)
            out["memory_slot"] = (s.run(stats), s.run(split))
    return out


def adam_phase(n, dim, pos):
    """TfpsTableApplyAdam's rows/s on the distinct ids of `pos`, on a fresh table of n keys."""
    uniq = distinct(pos)
    with tf.Graph().as_default():
        h = et.table_handle(dim, "zeros", shared_name=f"scaling_adam_{n}_{dim}")
        keys_ph = tf.compat.v1.placeholder(tf.int64, [None])
        insert = et.table_assign(h, keys_ph, tf.zeros(tf.stack([tf.size(keys_ph), dim])))
        apply = tr.table_apply_adam(h, tf.constant(keys_of(uniq)), tf.fill([len(uniq), dim], 0.01), 0.001,
                                    tf.constant(1, tf.int64), 0.9, 0.999, 1e-8)
        with session(THREADS) as s:
            fill_rate(s, [insert], keys_ph, n)
            return len(uniq) / time_op(s, apply, repeats=repeats(n), warmup=1)


def tfps_rates(n, dim, ids, prefetch=None):
    """tfps_phase, then Adam's apply (uniform ids) where it fits."""
    out = tfps_phase(n, dim, ids, prefetch)
    gc.collect()
    if fits(n, dim, "adam")[0]:
        out["adam_uniform"] = adam_phase(n, dim, ids["uniform"])
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
    result = {"n": n, "dim": dim, "tfps": tfps_rates(n, dim, ids), "skipped": {}}
    gc.collect()
    for name, phase in (("dht", dht_phase), ("variable", variable_phase)):
        ok, why = fits(n, dim, name)
        if ok:
            result[name] = phase(n, dim, ids)
        else:
            result["skipped"][name] = why
        gc.collect()
    return result


def jsonable(r):
    """A cell's results with numpy arrays as lists."""
    def plain(x):
        if hasattr(x, "tolist"):
            return x.tolist()
        return [plain(y) for y in x] if isinstance(x, (tuple, list)) else x
    return {k: v if k in ("n", "dim", "skipped") else {name: plain(x) for name, x in v.items()} for k, v in r.items()}


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


def ratio(a, b):
    return f"{a / b:.2f}x" if a and b else "n/a"


def print_cell(r):
    n, dim = r["n"], r["dim"]
    t, d, v = r["tfps"], r.get("dht"), r.get("variable")
    m = lambda x: f"{x / 1e6:6.2f} M/s" if x else "   n/a    "  # noqa: E731
    rows = [(f"{n:.0e} keys, dim {dim}", "")]
    if d:
        rows.append(("  insert tfps / DenseHashTable", f"{m(t['insert'])} / {m(d['insert'])} = {ratio(t['insert'], d['insert'])}"))
    else:
        rows.append(("  insert tfps", m(t["insert"])))
    for dist in ("uniform", "zipf"):
        lookup = f"{m(t[f'lookup_{dist}'])}"
        if d:
            lookup += f" / {m(d[f'lookup_{dist}'])} = {ratio(t[f'lookup_{dist}'], d[f'lookup_{dist}'])}"
        if v:
            lookup += f"  (Variable gather {m(v[f'gather_{dist}'])})"
        rows.append((f"  lookup {dist}: tfps{' / DenseHashTable' if d else ''}", lookup))
        rows.append((f"  lookup {dist} read-only: tfps", m(t[f"lookup_ro_{dist}"])))
        adagrad = m(t[f"adagrad_{dist}"])
        if v:
            adagrad += f" / {m(v[f'adagrad_{dist}'])} = {ratio(t[f'adagrad_{dist}'], v[f'adagrad_{dist}'])} rows/s"
        rows.append((f"  Adagrad {dist}: tfps{' / Variable' if v else ''}", adagrad))
    rows.append(("  Adam uniform: tfps", m(t.get("adam_uniform"))))
    for name, why in r.get("skipped", {}).items():
        rows.append((f"  {name}", f"skipped: {why}"))
    rows += threads_rows(r)
    report(rows + memory_rows(r))
    sys.stdout.flush()


def threads_rows(r):
    """Uniform ids: 2 threads / 1, tfps / the 2-thread floor, find-or-insert / DenseHashTable,
    applies / the floor's read-modify-write (the issue's bars in brackets)."""
    one, two = r.get("tfps_1thread"), r["tfps"]
    floor = {f["threads"]: f for f in r.get("floor", [])}
    f1, f2 = floor.get(1, {}), floor.get(2, {})
    rows = []
    if one:
        rows.append(("  2 threads / 1 (uniform)",
                     f"read-only lookup {ratio(two['lookup_ro_uniform'], one['lookup_ro_uniform'])}, find-or-insert "
                     f"{ratio(two['lookup_uniform'], one['lookup_uniform'])} [>= 1.6x]; Adagrad "
                     f"{ratio(two['adagrad_uniform'], one['adagrad_uniform'])}, Adam "
                     f"{ratio(two.get('adam_uniform'), one.get('adam_uniform'))}"))
    def both(a, f, key):
        """a / the floor on huge pages | on 4 KiB pages."""
        return f"{ratio(a, f.get('huge_' + key))} | {ratio(a, f.get('floor_' + key))}"

    if f1 and f2:
        for pages, key in (("huge pages", "huge"), ("4 KiB pages", "floor")):
            rows.append((f"  floor on {pages}, 1 / 2 threads",
                         f"lookup {f1[key + '_lookup'] / 1e6:.2f} / {f2[key + '_lookup'] / 1e6:.2f} M/s "
                         f"({ratio(f2[key + '_lookup'], f1[key + '_lookup'])}); read-modify-write 1 slot "
                         f"{f1[key + '_rmw1'] / 1e6:.2f} / {f2[key + '_rmw1'] / 1e6:.2f}, 2 slots "
                         f"{f1[key + '_rmw2'] / 1e6:.2f} / {f2[key + '_rmw2'] / 1e6:.2f} M rows/s"))
        rows.append(("  tfps / floor (huge | 4 KiB), 2 threads",
                     f"read-only {both(two['lookup_ro_uniform'], f2, 'lookup')}, find-or-insert "
                     f"{both(two['lookup_uniform'], f2, 'lookup')} [>= 0.7x]; Adagrad / rmw 1 slot "
                     f"{both(two['adagrad_uniform'], f2, 'rmw1')}, Adam / rmw 2 slots "
                     f"{both(two.get('adam_uniform'), f2, 'rmw2')} [>= 0.6x]"))
    if one and f1:
        rows.append(("  tfps / floor (huge | 4 KiB), 1 thread",
                     f"read-only {both(one['lookup_ro_uniform'], f1, 'lookup')}, find-or-insert "
                     f"{both(one['lookup_uniform'], f1, 'lookup')}; Adagrad {both(one['adagrad_uniform'], f1, 'rmw1')}, "
                     f"Adam {both(one.get('adam_uniform'), f1, 'rmw2')}"))
    if r.get("dht"):
        rows.append(("  find-or-insert / DenseHashTable lookup", f"{ratio(two['lookup_uniform'], r['dht']['lookup_uniform'])} [>= 3x]"))
    (count, reserved, *_), _ = r["tfps"]["memory"]
    rows.append(("  bytes per key, 0 slots", f"{reserved / count:.1f} [<= 90 at dim 16]"))
    return rows


THREADS = 2   # the intra-op threads of the tfps phases' sessions (--threads)
RATES = ("insert", "lookup_uniform", "adagrad_uniform", "lookup_zipf", "adagrad_zipf")


def tfps_only(n, dim, tree=ROOT, mode=None, threads=None):
    """tfps's rates at (n, dim) measured in a fresh process, with `tree`'s build (another
    checkout of tfps: the baseline), the prefetch mode `mode` (None: the build's default) and,
    with `threads`, sessions of that many intra-op threads (the table's work then runs on that
    many: docs/table.md, Threads)."""
    env = dict(os.environ, PYTHONPATH=tree)
    out = subprocess.run([sys.executable, os.path.join(tree, "benchmarks", "bench_scaling.py"), "--tfps-only",
                          f"{n}", f"{dim}"] + (["--prefetch", mode] if mode else []) +
                         (["--threads", str(threads)] if threads else []), env=env, cwd=tree, capture_output=True,
                         text=True)
    if out.returncode != 0:
        raise SystemExit(f"tfps alone at {n:.0e} keys, dim {dim} failed (exit {out.returncode}):\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


FLOOR = os.path.join(ROOT, "build", "cc", "bench_floor")


def floor(n, dim, quick):
    """bench_floor's floor at (n, dim) on 1 and 2 threads: one dict per thread count."""
    out = subprocess.run([FLOOR, "--keys", str(n), "--dim", str(dim), "--threads", "1,2", "--floor-only", "--json",
                          "--repeats", str(3 if quick else repeats(n))], capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"bench_floor at {n:.0e} keys, dim {dim} failed (exit {out.returncode}):\n{out.stderr[-2000:]}")
    return [json.loads(line[len("JSON "):]) for line in out.stdout.splitlines() if line.startswith("JSON ")]


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
    parser.add_argument("--sizes", default="1e5,1e6,1e7,1e8")
    parser.add_argument("--dims", default="16,64")
    parser.add_argument("--prefetch-modes", action="store_true", help="also time tfps at 10^7 keys in each mode")
    parser.add_argument("--baseline", metavar="TREE", help="also time tfps of another built checkout (e.g. the "
                        "last release) in each cell: this tree / that tree")
    parser.add_argument("--cell", nargs=2, type=float, metavar=("N", "DIM"), help=argparse.SUPPRESS)
    parser.add_argument("--tfps-only", nargs=2, type=float, metavar=("N", "DIM"), help=argparse.SUPPRESS)
    parser.add_argument("--prefetch", choices=("off", "group", "rolling"), help=argparse.SUPPRESS)
    parser.add_argument("--threads", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.threads:
        global THREADS
        THREADS = args.threads
    if args.cell:
        print(json.dumps(jsonable(cell(int(args.cell[0]), int(args.cell[1])))))
        return
    if args.tfps_only:
        n, dim = int(args.tfps_only[0]), int(args.tfps_only[1])
        rng = np.random.default_rng(n + dim)
        t = tfps_rates(n, dim, {dist: draws(n, dist, rng) for dist in ("uniform", "zipf")}, args.prefetch)
        print(json.dumps({k: v for k, v in t.items() if not k.startswith("memory")}))
        return
    sizes = [10**5] if args.quick else [int(float(x)) for x in args.sizes.split(",")]
    dims = [16] if args.quick else [int(x) for x in args.dims.split(",")]
    # The floor benchmark, built from this tree (make's rule; a no-op when it is up to date).
    subprocess.run(["make", "-s", "build/cc/bench_floor"], cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    print(f"{time.strftime('%Y-%m-%d')}: {BATCH} ids per batch, {len(os.sched_getaffinity(0))} threads (1 where "
          f"said), prefetch rolling (the default)")
    results = []
    for dim in dims:
        for n in sizes:
            ok, why = fits(n, dim)
            if not ok:
                print(f"{n:.0e} keys, dim {dim}: skipped, tfps {why}")
                continue
            # Each cell in a fresh process (its three phases in that one process): memory one
            # cell's structures left behind never weighs on the next.
            out = subprocess.run([sys.executable, __file__, "--cell", f"{n}", f"{dim}"], capture_output=True, text=True)
            if out.returncode != 0:
                raise SystemExit(f"cell {n:.0e} keys, dim {dim} failed (exit {out.returncode}):\n{out.stderr[-2000:]}")
            results.append(json.loads(out.stdout.strip().splitlines()[-1]))
            results[-1]["tfps_1thread"] = tfps_only(n, dim, threads=1)
            results[-1]["floor"] = floor(n, dim, args.quick)
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
