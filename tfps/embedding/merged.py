"""Feature embeddings with automatic table merging and two-stage deduplication.

A feature (a named id stream with its own embedding) gets a 15-bit tag from its name; its ids
become keys (tag << 48) | id (tfps.ops.feature_tag). Features whose tables
would be alike -- same dim, key dtype, initializer and options -- share one physical table
(`merge=True`, the default), so one lookup serves them all:

  stage 1+2 dedup: the tagged ids of every feature of a table are deduplicated together
    (one unique_partition), which removes repeats within a feature and, for features that
    read the same ids (two embeddings of one categorical column share its tag), across them;
  one probe per distinct key per shard, one gather back, then a split per feature.

Keys of different features never collide (different tags); within a feature, ids in
[0, 2^48) are exact and other ids collide with probability 2^-48 per pair. Initial values come
from the tagged key and a seed shared by the table, so a merged and an unmerged model start,
and train, identically.
"""
import dataclasses
import zlib

import tensorflow as tf

from tfps.embedding.initializers import init_spec
from tfps.embedding.lookup import _lookup_flat, combine_sparse
from tfps.embedding import stock
from tfps.embedding.model_graph import ModelGraph
from tfps.embedding.options import EmbeddingOptions
from tfps.embedding.variable import EmbeddingVariable, get_embedding_variable
from tfps.ops.unique_partition_ops import MAX_TAG, feature_tag, feature_untag

DEFAULT_SEED = 0x7F5A  # seed of feature tables whose initializer names none


@dataclasses.dataclass(frozen=True)
class Feature:
    """A named id stream with its embedding: dim, initializer (TF initializer or None), key dtype."""
    name: str
    dim: int
    initializer: object = None
    key_dtype: tf.DType = tf.int64
    options: EmbeddingOptions = EmbeddingOptions()

    @property
    def tag(self):
        return zlib.crc32(self.name.encode("utf-8")) % MAX_TAG + 1


def physical_table(feature, model_graph=None):
    """(physical EmbeddingVariable, tag) holding `feature`'s rows in the model graph (default: the
    default graph's); merged tables are shared, kept in model_graph.merged.

    A merged table's name comes from what its rows are (dim, key dtype, initializer), never
    from where it runs or how it is kept: the shard count is a placement choice (a checkpoint
    restores into any other), and admission and eviction rules can change between runs. The
    features of one table share those options (a feature asking for others is refused: give
    it merge=False). Two features of one table whose tags collide are refused whatever their
    order (a tag is the feature's identity inside the table)."""
    model_graph = model_graph or ModelGraph.of()
    groups = model_graph.merged
    spec = init_spec(feature.initializer, feature.dim, feature.name, DEFAULT_SEED)
    if feature.options.merge:
        group = (feature.dim, feature.key_dtype.name, spec)
        name = "tfps_merged/d{}_{}_{:08x}".format(feature.dim, feature.key_dtype.name,
                                                  zlib.crc32(repr(group).encode()))
    else:
        group = ("own", feature.name)
        name = f"tfps_features/{feature.name}"
    if group in groups:
        ev, tags = groups[group]
        owner = tags.setdefault(feature.tag, feature.name)
        if owner != feature.name:
            raise ValueError(
                f"features {owner!r} and {feature.name!r} have the same 15-bit tag {feature.tag} and would "
                f"share rows in merged table {ev.name!r}; give one of them EmbeddingOptions(merge=False) "
                f"or another name")
        if ev.options.table_key() != feature.options.table_key() or ev.num_shards != feature.options.num_shards:
            raise ValueError(f"feature {feature.name!r} asks for {feature.options}, but merged table {ev.name!r} "
                             f"(features {sorted(tags.values())}) has {ev.options}: the features of one table "
                             f"share its options; give {feature.name!r} EmbeddingOptions(merge=False)")
        return ev, feature.tag
    with tf.compat.v1.variable_scope(tf.compat.v1.VariableScope(name="", reuse=tf.compat.v1.AUTO_REUSE)):
        ev = get_embedding_variable(name, feature.dim, initializer=feature.initializer, key_dtype=tf.int64,
                                    num_shards=feature.options.num_shards, default_seed=DEFAULT_SEED,
                                    options=feature.options, model_graph=model_graph)
    groups[group] = (ev, {feature.tag: feature.name})
    return ev, feature.tag


def _keys(feature, ev, ids):
    if feature.key_dtype == tf.string:
        ids = tf.strings.to_hash_bucket_fast(ids, 2**63 - 1)
    elif ids.dtype != tf.int64:
        ids = ev.to_keys(ids)
    return _tag(ids, feature.tag)


def _tag(ids, tags):
    """feature_tag, in stock ops in a stock graph (tfps.embedding.stock)."""
    return stock.feature_tag(ids, tags) if stock.stock_tables() is not None else feature_tag(ids, tags)


def lookup_features(requests, insert=True, stats=None, combine=combine_sparse, step=None, model_graph=None):
    """Rows of several features, one fused lookup per physical table.

    Args:
      requests: list of (Feature, ids) where ids is a Tensor of any shape, or a SparseTensor
        (then with a combiner: (Feature, sp_ids, combiner) -> combined [rows, dim]).
      insert: True while training.
      stats: optional dict; gets int64 scalars 'ids_stage1' (sum of per-feature distinct ids)
        and 'ids_stage2' (distinct keys actually probed) per step.
      combine: how sparse requests are combined (combine_sparse: tf.nn.embedding_lookup_sparse
        rows; combine_padded: one row per example, as feature columns give).
      step: the tfps.embedding.TrainingStep of the lookups (None: model_graph's).
      model_graph: the tfps.embedding.ModelGraph holding the tables (None: the default graph's).

    Returns:
      one tensor per request: ids.shape + [dim] for dense ids; [R, dim] for sparse ones.
    """
    model_graph = model_graph or ModelGraph.of()
    step = step or model_graph.step
    groups = {}
    for i, req in enumerate(requests):
        feature, ids = req[0], req[1]
        ev, _ = physical_table(feature, model_graph)
        values = ids.values if isinstance(ids, tf.SparseTensor) else tf.reshape(ids, [-1])
        keys = _keys(feature, ev, values)
        groups.setdefault(ev.name, (ev, []))[1].append((i, keys))
    out = [None] * len(requests)
    stage1, stage2 = [], []
    for ev, members in groups.values():
        sizes = [tf.size(k) for _, k in members]
        rows = _lookup_flat(ev, tf.concat([k for _, k in members], 0), insert, step)
        if stats is not None:
            stage1 += [tf.size(tf.unique(k)[0]) for _, k in members]
            stage2.append(tf.size(tf.unique(tf.concat([k for _, k in members], 0))[0]))
        for (i, _), part in zip(members, tf.split(rows, sizes, num=len(members))):
            req = requests[i]
            if isinstance(req[1], tf.SparseTensor):
                out[i] = combine(part, req[1], None, req[2] if len(req) > 2 else "mean")
            else:
                shape = tf.concat([tf.shape(req[1], out_type=tf.int32), [ev.dim]], 0)
                out[i] = tf.reshape(part, shape)
                out[i].set_shape(req[1].shape.concatenate([ev.dim]))
    if stats is not None:
        stats["ids_stage1"] = tf.cast(tf.add_n(stage1), tf.int64)
        stats["ids_stage2"] = tf.cast(tf.add_n(stage2), tf.int64)
    return out


def lookup_feature_matrix(features, ids, insert=True, stats=None, step=None, model_graph=None):
    """Rows of F single-valued features given as one matrix: ids [B, F] -> [B, F, dim].

    When the features share one physical table (all merge-able alike), the whole matrix is
    tagged column-wise, deduplicated and probed in one pass with no per-feature slicing;
    otherwise it falls back to lookup_features per column. step, model_graph: as for lookup_features.
    """
    model_graph = model_graph or ModelGraph.of()
    step = step or model_graph.step
    tables = [physical_table(f, model_graph) for f in features]
    if len({ev.name for ev, _ in tables}) == 1 and all(f.key_dtype == tf.int64 for f in features):
        ev = tables[0][0]
        ids = tf.convert_to_tensor(ids)
        ids = ids if ids.dtype == tf.int64 else ev.to_keys(ids)
        keys = _tag(ids, [tag for _, tag in tables])
        flat = tf.reshape(keys, [-1])
        if stats is not None:
            stats["ids_stage1"] = tf.cast(tf.add_n([tf.size(tf.unique(keys[:, f])[0])
                                                    for f in range(len(features))]), tf.int64)
            stats["ids_stage2"] = tf.cast(tf.size(tf.unique(flat)[0]), tf.int64)
        rows = _lookup_flat(ev, flat, insert, step)
        out = tf.reshape(rows, [-1, len(features), ev.dim])
        out.set_shape(ids.shape.concatenate([ev.dim]))
        return out
    return tf.stack(lookup_features([(f, ids[:, i]) for i, f in enumerate(features)], insert, stats,
                                    step=step, model_graph=model_graph), axis=1)


def export_feature(feature, model_graph=None):
    """Rows of one logical feature, read out of its (possibly shared) table: dict of ids [N]
    (exact for ids that were in [0, 2^48)), values [N, dim], slots, freq, last_step."""
    ev, tag = physical_table(feature, model_graph)
    exported = ev.export()
    mask, ids = feature_untag(exported["keys"], tag)
    out = {k: tf.boolean_mask(v, mask) for k, v in exported.items() if k not in ("keys", "slot_init", "admission")}
    out["ids"] = ids
    return out


__all__ = ["EmbeddingOptions", "EmbeddingVariable", "Feature", "export_feature", "lookup_feature_matrix",
           "lookup_features", "physical_table"]
