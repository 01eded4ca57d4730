"""Checkpoint tools for tables: what a checkpoint holds, whether it fits a graph, inspection,
and restoring one table under another name."""
import numpy as np
import tensorflow as tf

from tfps.embedding import layout


def _path(checkpoint):
    return tf.train.latest_checkpoint(checkpoint) or checkpoint


def checkpoint_tables(checkpoint):
    """{table name: {column: shape}} of the tables in a checkpoint (prefix or directory), each as
    one table (its parts' rows summed; tfps.embedding.layout)."""
    reader = tf.train.load_checkpoint(_path(checkpoint))
    return {name: layout.table_shapes(reader, name) for name in layout.table_names(reader.get_variable_to_shape_map())}


def table_problems(held, variables, name_of=lambda ev: ev.name, what="checkpoint"):
    """What keeps a bundle from restoring `variables` (EmbeddingVariables) exactly: ["table 'x'
    ..."] for a table or one of its columns missing, or another dim. held: {name in the bundle:
    layout.table_shapes} (checkpoint_tables' for a checkpoint); name_of(ev): a table's name there;
    what: the bundle's kind, for the message."""
    problems = []
    for ev in variables:
        shapes = held.get(name_of(ev))
        if shapes is None:
            problems.append(f"table {ev.name!r} is not there")
            continue
        missing = [c for c in layout.ROW_COLUMNS + ("slot_init",) if shapes[c] is None]
        if missing:
            problems.append(f"table {ev.name!r} lacks {missing} (a partly written {what}?)")
        elif shapes["values"][1] != ev.dim:
            problems.append(f"table {ev.name!r} has dim {shapes['values'][1]} there, the model asks for {ev.dim}")
    return problems


def check_tables(checkpoint, variables, before_parts=False):
    """Raises ValueError naming every table of `variables` (EmbeddingVariables) that the
    checkpoint cannot restore exactly: missing, a part missing, or another dim, or -- unless
    before_parts (a reader of the parts' own ops: restore_table, tfps serve --follow) -- in the
    layout before parts, which a Saver does not read. Reads only the checkpoint's index, so a
    model is refused before any table changes."""
    path = _path(checkpoint)
    shapes = dict(tf.train.list_variables(path))
    legacy = [ev.name for ev in variables if layout.is_legacy(shapes, ev.name)]
    if legacy and not before_parts:
        raise ValueError(f"checkpoint {path} holds table {legacy[0]!r} in the layout before parts ({legacy[0]}-keys, "
                         f"one tensor for all shards), which a Saver no longer reads: restore it with "
                         f"tfps.embedding.checkpoint_tools.restore_table and save it again")
    saved = checkpoint_tables(path)
    problems = table_problems(saved, variables)
    if problems:
        raise ValueError(f"checkpoint {path} does not match the model: " + "; ".join(problems) +
                         f". Tables in the checkpoint: {sorted(saved)}")


def restore_table(checkpoint, ev, source_name=None, slice_bytes=8 << 20):
    """An op that fills `ev` from the checkpoint's table `source_name` (default ev.name), saved
    with any number of shards, or in the layout before parts (for restoring a table under another
    name, or from an old checkpoint; a Saver restores every table under its own name by itself).
    Each shard reads the parts that can hold its keys in slices of about `slice_bytes`, and no
    shard changes before every shard has read its rows."""
    from tfps.embedding.saveable import restore_shards
    path = _path(checkpoint)
    name = source_name or ev.name
    held = checkpoint_tables(path)
    if name not in held:
        raise ValueError(f"restore_table: checkpoint {path!r} holds no table {name!r} (it has {sorted(held)})")
    return tf.group(*restore_shards(ev, path, table_name=name, slice_bytes=slice_bytes))


MERGED_PREFIX = "tfps_merged/"   # the name of a table that merged features (tfps.embedding.merged)
TAG_SHIFT = 48                   # a merged table's key: (feature tag << 48) | id


def inspect(checkpoint, top=5, feature_names=()):
    """Per table of a checkpoint: rows, bytes, dim (the row's width), slots, and the `top` ids by
    update count. A merged table also gets `features`: per feature tag (a key's top bits: the
    feature's tag, crc32 of its name) its rows and updates (the sum of its rows' update counts),
    and its feature's name where `feature_names` holds one with that tag (else null)."""
    from tfps.embedding.merged import Feature
    names = {Feature(n, 1).tag: n for n in feature_names}
    path = _path(checkpoint)
    reader = tf.train.load_checkpoint(path)
    out = []
    for table in sorted(checkpoint_tables(path)):
        t = layout.read_table(reader, table, ("keys", "values", "freq"))
        keys, values, freq, slot_init = t["keys"], t["values"], t["freq"], t["slot_init"]
        order = np.argsort(-freq, kind="stable")[:top]
        out.append({"table": table, "rows": int(len(keys)), "dim": int(values.shape[1]),
                    "slots": int(len(slot_init)),
                    "bytes": int(keys.nbytes + values.nbytes * (1 + len(slot_init)) + freq.nbytes + 8 * len(keys)),
                    "top_ids_by_freq": [[int(keys[i]), int(freq[i])] for i in order]})
        if table.startswith(MERGED_PREFIX):
            tags, position = np.unique(keys >> TAG_SHIFT, return_inverse=True)
            rows = np.bincount(position, minlength=len(tags))
            updates = np.bincount(position, weights=freq.astype(np.float64), minlength=len(tags))
            out[-1]["features"] = [{"tag": int(t), "feature": names.get(int(t)), "rows": int(r), "updates": int(u)}
                                   for t, r, u in zip(tags, rows, updates)]
    return out


class Saver(tf.compat.v1.train.Saver):
    """tf.compat.v1.train.Saver that checks a checkpoint against the graph's tables before it
    restores anything (check_tables): a checkpoint that does not fit is refused with one
    ValueError naming every table that does not fit, and every table stays as it was. The tfps
    estimator runners use it; a plain Saver restores the same checkpoints, checking each table
    only as it restores it."""

    def restore(self, sess, save_path):
        from tfps.embedding.variable import embedding_variables
        if save_path is not None:
            var_list = self._var_list
            tables = [ev for ev in embedding_variables(sess.graph)
                      if var_list is None or any(x in tf.nest.flatten(var_list) for x in ev.saveables)]
            if tables and tf.io.gfile.exists(save_path + ".index"):
                check_tables(save_path, tables)
        if self.saver_def is None:   # built with defer_build and used directly (Estimator's export)
            self.build()
        return super().restore(sess, save_path)
