"""Tables in stock TensorFlow ops, for a SavedModel that an unmodified TensorFlow (and
`tensorflow_model_server`) loads: a served table reads and never inserts, and reading is a
stock hash lookup plus a gather.

A table of N rows is three things in the graph:
  NAME/stock_keys    int64 variable [N]: its keys;
  NAME/stock_values  float32 variable [N + 1, dim]: row 0 a pad row, key i's row at 1 + i;
  NAME/stock_index   a tf.lookup.experimental.DenseHashTable key -> row index (default 0),
                     filled from stock_keys by the SavedModel's main op, never checkpointed.
The contents live in variables/ (the SavedModel's checkpoint), so saved_model.pb does not grow
with N. A lookup finds each key's index, gathers its row, and gives a key the table does not hold
its initializer value, computed here in stock ops from (key, seed) as kernels/core/initializer.h
does: the same stream (splitmix64), then the normal quantile in float64 (TensorFlow's Ndtri where
the core evaluates AS241: both accurate to about 1e-16, so the float32 rows agree to within 1e-6),
so an id never seen in training reads the same in a tfps table, a stock table and either server.

A graph becomes a stock graph with `use_stock_tables(graph)`: each tfps.get_embedding_variable
built in it then holds a StockTable (no tfps op), and tfps's lookups and feature tags take the
stock path. `tfps export --format stock` builds its model that way (tfps.runner.stock_export).
"""
import math

import numpy as np
import tensorflow as tf

EMPTY_KEY = -2**63          # DenseHashTable's reserved keys: no tfps table may hold them in a stock export
DELETED_KEY = -2**63 + 1
TAG_BITS = 48
_KEY = ("__tfps_stock_tables",)   # a tuple key: the graph holds it, export_meta_graph skips it
_ROWS_KEY = ("__tfps_stock_rows",)

_LOW = 0.5 * math.erfc(2.0 / math.sqrt(2.0))   # Phi(-2)


def _u64(value):
    """A uint64 constant (TensorFlow's uint64 multiplication and addition wrap as C++'s do)."""
    return tf.constant(np.array(value, np.uint64))


def mix64(z):
    """splitmix64's finalizer (kernels/core/hash.h) on uint64 z of any shape."""
    z = tf.bitwise.bitwise_xor(z, tf.bitwise.right_shift(z, _u64(30))) * _u64(0xBF58476D1CE4E5B9)
    z = tf.bitwise.bitwise_xor(z, tf.bitwise.right_shift(z, _u64(27))) * _u64(0x94D049BB133111EB)
    return tf.bitwise.bitwise_xor(z, tf.bitwise.right_shift(z, _u64(31)))


def _affine(x, scale, shift):
    """scale * x + shift, without the ops that would multiply by 1 or add 0 (a served request runs
    each op of a lookup: fewer ops, less time per request)."""
    x = x * scale if scale != 1.0 else x
    return x + shift if shift != 0.0 else x


def init_rows(spec, keys, dim):
    """float32 [N, dim]: the initial rows of int64 keys [N] under an EmbeddingVariable's
    initializer_spec (kind, a, b, seed), as kernels/core/initializer.h computes them: per value,
    53 random bits r from the key's stream, u = (r + 0.5) 2^-53, then a + (b - a) u (uniform), or
    a + b Phi^-1(u) (normal; truncated: Phi^-1 of u mapped into [Phi(-2), Phi(2)])."""
    kind, a, b, seed = spec
    n = tf.shape(keys)[0]
    if kind in ("zeros", "constant"):
        return tf.fill([n, dim], tf.constant(a if kind == "constant" else 0.0, tf.float32))
    a, b = float(np.float32(a)), float(np.float32(b))
    salt = (int(seed) + 0x9E3779B97F4A7C15) % 2**64
    base = mix64(tf.bitwise.bitwise_xor(tf.bitcast(keys, tf.uint64), mix64(_u64(salt))))
    bits = mix64(tf.expand_dims(base, 1) + _u64([j << 32 for j in range(dim)]))
    r = tf.cast(tf.bitwise.right_shift(bits, _u64(11)), tf.float64)
    step = 2.0**-53   # u = r * step + step / 2 exactly: a power of two scales without rounding
    if kind == "uniform":
        v = _affine(r, (b - a) * step, a + (b - a) * step / 2)
    elif kind == "normal":
        v = _affine(tf.math.ndtri(r * step + step / 2), b, a)
    else:
        width = 1.0 - 2.0 * _LOW
        v = _affine(tf.math.ndtri(r * (step * width) + (_LOW + step / 2 * width)), b, a)
    return tf.cast(v, tf.float32)


def feature_tag(ids, tags):
    """tfps.ops.feature_tag in stock ops: int64 ids (any shape) -> (tag << 48) | low, low the id
    if it is in [0, 2^48), else mix64(id)'s low 48 bits. tags: an int, or one per column of ids'
    last dim."""
    mask = _u64((1 << TAG_BITS) - 1)
    u = tf.bitcast(ids, tf.uint64)
    low = tf.where(u <= mask, u, tf.bitwise.bitwise_and(mix64(u), mask))   # a negative id is above the mask
    tag = _u64(np.left_shift(np.asarray(tags, np.uint64), np.uint64(TAG_BITS)))
    return tf.bitcast(tf.bitwise.bitwise_or(low, tag), tf.int64)


FILL_SLICE = 1 << 20   # keys inserted into an index per step of its fill
_LOAD = 0.8            # DenseHashTable's max_load_factor (its default)


def index_buckets(rows):
    """The bucket count of an index made for `rows` keys: the power of two that holds them under
    the load factor, so the fill never grows it (a growth holds the old and new buckets at once);
    TensorFlow's default (2^17) when rows is None."""
    if rows is None:
        return 2**17
    buckets = 8
    while buckets * _LOAD < rows:
        buckets *= 2
    return buckets


class StockTable:
    """One table of a stock graph (see the module doc): keys, values, index; lookup() reads it."""

    def __init__(self, name, dim, initializer_spec, rows=None):
        self.name, self.dim, self.initializer_spec = name, int(dim), initializer_spec
        with tf.compat.v1.name_scope(None), tf.compat.v1.name_scope(name + "/"):   # NAME/stock_...
            self.keys = tf.compat.v1.Variable(tf.zeros([0], tf.int64), name="stock_keys", trainable=False,
                                              shape=tf.TensorShape([None]), use_resource=True)
            self.values = tf.compat.v1.Variable(tf.zeros([1, self.dim], tf.float32), name="stock_values",
                                                trainable=False, shape=tf.TensorShape([None, self.dim]),
                                                use_resource=True)
            self.index = tf.lookup.experimental.DenseHashTable(
                tf.int64, tf.int64, default_value=0, empty_key=EMPTY_KEY, deleted_key=DELETED_KEY,
                initial_num_buckets=index_buckets(rows), checkpoint=False, name="stock_index")

    def fill_index(self, slice_rows=FILL_SLICE):
        """The op that (re)fills the index from the keys variable, slice_rows keys at a time (so a
        load holds no whole-table temporary besides the keys and rows): key i -> row 1 + i."""
        keys = self.keys.read_value()
        n = tf.size(keys, out_type=tf.int64)

        def body(start):
            end = tf.minimum(start + slice_rows, n)
            with tf.control_dependencies([self.index.insert(keys[start:end], tf.range(start + 1, end + 1))]):
                return tf.identity(end)
        (done,) = tf.while_loop(lambda start: start < n, body, [tf.constant(0, tf.int64)], back_prop=False,
                                name="fill_index")
        return done.op

    def lookup(self, keys):
        """int64 keys [N] -> float32 [N, dim]: a key's row, or its initializer value."""
        # The table's two reserved keys (the two smallest int64) are looked up as another key, then
        # read as missing.
        index = self.index.lookup(tf.maximum(keys, DELETED_KEY + 1))
        index = tf.where(keys > DELETED_KEY, index, tf.zeros_like(index))
        rows = tf.gather(self.values, index)
        missing = tf.where(tf.equal(index, 0))
        distinct, inverse = tf.unique(tf.gather_nd(keys, missing))   # each missing key's row computed once
        fresh = tf.gather(init_rows(self.initializer_spec, distinct, self.dim), inverse)
        out = tf.tensor_scatter_nd_update(rows, missing, fresh)
        out.set_shape([None, self.dim])
        return out


def use_stock_tables(graph, rows=None):
    """Makes `graph` a stock graph: the tables get_embedding_variable builds in it are StockTables.
    rows: {table name: its row count}, which sizes each table's index (index_buckets)."""
    refs = graph.get_collection_ref(_KEY)
    if not refs:
        refs.append({})
    graph.get_collection_ref(_ROWS_KEY)[:] = [dict(rows or {})]
    return refs[0]


def planned_rows(name, graph=None):
    """The row count use_stock_tables was given for table `name` (None when none)."""
    refs = (graph or tf.compat.v1.get_default_graph()).get_collection(_ROWS_KEY)
    return refs[0].get(name) if refs else None


def stock_tables(graph=None):
    """{table name: StockTable} of a stock graph (in creation order), or None for another graph."""
    refs = (graph or tf.compat.v1.get_default_graph()).get_collection(_KEY)
    return refs[0] if refs else None


class AttachedStockTable:
    """A StockTable of a graph imported from a stock export (found by its ops' names: no Python
    object survives the SavedModel), with what `tfps serve --follow` runs on it: load (replace
    the contents) and apply_delta (remove keys, write rows), in stock ops.

    A delta's row of a key the table holds is written in place (ResourceScatterUpdate); a new key's
    row is appended to the values variable and its index inserted; a removed key leaves the index
    (its row stays unreferenced until the next load or export). Every op checks the keys first
    (none may be a DenseHashTable's reserved key), so a refused delta changes nothing."""

    def __init__(self, name, index, keys, values):
        from tfps.embedding.options import EmbeddingOptions
        self.name, self.index, self.keys, self.values = name, index, keys, values
        self.dim = int(values.op.get_attr("shape").dim[1].size)
        self.key_dtype, self.num_shards, self.trainable = tf.int64, 1, False
        self.options = EmbeddingOptions(num_shards=1)
        self.handles = [index]

    def _read(self, var):
        dtype = self.keys.op.get_attr("dtype") if var is self.keys else tf.float32
        return tf.raw_ops.ReadVariableOp(resource=var, dtype=dtype)

    def _checked(self, *keys):
        bad = tf.add_n([tf.reduce_sum(tf.cast(tf.equal(k, EMPTY_KEY) | tf.equal(k, DELETED_KEY), tf.int32))
                        for k in keys])
        return tf.debugging.Assert(tf.equal(bad, 0), [f"table {self.name!r}: a stock table cannot hold keys "
                                                      f"{EMPTY_KEY} and {DELETED_KEY}"])

    def load(self, exported, padded=False, after=()):
        """Replaces the contents with an export() dict's keys and values (other parts ignored),
        after the ops `after`. padded: values already begin with the pad row (as TfpsTableRows
        with pad_rows=1 gives them), so they are assigned without another copy."""
        keys = tf.reshape(tf.convert_to_tensor(exported["keys"], tf.int64), [-1])
        values = tf.reshape(tf.convert_to_tensor(exported["values"], tf.float32), [-1, self.dim])
        with tf.control_dependencies([self._checked(keys), *after]):
            old = tf.identity(self._read(self.keys))
            removed = tf.raw_ops.LookupTableRemoveV2(table_handle=self.index, keys=old)
        with tf.control_dependencies([removed]):
            assigned = [tf.raw_ops.AssignVariableOp(resource=self.keys, value=keys),
                        tf.raw_ops.AssignVariableOp(resource=self.values, value=values if padded else tf.concat(
                            [tf.zeros([1, self.dim]), values], 0))]
        with tf.control_dependencies(assigned):
            return tf.raw_ops.LookupTableInsertV2(table_handle=self.index, keys=keys, values=tf.range(
                1, tf.size(keys, out_type=tf.int64) + 1))

    def apply_delta(self, delta):
        """Removes delta["removed"], then writes delta["keys"]' rows delta["values"]."""
        keys = tf.reshape(tf.convert_to_tensor(delta["keys"], tf.int64), [-1])
        values = tf.reshape(tf.convert_to_tensor(delta["values"], tf.float32), [-1, self.dim])
        removed = tf.reshape(tf.convert_to_tensor(delta["removed"], tf.int64), [-1])
        with tf.control_dependencies([self._checked(keys, removed)]):
            gone = tf.raw_ops.LookupTableRemoveV2(table_handle=self.index, keys=removed)
        with tf.control_dependencies([gone]):
            index = tf.raw_ops.LookupTableFindV2(table_handle=self.index, keys=keys,
                                                 default_value=tf.constant(0, tf.int64))
        held = tf.reshape(index, [-1]) > 0
        update = tf.raw_ops.ResourceScatterUpdate(resource=self.values, indices=tf.boolean_mask(index, held),
                                                  updates=tf.boolean_mask(values, held))
        new_keys, new_values = tf.boolean_mask(keys, ~held), tf.boolean_mask(values, ~held)
        with tf.control_dependencies([update]):
            current = self._read(self.values)
            start = tf.shape(current, out_type=tf.int64)[0]
            grown = [tf.raw_ops.AssignVariableOp(resource=self.values, value=tf.concat([current, new_values], 0)),
                     tf.raw_ops.AssignVariableOp(resource=self.keys, value=tf.concat([self._read(self.keys), new_keys],
                                                                                     0))]
        with tf.control_dependencies(grown):
            return tf.raw_ops.LookupTableInsertV2(table_handle=self.index, keys=new_keys, values=tf.range(
                start, start + tf.size(new_keys, out_type=tf.int64)))

    def variables(self):
        """The names of the variables that hold the table (not dense state)."""
        return {self.keys.op.name, self.values.op.name}


def attached_stock_tables(graph):
    """[AttachedStockTable] of every stock table `graph` holds (by its ops' names), sorted by name."""
    ops = {op.name: op for op in graph.get_operations()
           if op.type in ("MutableDenseHashTableV2", "VarHandleOp")}
    tables = []
    for name, op in sorted(ops.items()):
        if op.type == "MutableDenseHashTableV2" and name.endswith("/stock_index"):
            table = name[:-len("/stock_index")]
            keys, values = ops.get(f"{table}/stock_keys"), ops.get(f"{table}/stock_values")
            if keys is None or values is None:
                raise ValueError(f"stock table {table!r}: the graph holds its index but not its keys and values")
            tables.append(AttachedStockTable(table, op.outputs[0], keys.outputs[0], values.outputs[0]))
    return tables
