"""MovieLens ratings in the GroupLens CSV layout, read and featurized in TF ops by tf.data.

A directory holds `ratings.csv` (userId,movieId,rating,timestamp) and `movies.csv`
(movieId,title,genres), each with its header line. Per rating:
  label     rating >= 4
  ids       user_id, movie_id, hour (UTC), weekday (Monday 0), history_len = floor(log2(1 + n))
            where n is the user's count of ratings strictly *before* this one's timestamp
  genres    the movie's genres, hashed (a list feature: int64 [B, L], -1 pads)
  dense     log1p(n)
  user      the user id (GAUC)

The split is by time per user: each user's last floor(eval_fraction * count) ratings by timestamp
are the evaluation set, the rest are training. No feature of a row looks at a later rating (ties
in timestamp count as later).

    ds = movielens_dataset("movielens-small", batch_size=1024, split="train", repeat=True)

A malformed line (wrong column count, a non-numeric field, a bad header) stops the input with
InvalidArgumentError naming the file, the line and what is wrong; with skip_bad_rows=True the
line is dropped and counted once, in features["bad_rows"] of the training split's first batch
(a malformed line belongs to no split). A blank line (but the one a final newline leaves) is such
a malformed line. The files are plain CSV (read whole, no gzip), so nothing tells a file cut at a
line's end from a whole one; a line cut short is malformed, or a shorter number.
"""
import os

import tensorflow as tf

from tfps.data.file_source import DataMissing
from tfps.data.schema import PAD_ID, Schema, graph_code, int64_range, share
from tfps.ops.data import SKIP_HINT, check_rows

ID_FEATURES = ("user_id", "movie_id", "hour", "weekday", "history_len")
SCHEMA = Schema(num_dense=1, id_features=ID_FEATURES, list_features=("genres",), has_users=True)
RATINGS_HEADER, MOVIES_HEADER = "userId,movieId,rating,timestamp", "movieId,title,genres"
_INT = "[0-9]{1,19}"   # and within int64 (int64_range)
_INT64_MAX = 2**63 - 1


def _lines(path, header):
    """(data lines [N], their line numbers from 2 [N]) of a CSV file after checking its header."""
    text = tf.strings.regex_replace(tf.io.read_file(path), "\r", "")
    lines = tf.strings.split(text, "\n")
    lines = lines[:tf.size(lines) - tf.cast(tf.equal(lines[-1], ""), tf.int32)]
    first = lines[:1]
    header_ok = check_rows(tf.reshape(tf.equal(first, header), [-1]), tf.fill(tf.shape(first), path),
                           tf.ones(tf.shape(first), tf.int64),
                           tf.strings.join(["has header '", first, f"', expected '{header}'"]), reader="movielens",
                           hint="")
    with tf.control_dependencies([header_ok]):
        rows = tf.identity(lines[1:])
    return rows, tf.range(2, tf.size(rows, out_type=tf.int64) + 2)


def _check(ok, path, numbers, reasons, skip_bad_rows, hint=SKIP_HINT):
    """ok rows mask; fails on the first bad row unless skip_bad_rows. Returns (mask, bad count)."""
    if skip_bad_rows:
        return ok, tf.reduce_sum(tf.cast(~ok, tf.int64))
    reasons = tf.broadcast_to(reasons, tf.shape(ok))
    passed = check_rows(ok, tf.fill(tf.shape(ok), path), numbers, reasons, reader="movielens", hint=hint)
    with tf.control_dependencies([passed]):
        return tf.identity(ok), tf.constant(0, tf.int64)


def ratings_columns(path, skip_bad_rows, hint=SKIP_HINT):
    """(user, movie int64 [N], rating float32 [N], timestamp int64 [N], skipped lines) of a
    ratings.csv, each line checked: InvalidArgumentError naming the file, the line and what is
    wrong (ending with `hint`), unless skip_bad_rows."""
    rows, numbers = _lines(path, RATINGS_HEADER)
    fields = tf.strings.split(rows, ",")
    count_ok = tf.equal(fields.row_lengths(), 4)
    p = fields.to_tensor(default_value="", shape=[None, 4])
    checks = [(count_ok, tf.strings.join(["has ", tf.strings.as_string(fields.row_lengths()),
                                          " comma-separated fields, expected 4 (userId,movieId,rating,timestamp)"])),
              (tf.strings.regex_full_match(p[:, 0], _INT), "has a userId that is not a non-negative integer"),
              (int64_range(p[:, 0]), f"has a userId out of range (at most {_INT64_MAX})"),
              (tf.strings.regex_full_match(p[:, 1], _INT), "has a movieId that is not a non-negative integer"),
              (int64_range(p[:, 1]), f"has a movieId out of range (at most {_INT64_MAX})"),
              (tf.strings.regex_full_match(p[:, 2], r"[0-9]{1,3}(\.[0-9]*)?"), "has a rating that is not a number"),
              (tf.strings.regex_full_match(p[:, 3], "-?" + _INT), "has a timestamp that is not an integer"),
              (int64_range(p[:, 3]), f"has a timestamp out of range (an int64: at most {_INT64_MAX})")]
    ok, reason = checks[0][0], tf.fill(tf.shape(count_ok), "")
    for good, why in reversed(checks):
        reason = tf.where(good, reason, why)
    ok = tf.reduce_all(tf.stack([c for c, _ in checks], 1), 1)
    ok, bad = _check(ok, path, numbers, reason, skip_bad_rows, hint)
    p = tf.boolean_mask(p, ok)
    return (tf.strings.to_number(p[:, 0], tf.int64), tf.strings.to_number(p[:, 1], tf.int64),
            tf.strings.to_number(p[:, 2], tf.float32), tf.strings.to_number(p[:, 3], tf.int64), bad)


def _movies(path, skip_bad_rows):
    """(movie ids [M], genre ids ragged [M, ?]); titles may hold quoted commas, genres are the last field."""
    rows, numbers = _lines(path, MOVIES_HEADER)
    movie = tf.strings.regex_replace(rows, ",.*$", "")
    genres = tf.strings.regex_replace(rows, "^.*,", "")
    ok = (tf.strings.regex_full_match(movie, _INT) & int64_range(movie) &
          tf.strings.regex_full_match(rows, "[^,]*,.*,[^,]*"))
    ok, bad = _check(ok, path, numbers, "is not movieId,title,genres with an integer movieId", skip_bad_rows)
    movie, genres = tf.boolean_mask(movie, ok), tf.boolean_mask(genres, ok)
    genre_ids = tf.strings.to_hash_bucket_fast(tf.strings.split(genres, "|"), 2**63 - 1)
    return tf.strings.to_number(movie, tf.int64), genre_ids, bad


def _run_starts(column):
    """bool [N]: whether each element of a sorted column differs from the one before it (the first
    always does; [0] for an empty column)."""
    return tf.concat([[True], tf.not_equal(column[1:], column[:-1])], 0)[:tf.size(column)]


def _first_of_runs(new_run):
    """For a sorted column's run starts (bool [N]), the index where each element's run starts."""
    starts = tf.where(new_run)[:, 0]
    return tf.gather(starts, tf.cumsum(tf.cast(new_run, tf.int64)) - 1)


def _latest_share(user, fraction):
    """For ratings sorted by (user, time): (bool [N], whether a rating is among its user's last
    floor(fraction * count); bool [N], whether it is its user's first; int64 [N], the index of
    its user's first)."""
    new_user = _run_starts(user)
    user_start = _first_of_runs(new_user)
    user_index = tf.cumsum(tf.cast(new_user, tf.int64)) - 1
    count = tf.gather(tf.math.bincount(user_index, dtype=tf.int64), user_index)
    n_latest = tf.cast(tf.floor(tf.cast(count, tf.float64) * fraction), tf.int64)
    return tf.range(tf.size(user, out_type=tf.int64)) - user_start >= count - n_latest, new_user, user_start


def load(directory, split, eval_fraction=0.2, skip_bad_rows=False, validation=False):
    """One split of a MovieLens directory as whole columns: dict of ids [N, 5], genres ragged
    [N, ?], dense [N, 1], user [N], label [N], bad_rows [] (in both files, whichever split).
    validation: drop each user's last eval_fraction of ratings (the test share, never read),
    then split the rest the same way (for tuning without looking at the test share)."""
    path = os.path.join(directory, "ratings.csv")
    user, movie, rating, ts, bad_r = ratings_columns(path, skip_bad_rows)
    movie_ids, genre_ids, bad_m = _movies(os.path.join(directory, "movies.csv"), skip_bad_rows)
    some = tf.debugging.Assert(tf.size(user) > 0, [tf.strings.format(
        "movielens: nothing to train on in " + path.replace("{", "(").replace("}", ")") + ": {} rating lines read "
        "and every one was malformed (data.skip_bad_rows: true skips them); fix the data, or set "
        "data.skip_bad_rows: false to stop at the first bad line", [bad_r])])
    with tf.control_dependencies([some]):
        user = tf.identity(user)
    by_time = tf.argsort(ts, stable=True)
    order = tf.gather(by_time, tf.argsort(tf.gather(user, by_time), stable=True))   # by (user, ts)
    user, movie, rating, ts = (tf.gather(t, order) for t in (user, movie, rating, ts))
    if validation:
        rest = tf.logical_not(_latest_share(user, eval_fraction)[0])
        user, movie, rating, ts = (tf.boolean_mask(t, rest) for t in (user, movie, rating, ts))
    latest, new_user, user_start = _latest_share(user, eval_fraction)
    new_time = _run_starts(ts)
    earlier = _first_of_runs(new_user | new_time) - user_start           # ratings strictly before
    keep = latest if split == "eval" else tf.logical_not(latest)
    # the movie's genres (none for a movie missing from movies.csv)
    by_id = tf.argsort(movie_ids)
    sorted_ids = tf.gather(movie_ids, by_id)
    at = tf.minimum(tf.searchsorted(sorted_ids, movie), tf.maximum(tf.size(sorted_ids) - 1, 0))
    found = tf.equal(tf.gather(sorted_ids, at), movie)
    genres = tf.gather(tf.gather(genre_ids, by_id), at)
    genres = tf.ragged.boolean_mask(genres, genres.with_values(tf.repeat(found, genres.row_lengths())))
    log2 = tf.math.log(1.0 + tf.cast(earlier, tf.float64)) / tf.math.log(tf.constant(2.0, tf.float64))
    history_len = tf.cast(tf.floor(log2 + 1e-9), tf.int64)
    ids = tf.stack([user, movie, tf.math.floormod(ts // 3600, 24), tf.math.floormod(ts // 86400 + 3, 7),
                    history_len], 1)
    columns = {"ids": ids, "genres": genres, "dense": tf.math.log1p(tf.cast(earlier, tf.float32))[:, None],
               "user": user, "label": tf.cast(rating >= 4.0, tf.float32)}
    out = {k: (tf.ragged.boolean_mask(v, keep) if isinstance(v, tf.RaggedTensor) else tf.boolean_mask(v, keep))
           for k, v in columns.items()}
    out["bad_rows"] = bad_r + bad_m
    return out


def _batches_of(columns, batch_size, seed=None, count_bad=True):
    """Dataset of batches of whole columns (shuffled rows when seed is a [2] tensor); the first
    batch carries the malformed lines skipped when count_bad (a bool tensor) is true."""
    n = tf.size(columns["label"], out_type=tf.int64)
    if seed is not None:
        perm = tf.random.experimental.stateless_shuffle(tf.range(n), seed)
        columns = {k: (v if k == "bad_rows" else tf.gather(v, perm)) for k, v in columns.items()}

    def batch(b):
        rows = slice(b * batch_size, tf.minimum((b + 1) * batch_size, n))
        features = {"ids": columns["ids"][rows], "genres": columns["genres"][rows].to_tensor(PAD_ID),
                    "dense": columns["dense"][rows], "user": columns["user"][rows],
                    "bad_rows": tf.where(tf.equal(b, 0) & count_bad, columns["bad_rows"], 0)}
        return features, columns["label"][rows]
    return tf.data.Dataset.range((n + batch_size - 1) // batch_size).map(batch)


def check_directory(directory, what="data.path"):
    """ValueError unless `directory` holds movies.csv and a ratings.csv with at least one rating:
    DataMissing (naming `what`, the config key or command that names it) when the directory does
    not exist, is a file, or lacks either file."""
    if not tf.io.gfile.isdir(directory):
        raise DataMissing(what, directory, "is a file, not a MovieLens directory" if tf.io.gfile.exists(directory)
                          else "does not exist")
    for name in ("ratings.csv", "movies.csv"):
        if not tf.io.gfile.exists(os.path.join(directory, name)):
            raise DataMissing(what, directory, f"has no {name} (the GroupLens layout: ratings.csv, movies.csv)")
    with tf.io.gfile.GFile(os.path.join(directory, "ratings.csv")) as f:
        f.readline()
        if not f.readline().strip():
            raise ValueError(f"movielens: {os.path.join(directory, 'ratings.csv')} holds no ratings")


@graph_code
def movielens_dataset(directory, batch_size, split="train", eval_fraction=0.2, skip_bad_rows=False, repeat=False,
                      seed=0, start=0, shard_index=0, num_shards=1, validation=False):
    """Batches (features, labels) of one split of a MovieLens directory (see the module docstring).

    Args:
      directory: holds ratings.csv and movies.csv.
      split: "train" (rows shuffled, a new order each pass, from seed) or "eval" (by user and time).
      eval_fraction: each user's latest share of ratings that is the eval split.
      skip_bad_rows: drop malformed lines (counted) instead of failing.
      repeat: pass over the split forever.
      start, shard_index, num_shards: a trainer's share of the batches (tfps.data.schema.share).
      validation: leave out each user's last eval_fraction (the test share) and split the rest
        the same way: "eval" is then a validation share for tuning (see load).
    """
    if split not in ("train", "eval"):
        raise ValueError(f"movielens_dataset: split must be train or eval, got {split!r}")
    if not 0.0 <= eval_fraction < 1.0:
        raise ValueError(f"movielens_dataset: eval_fraction must be in [0, 1), got {eval_fraction}")
    check_directory(directory)
    table = tf.data.Dataset.from_tensors(0).map(
        lambda _: load(directory, split, eval_fraction, skip_bad_rows, validation))
    table = table.cache()
    if split == "eval":
        return table.flat_map(lambda c: _batches_of(c, batch_size, count_bad=False)).prefetch(tf.data.AUTOTUNE)
    passes = (table.repeat() if repeat else table).enumerate()
    batches = passes.flat_map(lambda p, c: _batches_of(c, batch_size, tf.stack([tf.cast(seed, tf.int64), p]),
                                                       count_bad=tf.equal(p, 0)))
    return share(batches, start, shard_index, num_shards).prefetch(tf.data.AUTOTUNE)
