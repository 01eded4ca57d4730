"""Criteo display-advertising logs (text): `label \\t I1..I13 \\t C1..C26`, no header, one or many
files, plain or gzip, parsed in TF ops by tf.data (no Python per-example loop).

Per row:
  - label: "0" or "1".
  - I1..I13 (integers, may be empty): fed as dense log1p(max(x, 0)) (0 when empty), and as
    categorical buckets: floor(log(x)^2) for x > 2, x itself for x <= 2 (as in the Kaggle
    winners and BARS), a bucket of its own when empty.
  - C1..C26 (hex strings, may be empty): hashed to int64 ids (tf.strings.to_hash_bucket_fast);
    an empty field is an id of its own.

    ds = criteo_dataset(["day_0.gz"], batch_size=1024)
    features, labels = next(iter(ds))   # features["dense"] float32 [B, 13],
                                        # features["ids"] int64 [B, 39] (13 buckets + 26 hashes),
                                        # features["bad_rows"] int64 [] (rows skipped in the batch)
                                        # labels float32 [B]

A malformed row (wrong column count, a non-numeric integer, a label other than 0/1) stops the
input with InvalidArgumentError naming the file, the line number and what is wrong; with
skip_bad_rows=True it is dropped and counted in features["bad_rows"] (on the first pass over the
files; later passes skip it again without counting). A gzip file that ends early (cut mid-stream,
its trailer missing or not matching: tfps.data.lines) is such an error at the line where its data
ends, saying "truncated", or with skip_bad_rows one bad row (the partial last line, however much
was lost; a warning names the file). An empty line (nothing between two newlines, "\r" aside) is
not a row and is not counted; a line of blanks is a malformed row.
"""
import tensorflow as tf

from tfps.data.lines import line_batches
from tfps.data.schema import Schema, fail_without_rows, graph_code, int64_range, share
from tfps.ops.data import check_rows

NUM_INTEGER, NUM_CATEGORICAL = 13, 26
NUM_FIELDS = 1 + NUM_INTEGER + NUM_CATEGORICAL
# Ids of the categorical buckets: integer feature j's bucket b is (j << 32) | b, and an empty
# integer field is bucket MISSING; categorical features hash their strings (the feature tags of
# tfps.embedding.merged keep the features apart). An empty categorical field hashes "".
MISSING_BUCKET = (1 << 31) - 1
SCHEMA = Schema(num_dense=NUM_INTEGER, id_features=tuple([f"I{j + 1}" for j in range(NUM_INTEGER)] +
                                                         [f"C{j + 1}" for j in range(NUM_CATEGORICAL)]))


def _batches(paths, batch_size):
    """Batches of (file [b], line numbers from 1 [b], lines [b], reasons [b]) of every file, in
    order (tfps.data.lines: reasons are empty but for a gzip file's truncated end). Batches end at
    file ends."""
    ds = None
    for path in paths:
        path = str(path)
        batches = line_batches(path, batch_size).map(
            lambda numbers, lines, reasons, path=path: (tf.fill(tf.shape(lines), path), numbers, lines, reasons))
        ds = batches if ds is None else ds.concatenate(batches)
    return ds


def _parse(paths_lines, skip_bad_rows):
    """Batched: (files [B], line numbers [B], lines [B], reasons [B], pass) -> (features, labels,
    pass, rows read).
    Empty lines are not rows; malformed rows (and a truncated file's end: a reason) count in
    bad_rows on the first pass over the files only."""
    files, numbers, lines, truncated, epoch = paths_lines
    text = (tf.strings.length(lines) > 0) | (tf.strings.length(truncated) > 0)
    files, numbers, lines, truncated = (tf.boolean_mask(t, text) for t in (files, numbers, lines, truncated))
    whole = tf.equal(tf.strings.length(truncated), 0)
    fields = tf.strings.split(lines, "\t")                             # ragged [B, ?]
    count_ok = tf.equal(fields.row_lengths(), NUM_FIELDS)
    padded = fields.to_tensor(default_value="", shape=[None, NUM_FIELDS])
    label_s, int_s, cat_s = padded[:, 0], padded[:, 1:1 + NUM_INTEGER], padded[:, 1 + NUM_INTEGER:]
    label_ok = tf.strings.regex_full_match(label_s, "[01]")
    int_valid = tf.strings.regex_full_match(int_s, r"(-?[0-9]{1,19})?") & int64_range(int_s)   # [B, 13]
    int_ok = tf.reduce_all(int_valid, axis=1)
    ok = count_ok & label_ok & int_ok & whole
    if skip_bad_rows:
        bad_rows = tf.where(tf.equal(epoch, 0), tf.reduce_sum(tf.cast(~ok, tf.int64)), 0)
        label_s, int_s, cat_s, int_valid = (tf.boolean_mask(t, ok) for t in (label_s, int_s, cat_s, int_valid))
    else:
        def reasons():   # built only for a batch with a bad row
            bad_column = tf.argmax(tf.cast(~int_valid, tf.int32), axis=1, output_type=tf.int32)
            return tf.where(~whole, truncated, tf.where(~count_ok, tf.strings.join([
                "has ", tf.strings.as_string(fields.row_lengths()), f" tab-separated fields, expected {NUM_FIELDS} "
                f"(label, {NUM_INTEGER} integers, {NUM_CATEGORICAL} categoricals)"]),
                tf.where(~label_ok, tf.strings.join(["has label '", label_s, "', expected 0 or 1"]),
                         tf.strings.join(["has I", tf.strings.as_string(bad_column + 1), " = '",
                                          tf.gather(int_s, bad_column, batch_dims=1),
                                          tf.where(tf.strings.regex_full_match(
                                              tf.gather(int_s, bad_column, batch_dims=1), "-?[0-9]+"),
                                              "', out of range: an integer field holds an int64, "
                                              "-9223372036854775808 to 9223372036854775807",
                                              "', not an integer")]))))
        why = tf.cond(tf.reduce_all(ok), lambda: tf.fill(tf.shape(ok), ""), reasons)
        check = check_rows(ok, files, numbers, why, reader="criteo")
        with tf.control_dependencies([check]):
            label_s = tf.identity(label_s)
        bad_rows = tf.constant(0, tf.int64)
    present = tf.strings.length(int_s) > 0
    # (Invalid fields read as "0": the check above fails the batch, whichever op runs first.)
    ints = tf.strings.to_number(tf.where(present & int_valid, int_s, "0"), tf.int64)
    dense = tf.math.log1p(tf.cast(tf.maximum(ints, 0), tf.float32))
    logs = tf.math.log(tf.cast(tf.maximum(ints, 1), tf.float64))
    buckets = tf.where(ints > 2, tf.cast(tf.floor(logs * logs), tf.int64), ints)
    buckets = tf.where(present, tf.bitwise.bitwise_and(buckets, 0x7FFFFFFF), MISSING_BUCKET)
    int_ids = tf.bitwise.bitwise_or(tf.bitwise.left_shift(tf.range(NUM_INTEGER, dtype=tf.int64), 32), buckets)
    cat_ids = tf.strings.to_hash_bucket_fast(cat_s, 2**63 - 1)
    features = {"dense": dense, "ids": tf.concat([int_ids, cat_ids], 1), "bad_rows": bad_rows}
    return features, tf.strings.to_number(label_s, tf.float32), epoch, tf.size(lines)


@graph_code
def criteo_dataset(paths, batch_size, skip_bad_rows=False, shard_index=0, num_shards=1, repeat=False, start=0):
    """Batches of parsed Criteo rows from `paths` (one or many files, .gz read as gzip).

    Args:
      paths: file paths, in reading order.
      batch_size: rows per batch (the last of each file may be smaller; with skip_bad_rows,
        batches lose their bad rows).
      skip_bad_rows: drop malformed rows (counted in features["bad_rows"]) instead of failing.
      shard_index, num_shards, start: a trainer's share: batches start + shard_index, start +
        shard_index + num_shards, ... (tfps.data.schema.share; start may be a function).
      repeat: cycle through the files forever.

    Returns:
      tf.data.Dataset of (features, labels), see the module docstring.
    """
    if not paths:
        raise ValueError("criteo_dataset: no files given")
    def one_pass(epoch):
        return _batches(paths, batch_size).map(lambda f, n, l, r: (f, n, l, r, epoch))
    ds = tf.data.Dataset.range(2**62).flat_map(one_pass) if repeat else one_pass(tf.constant(0, tf.int64))
    ds = share(ds, start, shard_index, num_shards)
    parsed = ds.map(lambda f, n, l, r, e: _parse((f, n, l, r, e), skip_bad_rows), num_parallel_calls=tf.data.AUTOTUNE)
    if repeat and skip_bad_rows:   # every row skipped: an error after a pass, not an endless skip
        parsed = fail_without_rows(parsed, "criteo", f"{paths[0]}" + (f" and {len(paths) - 1} more files"
                                                                      if len(paths) > 1 else ""))
    else:
        parsed = parsed.map(lambda f, l, e, rows: (f, l))
    # a batch left without rows is dropped, unless it carries the count of the bad rows it skipped
    parsed = parsed.filter(lambda f, l: tf.logical_or(tf.size(l) > 0, f["bad_rows"] > 0))
    return parsed.prefetch(tf.data.AUTOTUNE)
