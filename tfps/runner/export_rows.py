"""How an export writes a model's tables without holding the model: table by table, each read
straight from the checkpoint and its delta chain (TfpsTableRows: the checkpoint streamed in
slices, the deltas' changes laid over it) and written to a bundle of its own, the dense state
saved by a Saver of its own; the bundles are then merged into the SavedModel's variables (TF's
MergeV2Checkpoints, which renames the data files). So an export holds at most one table's
exported bytes at a time, plus the deltas' rows of that table and a fixed cost.

What a table is written as:
- the tfps format: the layout of tfps.embedding.saveable, as one part (NAME-part0-*, NAME-parts
  = 1, NAME-slot_init, and the empty stand-ins up to MAX_PARTS): every column, slots included;
- the stock format (tfps.embedding.stock): NAME/stock_keys and NAME/stock_values, the latter
  with its pad row first."""
import os
import shutil
import sys
import tempfile
import time

import tensorflow as tf

from tfps.embedding.stock import DELETED_KEY as RESERVED_KEY   # and every key below it
from tfps.embedding.saveable import COLUMNS, DTYPES, empty_shape, part_name, standins
from tfps.ops.checkpoint import check_tables, table_rows


class TableBundles:
    """The tables of a cut written as bundles in a directory beside the export (same file system,
    so the merge renames them), removed on close. `rows`: {table: rows written}."""

    def __init__(self, where):
        self.directory = tempfile.mkdtemp(prefix=".tfps-tables-", dir=where)
        self.prefixes, self.rows = [], {}

    def close(self):
        shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _names(table, dim, stock):
    """(names, tensors) of the bundle of one table given its TableRows."""
    if stock:
        return lambda r: ([f"{table}/stock_keys", f"{table}/stock_values"], [r.keys, r.values])

    def tfps_layout(r):
        names = [part_name(table, 0, c) for c in COLUMNS] + [f"{table}-parts", f"{table}-slot_init"]
        tensors = [r.keys, r.values, r.slots, r.freq, r.last_step, r.admission, tf.constant(1, tf.int64),
                   r.slot_init]
        for p in standins(0, 1):
            for c in COLUMNS:
                names.append(part_name(table, p, c))
                tensors.append(tf.zeros(empty_shape(c, dim), DTYPES[c]))
        return names, tensors
    return tfps_layout


def write_tables(bundles, checkpoint, chain, tables, stock, config=None, printer=None):
    """Writes each table of `tables` ([(name, dim)]) at the cut of `checkpoint` and its delta chain
    (`chain`: [(step, prefix)]) to a bundle of `bundles` (TableBundles), one table per run, after
    one check that the checkpoint holds every table whole with its dim. stock: the stock format's
    names and pad row, else the tfps format's (every column). printer: where a line per table
    goes (default stderr)."""
    printer = printer or (lambda line: print(line, file=sys.stderr, flush=True))
    if not tables:
        return
    with tf.Graph().as_default(), tf.compat.v1.Session(config=config) as session:
        ckpt = tf.compat.v1.placeholder(tf.string, [], name="checkpoint")
        deltas = tf.compat.v1.placeholder(tf.string, [None], name="deltas")
        out = tf.compat.v1.placeholder(tf.string, [], name="bundle")
        check = check_tables(ckpt, [n for n, _ in tables], [d for _, d in tables])
        saves = []
        for name, dim in tables:
            rows = table_rows(ckpt, deltas, name, dim, pad_rows=1 if stock else 0, with_state=not stock)
            names, tensors = _names(name, dim, stock)(rows)
            save = tf.raw_ops.SaveV2(prefix=out, tensor_names=names, shape_and_slices=[""] * len(names),
                                     tensors=tensors)
            with tf.control_dependencies([save]):
                saves.append((tf.size(rows.keys, out_type=tf.int64),
                              tf.reduce_min(tf.concat([rows.keys, [tf.int64.max]], 0))))
        feeds = {ckpt: checkpoint, deltas: [p for _, p in chain]}
        session.run(check, feeds)
        for i, ((name, _), save) in enumerate(zip(tables, saves)):
            prefix = os.path.join(bundles.directory, f"table{i}")
            start = time.perf_counter()
            n, smallest = session.run(save, {**feeds, out: prefix})
            n = int(n)
            if stock and smallest <= RESERVED_KEY:
                raise ValueError(f"stock export: table {name!r} holds key {smallest}, which a stock hash table "
                                 f"reserves; export it with --format tfps")
            bundles.prefixes.append(prefix)
            bundles.rows[name] = n
            size = sum(os.path.getsize(os.path.join(bundles.directory, f))
                       for f in os.listdir(bundles.directory) if f.startswith(f"table{i}."))
            printer(f"export: table {name}: {n} rows, {size / 2**20:.1f} MiB, in {time.perf_counter() - start:.1f} s "
                    f"({i + 1} of {len(tables)})")


def merge(prefixes, destination):
    """Merges the bundles at `prefixes` into one at `destination` (their data files renamed)."""
    with tf.Graph().as_default(), tf.compat.v1.Session() as session:
        session.run(tf.raw_ops.MergeV2Checkpoints(checkpoint_prefixes=list(prefixes),
                                                  destination_prefix=destination, delete_old_dirs=False))


class StreamedSaver:
    """The Saver a SavedModel Builder is given: its graph's own `saver` for the SavedModel's
    saver_def and MetaGraph, but a save that writes the dense state with `dense_saver` (None: the
    graph has none) and merges it with the tables' bundles (written before, by write_tables)."""

    def __init__(self, saver, dense_saver, bundles):
        self._saver, self._dense, self._bundles = saver, dense_saver, bundles

    def save(self, sess, save_path, write_meta_graph=False, write_state=False, **kwargs):
        del write_meta_graph, write_state, kwargs
        prefixes = list(self._bundles.prefixes)
        if self._dense is not None:
            prefixes.append(os.path.join(self._bundles.directory, "dense"))
            self._dense.save(sess, prefixes[-1], write_meta_graph=False, write_state=False)
        merge(prefixes, save_path)
        return save_path

    def __getattr__(self, name):
        return getattr(self._saver, name)
