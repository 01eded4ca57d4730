"""Checkpoint tools for tables: restore into a different number of shards, and inspection."""
import numpy as np
import tensorflow as tf

from tfps.embedding.saveable import PARTS

_DTYPES = {"keys": tf.int64, "values": tf.float32, "slots": tf.float32, "freq": tf.int64,
           "last_step": tf.int64, "slot_init": tf.float32}


def checkpoint_tables(checkpoint):
    """{table name: number of shards} of the tables in a checkpoint (prefix or directory)."""
    path = tf.train.latest_checkpoint(checkpoint) or checkpoint
    tables = {}
    for name, _ in tf.train.list_variables(path):
        if name.endswith("-keys") and "/shard_" in name:
            table = name[:name.rindex("/shard_")]
            tables[table] = tables.get(table, 0) + 1
    return tables


def restore_resharded(checkpoint, ev, source_name=None):
    """An op that fills `ev` from the checkpoint's table `source_name` (default ev.name), whatever
    number of shards it was saved with: every saved row lands in the shard floormod(key, k) of
    ev, value, slots, freq and last_step unchanged.

    Use it where tf.compat.v1.train.Saver cannot (the shard count changed); restore the dense
    variables with a Saver over them."""
    path = tf.train.latest_checkpoint(checkpoint) or checkpoint
    name = source_name or ev.name
    shards = checkpoint_tables(path).get(name)
    if not shards:
        raise ValueError(f"restore_resharded: checkpoint {path!r} holds no table {name!r} "
                         f"(it has {sorted(checkpoint_tables(path))})")
    parts = {p: [] for p in PARTS}
    for i in range(shards):
        names = [f"{name}/shard_{i}-{p}" for p in PARTS]
        tensors = tf.raw_ops.RestoreV2(prefix=path, tensor_names=names, shape_and_slices=[""] * len(PARTS),
                                       dtypes=[_DTYPES[p] for p in PARTS])
        for p, t in zip(PARTS, tensors):
            parts[p].append(t)
    exported = {p: tf.concat(ts, 0) for p, ts in parts.items() if p != "slot_init"}
    exported["slot_init"] = parts["slot_init"][0]
    return ev.load(exported)


def inspect(checkpoint, top=5):
    """Per table of a checkpoint: rows, bytes, dim, slots, and the `top` ids by update count."""
    path = tf.train.latest_checkpoint(checkpoint) or checkpoint
    reader = tf.train.load_checkpoint(path)
    out = []
    for table, shards in sorted(checkpoint_tables(path).items()):
        arrays = {p: [reader.get_tensor(f"{table}/shard_{i}-{p}") for i in range(shards)] for p in PARTS}
        keys = np.concatenate(arrays["keys"])
        freq = np.concatenate(arrays["freq"])
        values = np.concatenate(arrays["values"])
        slots = np.concatenate(arrays["slots"])
        order = np.argsort(-freq, kind="stable")[:top]
        out.append({"table": table, "shards": shards, "rows": int(len(keys)), "dim": int(values.shape[1]),
                    "slots": int(len(arrays["slot_init"][0])),
                    "bytes": int(keys.nbytes + values.nbytes + slots.nbytes + freq.nbytes + 8 * len(keys)),
                    "top_ids_by_freq": [[int(keys[i]), int(freq[i])] for i in order]})
    return out
