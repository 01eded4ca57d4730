"""EmbeddingVariable: a dynamic hash-table embedding, sharded over k tables."""
import dataclasses
import logging

import tensorflow as tf
from tensorflow.python.ops import resources

from tfps.embedding import initializers, stock
from tfps.embedding.lookup import embedding_lookup
from tfps.embedding.model_graph import ModelGraph
from tfps.embedding.options import EmbeddingOptions
from tfps.embedding.saveable import saveables
from tfps.ops import embedding_table as table_ops


def _check_shape(tensor, want, message):
    """An op failing with InvalidArgumentError (message, the shape got, the shape wanted) unless
    tensor's shape is `want` (int64 [rank]). One Assert op over strings: tf.debugging.assert_equal
    builds a cond and its branches' functions in a graph (about 50 ms of graph building each, four
    per table in every graph that restores one)."""
    def text(shape):
        return tf.strings.reduce_join(tf.strings.as_string(shape), separator=",")
    got, wanted = text(tf.shape(tensor, out_type=tf.int64)), text(want)
    return tf.debugging.Assert(tf.equal(got, wanted), [message, "got shape", got, "wanted", wanted])


class _ResourceCollectionWarningFilter(logging.Filter):
    """Drops MetaGraph export's warning about the RESOURCES collection.

    Tables register there (resources.register_resource, as TF's BoostedTrees does) so that a
    session's ready_op waits for them; the collection's tuples have no proto, so every
    checkpoint save would warn that it skipped them."""

    def filter(self, record):
        return not record.getMessage().startswith("Issue encountered when serializing resources")


tf.get_logger().addFilter(_ResourceCollectionWarningFilter())

@dataclasses.dataclass(frozen=True, eq=False)
class TableShard:
    """The (grad, var) 'var' of a table shard in an optimizer's grads_and_vars."""
    variable: "EmbeddingVariable"
    shard: int

    @property
    def name(self):
        return f"{self.variable.name}/shard_{self.shard}"

    @property
    def handle(self):
        return self.variable.handles[self.shard]

    @property
    def dtype(self):
        return tf.float32


class EmbeddingVariable:
    """A table of int64 (or hashed string) key -> float32 [dim] row that grows with the data.

    Build with `tfps.get_embedding_variable`. Rows of new keys come from the initializer as a
    pure function of (key, seed). With num_shards=k, key x lives in shard floormod(x, k).
    """

    def __init__(self, name, embedding_dim, initializer, key_dtype, num_shards, trainable, default_seed=None,
                 options=None, model_graph=None):
        if int(embedding_dim) <= 0:
            raise ValueError(f"get_embedding_variable({name!r}): embedding_dim must be > 0, got {embedding_dim}")
        if int(num_shards) <= 0:
            raise ValueError(f"get_embedding_variable({name!r}): num_shards must be > 0, got {num_shards}")
        if key_dtype not in (tf.int64, tf.string):
            raise ValueError(f"get_embedding_variable({name!r}): key_dtype must be tf.int64 or tf.string, "
                             f"got {key_dtype!r}")
        self.name = name
        self.model_graph = model_graph   # the tfps.embedding.ModelGraph that holds it (restores check its tables)
        self.dim = int(embedding_dim)
        self.key_dtype = key_dtype
        self.num_shards = int(num_shards)
        self.trainable = trainable
        self.options = options or EmbeddingOptions(num_shards=self.num_shards)
        if not isinstance(self.options, EmbeddingOptions):
            raise ValueError(f"get_embedding_variable({name!r}): options must be tfps.EmbeddingOptions, "
                             f"got {type(self.options).__name__}")
        self.initializer_spec = initializers.init_spec(initializer, self.dim, name, default_seed)
        self.stock = None
        stock_tables = stock.stock_tables()
        if stock_tables is not None:   # a stock graph (tfps.embedding.stock): no tfps op
            self.handles, self.saveables = [], []
            self.stock = stock_tables[name] = stock.StockTable(
                name, self.dim, self.initializer_spec, rows=stock.planned_rows(name))
            return
        kind, a, b, seed = self.initializer_spec
        self.handles = []
        for i in range(self.num_shards):
            shard_name = f"{name}/shard_{i}"
            handle = table_ops.table_handle(self.dim, kind, a, b, seed, shared_name=shard_name,
                                            admit_min_count=self.options.admit_min_count,
                                            admit_sketch_width=self.options.admit_sketch_width, shard=i,
                                            num_shards=self.num_shards, name=f"shard_{i}")
            self.handles.append(handle)
            # Scaffold's default init_op initializes registered resources and its ready_op
            # reports uninitialized ones: after a PS restart, workers wait for the restore.
            with tf.compat.v1.get_default_graph().colocate_with(handle.op):
                resources.register_resource(handle, table_ops.table_initialize(handle),
                                            table_ops.table_is_initialized(handle))
        self.saveables = saveables(self)   # one per shard (tfps.embedding.saveable)

    # -- lookups -------------------------------------------------------------------------
    def lookup(self, ids, insert=True, step=None):
        """ids of any shape -> float32 ids.shape + [dim]; see tfps.embedding_lookup."""
        return embedding_lookup(self, ids, insert=insert, step=step)

    def to_keys(self, ids):
        """ids -> int64 keys (strings hashed, int32 widened); anything else is InvalidArgumentError."""
        if isinstance(ids, tf.SparseTensor):
            raise tf.errors.InvalidArgumentError(None, None, f"{self.name}: use embedding_lookup_sparse for "
                                                 f"SparseTensor ids")
        ids = tf.convert_to_tensor(ids)
        if self.key_dtype == tf.string:
            if ids.dtype != tf.string:
                raise tf.errors.InvalidArgumentError(
                    None, None, f"{self.name}: ids must be tf.string for a string-keyed embedding, got {ids.dtype.name}")
            return tf.strings.to_hash_bucket_fast(ids, 2**63 - 1)
        if ids.dtype == tf.int64:
            return ids
        if ids.dtype in (tf.int32, tf.int16, tf.int8, tf.uint8, tf.uint16, tf.uint32):
            return tf.cast(ids, tf.int64)
        raise tf.errors.InvalidArgumentError(
            None, None, f"{self.name}: ids must be an integer tensor (int64 keys), got {ids.dtype.name}")

    def shard_of(self, keys):
        """int32 shard index of each int64 key (floormod(key, num_shards))."""
        return tf.cast(tf.math.floormod(keys, self.num_shards), tf.int32)

    # -- table maintenance ---------------------------------------------------------------------
    def _per_shard(self, keys, *tensors):
        """Splits keys [N] and row tensors [N, ...] by shard: list of (handle, keys_i, *tensors_i)."""
        keys = self.to_keys(keys)
        if self.num_shards == 1:
            return [(self.handles[0], keys) + tuple(tensors)]
        shard = self.shard_of(keys)
        parts = [tf.dynamic_partition(t, shard, self.num_shards) for t in (keys,) + tuple(tensors)]
        return [(h,) + tuple(p[i] for p in parts) for i, h in enumerate(self.handles)]

    def assign(self, keys, values):
        """Sets the rows of keys [N] to values float32 [N, dim]; returns the op."""
        values = tf.convert_to_tensor(values, tf.float32)
        return tf.group(*[table_ops.table_assign(h, k, v) for h, k, v in self._per_shard(keys, values)])

    def remove(self, keys):
        """Removes keys [N]; returns the int64 number removed."""
        return tf.add_n([table_ops.table_remove(h, k) for h, k in self._per_shard(keys)])

    def size(self):
        """int64 number of keys over all shards."""
        return tf.add_n([table_ops.table_size(h) for h in self.handles])

    def export(self):
        """Every row of every shard, gathered with shard 0: dict of keys int64 [N], values float32
        [N, dim], slots float32 [N, k*dim], freq int64 [N], last_step int64 [N], slot_init float32
        [k], admission int32 [S] (the shards' admission sketches, element-wise max: never below
        any key's count; S = 0 without admission). Each row is read under its shard's lock."""
        graph = tf.compat.v1.get_default_graph()
        parts, sketches = [], []
        for h in self.handles:
            with graph.colocate_with(h.op):
                parts.append(table_ops.table_export(h))
                sketches.append(table_ops.table_export_admission(h))
        with graph.colocate_with(self.handles[0].op):
            out = {name: tf.concat([p[i] for p in parts], 0) for i, name in enumerate(
                ("keys", "values", "slots", "freq", "last_step"))}
            out["slot_init"] = parts[0][5]
            out["admission"] = tf.reduce_max(tf.stack(sketches), 0) if len(sketches) > 1 else sketches[0]
        return out

    def load(self, exported):
        """Replaces the contents with an `export()` dict, from any number of shards: rows are
        re-sharded by floormod(key, num_shards). Every part is checked (dim, slot width, lengths;
        InvalidArgumentError naming the table) before the first shard changes. `admission` is
        optional. Returns the op."""
        graph = tf.compat.v1.get_default_graph()
        with graph.colocate_with(self.handles[0].op):
            keys = tf.convert_to_tensor(exported["keys"], tf.int64)
            values, slots, freq, last_step, slot_init = (
                tf.convert_to_tensor(exported[p], dt) for p, dt in (
                    ("values", tf.float32), ("slots", tf.float32), ("freq", tf.int64), ("last_step", tf.int64),
                    ("slot_init", tf.float32)))
            n = tf.size(keys, out_type=tf.int64)
            what = f"restore of table {self.name!r} (dim {self.dim})"
            checks = [
                tf.debugging.assert_rank(keys, 1, message=f"{what}: keys must be a vector"),
                _check_shape(values, tf.stack([n, self.dim]), f"{what}: values must be [rows, {self.dim}]; a table "
                                                               f"of another dim does not restore into this one"),
                _check_shape(slots, tf.stack([n, self.dim * tf.size(slot_init, out_type=tf.int64)]),
                             f"{what}: slots must be [rows, slots * dim]"),
                _check_shape(freq, tf.reshape(n, [1]), f"{what}: freq must have one entry per key"),
                _check_shape(last_step, tf.reshape(n, [1]), f"{what}: last_step must have one entry per key"),
            ]
            with tf.control_dependencies(checks):
                keys = tf.identity(keys)
                sketch = tf.identity(exported["admission"]) if "admission" in exported else None
        imports = []
        for h, k, v, s, f, l in self._per_shard(keys, values, slots, freq, last_step):
            with graph.colocate_with(h.op):
                imports.append(table_ops.table_import(h, k, v, s, f, l, slot_init))
                if sketch is not None and self.options.admit_min_count > 1:
                    imports.append(table_ops.table_import_admission(h, sketch))
        return tf.group(*imports)

    def apply_delta(self, delta):
        """Applies an incremental checkpoint's rows (dict of keys, values, slots, freq, last_step,
        slot_init, removed; see tfps.estimator.incremental): removes `removed`, then writes the
        rows, each key in its shard whatever shard count wrote the delta. Returns the op."""
        graph = tf.compat.v1.get_default_graph()
        removed = [k for _, k in self._per_shard(delta["removed"])]
        rows = self._per_shard(delta["keys"], delta["values"], delta["slots"], delta["freq"], delta["last_step"])
        ops = []
        for (h, k, v, s, f, l), gone in zip(rows, removed):
            with graph.colocate_with(h.op):
                ops.append(table_ops.table_import_delta(h, k, v, s, f, l, delta["slot_init"], gone))
        return tf.group(*ops)

    def evict(self, step=None):
        """Runs the eviction rules of self.options on every shard; int64 rows evicted.

        step: the current global step (default: the graph's global step)."""
        o = self.options
        if step is None:
            step = tf.compat.v1.train.get_or_create_global_step()
        step = tf.cast(step, tf.int64)
        per_shard_cap = -1 if o.max_rows is None else -(-o.max_rows // self.num_shards)
        counts = []
        for h in self.handles:
            with tf.compat.v1.get_default_graph().colocate_with(h.op):
                counts.append(table_ops.table_evict(
                    h, step, evict_after_steps=-1 if o.evict_after_steps is None else o.evict_after_steps,
                    evict_min_freq=-1 if o.evict_min_freq is None else o.evict_min_freq,
                    evict_l2_below=-1.0 if o.evict_l2_below is None else o.evict_l2_below,
                    max_rows=per_shard_cap, cap_policy=o.cap_policy))
        return tf.add_n(counts)

    def memory_stats(self):
        """dict of int64 scalars summed over shards: rows, bytes_reserved, bytes_in_use (pool,
        index, admission sketch and removed-keys log), pending (keys seen, not admitted yet),
        removed_logged (keys in the removed-keys log); and row_bytes."""
        per_shard = [table_ops.table_memory_stats(h) for h in self.handles]
        stats = tf.add_n(per_shard)
        return {"rows": stats[0], "bytes_reserved": stats[1], "bytes_in_use": stats[2], "pending": stats[4],
                "removed_logged": stats[5], "row_bytes": per_shard[0][3]}

    def set_prefetch_mode(self, mode):
        """An op that sets how every shard of this table prefetches on its batch paths:
        "rolling" (the default), "group" or "off" (results never depend on it). Running it
        returns the modes it replaced, string [num_shards]."""
        modes = []
        for h in self.handles:
            with tf.compat.v1.get_default_graph().colocate_with(h.op):
                modes.append(table_ops.set_prefetch_mode(h, mode))
        return tf.stack(modes)


def get_embedding_variable(name, embedding_dim, initializer=None, key_dtype=tf.int64, num_shards=1,
                           trainable=True, collections=None, default_seed=None, options=None, model_graph=None):
    """Gets or creates a hash-table embedding variable, like tf.compat.v1.get_variable.

    Honours tf.compat.v1.variable_scope (name prefix, reuse=True/AUTO_REUSE) and device scopes
    (the tables are placed where the handles are created).

    Args:
      name: name within the current variable scope.
      embedding_dim: width D of each row.
      initializer: TF initializer (zeros/ones/constant/uniform/normal/truncated_normal) or None
        for truncated_normal(stddev=1/sqrt(D)).
      key_dtype: tf.int64, or tf.string (strings are hashed to int64).
      num_shards: number of tables; key x lives in shard floormod(x, num_shards).
      trainable: whether tfps optimizers train it.
      collections: extra graph collections to add it to.
      default_seed: seed of the initial values when the initializer names none (default: one
        derived from the variable's name).
      options: tfps.EmbeddingOptions (eviction rules; its num_shards must agree with num_shards).
      model_graph: the tfps.embedding.ModelGraph that holds it (None: the default graph's).

    Returns:
      tfps.EmbeddingVariable. Example:
        ev = tfps.get_embedding_variable("item", 8)
        vecs = tfps.embedding_lookup(ev, ids)     # ids int64 [B, L] -> [B, L, 8]
    """
    scope = tf.compat.v1.get_variable_scope()
    full_name = f"{scope.name}/{name}" if scope.name else name
    graph = tf.compat.v1.get_default_graph()
    model_graph = model_graph or ModelGraph.of(graph)
    registry = model_graph.tables
    reuse = scope.reuse
    if full_name in registry:
        if reuse is True or reuse == tf.compat.v1.AUTO_REUSE:
            existing = registry[full_name]
            if existing.dim != int(embedding_dim):
                raise ValueError(f"embedding variable {full_name!r} exists with dim {existing.dim}, "
                                 f"asked for {embedding_dim}")
            return existing
        raise ValueError(f"embedding variable {full_name!r} already exists; use "
                         f"tf.compat.v1.variable_scope(..., reuse=True) or AUTO_REUSE to share it")
    if reuse is True:
        raise ValueError(f"embedding variable {full_name!r} does not exist and the scope has reuse=True")
    with tf.compat.v1.name_scope(None), tf.compat.v1.name_scope(full_name + "/"):
        if options is not None and options.num_shards != num_shards:
            raise ValueError(f"get_embedding_variable({full_name!r}): options.num_shards={options.num_shards} "
                             f"but num_shards={num_shards}")
        ev = EmbeddingVariable(full_name, embedding_dim, initializer, key_dtype, num_shards, trainable,
                               default_seed, options, model_graph)
    registry[full_name] = ev
    for coll in collections or []:
        graph.add_to_collection(coll, ev)
    for saveable in ev.saveables:
        graph.add_to_collection(tf.compat.v1.GraphKeys.SAVEABLE_OBJECTS, saveable)
    return ev


def embedding_variables(graph=None):
    """Every EmbeddingVariable of the graph (its ModelGraph's tables)."""
    return list(ModelGraph.of(graph).tables.values())


def trainable_embedding_variables(graph=None):
    """The trainable EmbeddingVariables of the graph."""
    return ModelGraph.of(graph).trainable_tables()


class AttachedTable(EmbeddingVariable):
    """An EmbeddingVariable over the shard handles a graph already holds, found by their op
    (a graph imported from a SavedModel has the tables' ops but no Python objects): for the
    maintenance ops only -- load, apply_delta, export, size (what `tfps serve --follow` runs)."""

    def __init__(self, handles):   # pylint: disable=super-init-not-called
        first = handles[0].op
        self.name = first.get_attr("shared_name").decode().rsplit("/shard_", 1)[0]
        self.model_graph = None
        self.dim = first.get_attr("dim")
        self.key_dtype = tf.int64
        self.num_shards = first.get_attr("num_shards")
        self.trainable = False
        self.options = EmbeddingOptions(num_shards=self.num_shards, admit_min_count=first.get_attr("admit_min_count"),
                                        admit_sketch_width=first.get_attr("admit_sketch_width"))
        self.handles = list(handles)


def attached_tables(graph):
    """[AttachedTable] of every table whose shard handles `graph` holds (by name), each with its
    handles in shard order; a table whose shards are not all there is an error naming it."""
    shards = {}
    for op in graph.get_operations():
        if op.type == "TfpsTableHandle":
            name, _, shard = op.get_attr("shared_name").decode().rpartition("/shard_")
            shards.setdefault(name, {}).setdefault(int(shard), op.outputs[0])
    tables = []
    for name, handles in sorted(shards.items()):
        count = next(iter(handles.values())).op.get_attr("num_shards")
        if sorted(handles) != list(range(count)):
            raise ValueError(f"table {name!r}: the graph holds shards {sorted(handles)} of {count}")
        tables.append(AttachedTable([handles[i] for i in range(count)]))
    return tables
