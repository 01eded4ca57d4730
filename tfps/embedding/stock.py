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
its initializer value, computed here in stock ops from (key, seed) exactly as
kernels/core/initializer.h does (the same stream: splitmix64, then AS241's normal quantile), so
an id never seen in training reads the same in a tfps table, a stock table and either server.

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

_A = [3.3871328727963666080e0, 1.3314166789178437745e+2, 1.9715909503065514427e+3, 1.3731693765509461125e+4,
      4.5921953931549871457e+4, 6.7265770927008700853e+4, 3.3430575583588128105e+4, 2.5090809287301226727e+3]
_B = [1.0, 4.2313330701600911252e+1, 6.8718700749205790830e+2, 5.3941960214247511077e+3,
      2.1213794301586595867e+4, 3.9307895800092710610e+4, 2.8729085735721942674e+4, 5.2264952788528545610e+3]
_C = [1.42343711074968357734e0, 4.63033784615654529590e0, 5.76949722146069140550e0, 3.64784832476320460504e0,
      1.27045825245236838258e0, 2.41780725177450611770e-1, 2.27238449892691845833e-2, 7.74545014278341407640e-4]
_D = [1.0, 2.05319162663775882187e0, 1.67638483018380384940e0, 6.89767334985100004550e-1,
      1.48103976427480074590e-1, 1.51986665636164571966e-2, 5.47593808499534494600e-4, 1.05075007164441684324e-9]
_E = [6.65790464350110377720e0, 5.46378491116411436990e0, 1.78482653991729133580e0, 2.96560571828504891230e-1,
      2.65321895265761230930e-2, 1.24266094738807843860e-3, 2.71155556874348757815e-5, 2.01033439929228813265e-7]
_F = [1.0, 5.99832206555887937690e-1, 1.36929880922735805310e-1, 1.48753612908506148525e-2,
      7.86869131145613259100e-4, 1.84631831751005468180e-5, 1.42151175831644588870e-7, 2.04426310338993978564e-15]
_LOW = 0.5 * math.erfc(2.0 / math.sqrt(2.0))   # Phi(-2)


def _i64(value):
    """A uint64 constant as the int64 of the same bits."""
    return tf.constant(np.array(value, np.uint64).view(np.int64), tf.int64)


def _shift_right(x, bits):
    """Logical right shift of int64 x (as uint64) by a Python int in [1, 63]: the arithmetic shift
    with the sign's copies masked off."""
    return tf.bitwise.bitwise_and(tf.bitwise.right_shift(x, tf.constant(bits, tf.int64)),
                                  tf.constant((1 << (64 - bits)) - 1, tf.int64))


def mix64(z):
    """splitmix64's finalizer (kernels/core/hash.h) on int64 z of any shape, bits as uint64:
    int64 multiplication and addition wrap as uint64's do."""
    z = tf.math.multiply(tf.bitwise.bitwise_xor(z, _shift_right(z, 30)), _i64(0xBF58476D1CE4E5B9))
    z = tf.math.multiply(tf.bitwise.bitwise_xor(z, _shift_right(z, 27)), _i64(0x94D049BB133111EB))
    return tf.bitwise.bitwise_xor(z, _shift_right(z, 31))


def normal_quantile(p):
    """AS241 Phi^-1(p) of float64 p in (0, 1), in stock ops: the six rational polynomials of its
    three branches evaluated together (Horner's rule over a [..., 6] stack, as AS241 evaluates
    each: the same arithmetic per value), then each value's branch picked."""
    q = p - 0.5
    r_mid = 0.180625 - q * q
    r = tf.sqrt(-tf.math.log(tf.where(q < 0, p, 1.0 - p)))
    x = tf.stack([r_mid, r_mid, r - 1.6, r - 1.6, r - 5.0, r - 5.0], -1)
    coefficients = np.stack([_A, _B, _C, _D, _E, _F], -1)   # [8, 6]
    poly = tf.constant(coefficients[7], tf.float64)
    for i in range(6, -1, -1):
        poly = poly * x + coefficients[i]
    mid, near, far = poly[..., 0] / poly[..., 1], poly[..., 2] / poly[..., 3], poly[..., 4] / poly[..., 5]
    tail = tf.where(r <= 5.0, near, far)
    return tf.where(tf.abs(q) <= 0.425, q * mid, tf.where(q < 0, -tail, tail))


def init_rows(spec, keys, dim):
    """float32 [N, dim]: the initial rows of int64 keys [N] under an EmbeddingVariable's
    initializer_spec (kind, a, b, seed), as kernels/core/initializer.h computes them."""
    kind, a, b, seed = spec
    n = tf.shape(keys)[0]
    if kind in ("zeros", "constant"):
        return tf.fill([n, dim], tf.constant(a if kind == "constant" else 0.0, tf.float32))
    a, b = float(np.float32(a)), float(np.float32(b))
    salt = int(np.array(int(seed) & (2**64 - 1), np.uint64) + np.uint64(0x9E3779B97F4A7C15))
    base = mix64(tf.bitwise.bitwise_xor(keys, mix64(_i64(salt))))
    offsets = _i64([j << 32 for j in range(dim)])
    bits = mix64(base[:, None] + offsets[None, :])
    u = (tf.cast(_shift_right(bits, 11), tf.float64) + 0.5) * 2.0**-53
    if kind == "uniform":
        v = a + (b - a) * u
    elif kind == "normal":
        v = a + b * normal_quantile(u)
    else:
        v = a + b * normal_quantile(_LOW + u * (1.0 - 2.0 * _LOW))
    return tf.cast(v, tf.float32)


def feature_tag(ids, tags):
    """tfps.ops.feature_tag in stock ops: int64 ids (any shape) -> (tag << 48) | low, low the id
    if it is in [0, 2^48), else mix64(id)'s low 48 bits. tags: an int, or one per column of ids'
    last dim."""
    mask = (1 << TAG_BITS) - 1
    low = tf.where((ids >= 0) & (ids <= mask), ids, tf.bitwise.bitwise_and(mix64(ids), tf.constant(mask, tf.int64)))
    tag = tf.constant(np.left_shift(np.asarray(tags, np.int64), TAG_BITS), tf.int64)
    return tf.bitwise.bitwise_or(low, tag)


class StockTable:
    """One table of a stock graph (see the module doc): keys, values, index; lookup() reads it."""

    def __init__(self, name, dim, initializer_spec):
        self.name, self.dim, self.initializer_spec = name, int(dim), initializer_spec
        with tf.compat.v1.name_scope(None), tf.compat.v1.name_scope(name + "/"):   # NAME/stock_...
            self.keys = tf.compat.v1.Variable(tf.zeros([0], tf.int64), name="stock_keys", trainable=False,
                                              shape=tf.TensorShape([None]), use_resource=True)
            self.values = tf.compat.v1.Variable(tf.zeros([1, self.dim], tf.float32), name="stock_values",
                                                trainable=False, shape=tf.TensorShape([None, self.dim]),
                                                use_resource=True)
            self.index = tf.lookup.experimental.DenseHashTable(
                tf.int64, tf.int64, default_value=0, empty_key=EMPTY_KEY, deleted_key=DELETED_KEY,
                checkpoint=False, name="stock_index")

    def fill_index(self):
        """The op that (re)fills the index from the keys variable: key i -> row 1 + i."""
        keys = self.keys.read_value()
        return self.index.insert(keys, tf.range(1, tf.size(keys, out_type=tf.int64) + 1))

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


def use_stock_tables(graph):
    """Makes `graph` a stock graph: the tables get_embedding_variable builds in it are StockTables."""
    refs = graph.get_collection_ref(_KEY)
    if not refs:
        refs.append({})
    return refs[0]


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

    def load(self, exported):
        """Replaces the contents with an export() dict's keys and values (other parts ignored)."""
        keys = tf.reshape(tf.convert_to_tensor(exported["keys"], tf.int64), [-1])
        values = tf.reshape(tf.convert_to_tensor(exported["values"], tf.float32), [-1, self.dim])
        with tf.control_dependencies([self._checked(keys)]):
            old = tf.identity(self._read(self.keys))
            removed = tf.raw_ops.LookupTableRemoveV2(table_handle=self.index, keys=old)
        with tf.control_dependencies([removed]):
            assigned = [tf.raw_ops.AssignVariableOp(resource=self.keys, value=keys),
                        tf.raw_ops.AssignVariableOp(resource=self.values, value=tf.concat(
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
