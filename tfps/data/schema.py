"""What a reader's batches hold, in the form every tfps model reads.

A batch is (features, labels) with
  features["dense"]  float32 [B, num_dense]   model-ready dense values (a reader applies its transforms)
  features["ids"]    int64   [B, F]           one id per single-valued feature, named id_features[f]
  features[name]     int64   [B, L]           one per list feature (L varies by batch; -1 pads)
  features["user"]   int64   [B]              optional: the user of each row (GAUC)
  features["bad_rows"] int64 []               optional: malformed rows the reader dropped in this batch
  labels             float32 [B]              0 or 1
"""
import dataclasses
import functools
from typing import Tuple

PAD_ID = -1   # pads a list feature's rows to the batch's longest list


@dataclasses.dataclass(frozen=True)
class Schema:
    """The model inputs of a data source.

    num_dense: width of features["dense"].
    id_features: names of the columns of features["ids"] (they name the embedding features, so
      they are part of a checkpoint's identity: two readers of the same data give the same names).
    list_features: names of the variable-length id lists, each its own features[name].
    dense_log1p: the model applies log1p(max(x, 0)) to features["dense"] (the synthetic data feeds
      raw counts; the file readers feed transformed values).
    has_users: features["user"] is present (GAUC is computed).
    """
    num_dense: int
    id_features: Tuple[str, ...]
    list_features: Tuple[str, ...] = ()
    dense_log1p: bool = False
    has_users: bool = False

    def to_params(self):
        return dataclasses.asdict(self)

    @staticmethod
    def from_params(d):
        return Schema(d["num_dense"], tuple(d["id_features"]), tuple(d["list_features"]), d["dense_log1p"],
                      d["has_users"])


def graph_code(build):
    """`build` (a function that makes a tf.data pipeline) run with AutoGraph off for every function
    its datasets map: tfps's readers are written in graph ops (no Python control flow on
    tensors), and AutoGraph's conversion of them cost each process about 3 s of CPU at its start.
    A user's own map functions, built outside, are converted as TensorFlow converts them."""
    @functools.wraps(build)
    def wrapper(*args, **kwargs):
        import tensorflow as tf
        return tf.autograph.experimental.do_not_convert(build)(*args, **kwargs)
    return wrapper


def share(batches, start=0, shard_index=0, num_shards=1):
    """A trainer's share of a stream of batches: batches start + shard_index, start + shard_index +
    num_shards, ... (the interleaving rule of every tfps reader).

    start: an int, or a function called each time the iterator is initialized (a session
    re-created after a failure re-initializes it) that says where to resume, e.g. the global
    step of the latest checkpoint rounded down to a multiple of num_shards."""
    if not 0 <= shard_index < num_shards:
        raise ValueError(f"shard_index must be in [0, {num_shards}), got {shard_index}")
    if callable(start):
        import numpy as np
        import tensorflow as tf
        where = start
        start = tf.reshape(tf.numpy_function(lambda: np.int64(where()), [], tf.int64, stateful=True), [])
    if not (isinstance(start, int) and start == 0):
        batches = batches.skip(start)
    return batches.shard(num_shards, shard_index) if num_shards > 1 else batches


def numpy_batches(make_dataset):
    """Yields the batches of the finite dataset make_dataset() builds, as numpy, read in a graph
    and session of their own (works whether eager execution is on or off)."""
    import tensorflow as tf
    with tf.Graph().as_default():
        batch = tf.compat.v1.data.make_one_shot_iterator(make_dataset()).get_next()
        with tf.compat.v1.Session() as session:
            while True:
                try:
                    yield session.run(batch)
                except tf.errors.OutOfRangeError:
                    return



def fail_without_rows(batches, reader, where):
    """An endless stream of (features, labels, pass number, rows read) as (features, labels),
    failing once a whole pass over the data held no row to train on: every row malformed and
    skipped (data.skip_bad_rows), which an endless reader would otherwise skip forever without a
    word. InvalidArgumentError "READER: nothing to train on in WHERE: a whole pass read N rows,
    all malformed ...", at the first batch after that pass. A trainer that resumes in the middle
    of a pass (its first) counts from the next whole one."""
    import tensorflow as tf
    where = where.replace("{", "(").replace("}", ")")   # tf.strings.format's placeholders

    def step(state, element):
        first, current, good, read = state
        features, labels, epoch, rows = element
        first = tf.where(first < 0, epoch, first)
        current = tf.where(current < 0, epoch, current)
        new = epoch > current
        message = tf.strings.format(
            reader + ": nothing to train on in " + where + ": a whole pass read {} rows and every one was malformed "
            "(data.skip_bad_rows: true skips them); fix the data, or set data.skip_bad_rows: false to stop at the "
            "first bad row with its line", [read])
        check = tf.debugging.Assert(tf.logical_not(new & (current > first) & tf.equal(good, 0)), [message])
        with tf.control_dependencies([check]):
            labels = tf.identity(labels)
        good = tf.where(new, tf.constant(0, tf.int64), good) + tf.size(labels, out_type=tf.int64)
        read = tf.where(new, tf.constant(0, tf.int64), read) + tf.cast(rows, tf.int64)
        return (first, tf.maximum(current, epoch), good, read), (features, labels)

    unset = tf.constant(-1, tf.int64)
    return batches.scan((unset, unset, tf.constant(0, tf.int64), tf.constant(0, tf.int64)), step)


def int64_range(digits):
    """bool, same shape as `digits` (strings of at most 19 digits and a sign, checked elsewhere):
    whether each is within int64 (tf.strings.to_number's range), by comparing a 19-digit number's
    first 10 and last 9 digits with 2^63's."""
    import tensorflow as tf
    negative = tf.strings.regex_full_match(digits, "-.*")
    magnitude = tf.strings.regex_replace(digits, "^-", "")
    long = tf.equal(tf.strings.length(magnitude), 19) & tf.strings.regex_full_match(magnitude, "[0-9]*")
    safe = tf.where(long, magnitude, "0000000000000000000")
    high = tf.strings.to_number(tf.strings.substr(safe, 0, 10), tf.int64)
    low = tf.strings.to_number(tf.strings.substr(safe, 10, 9), tf.int64)
    low_max = tf.where(negative, tf.constant(854775808, tf.int64), tf.constant(854775807, tf.int64))
    return ~long | (high < 9223372036) | (tf.equal(high, 9223372036) & (low <= low_max))
