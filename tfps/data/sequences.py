"""User-level sequence samples for generative rankers (MTGR), from MovieLens ratings.

One sample is one user at one request: a window of `window` consecutive ratings (by time) are
the candidates, each with its own request time (the rating's timestamp) and label (rating >= 4);
before them come
  realtime: the `realtime_len` ratings just before the window, then the window's own ratings
            but its last (an earlier candidate is a past interaction for a later one; the mask
            of tfps.models.hstu shows each candidate only the ones strictly before its time);
  history:  up to `history_len` ratings before those;
  profile:  the user, and the bucketed count and mean of their ratings before the window.
Each candidate also carries cross features from ratings strictly before its own time:
  CROSS = (log1p user's ratings, log1p user's ratings in the candidate's genres (a rating counts
           once per genre it shares), the user's mean rating there (0 if none), log1p the movie's
           ratings by anyone, the movie's mean rating (0 if none)).
Nothing in a sample looks at a rating at or after the time it is used at (tested against a
brute-force recount). The split is by time per user, as movielens_dataset's: each user's last
floor(eval_fraction * count) ratings are the evaluation candidates.

    samples = movielens_user_samples("movielens-small", split="train")   # list of dicts (numpy)
    ds = sample_dataset(samples)                                           # unbatched tf.data
"""
import csv
import json
import os
import re

import numpy as np
import tensorflow as tf

from tfps.data.schema import Schema, graph_code
from tfps.data.tfrecord import record_batches

SCHEMA = Schema(num_dense=0, id_features=(), has_users=True)   # what the runners see (GAUC by user)
CROSS = ("user_count", "user_genre_count", "user_genre_mean", "movie_count", "movie_mean")
NUM_GENRES = 20           # MovieLens genres plus "(no genres listed)"; more are hashed into it


def read_movielens(path):
    """(user, movie, rating, timestamp) int64/float32 arrays and {movie: genre index list}.
    A malformed line of either file is a ValueError naming the file, the line and what is wrong
    (the ratings are checked as movielens_dataset checks them)."""
    from tfps.data.movielens import ratings_columns
    with tf.Graph().as_default(), tf.compat.v1.Session() as session:
        try:
            columns = ratings_columns(os.path.join(path, "ratings.csv"), False,
                                      hint="fix the line: movielens_sequences does not skip lines")
            user, movie, rating, ts, _ = session.run(columns)
        except tf.errors.InvalidArgumentError as e:
            from tfps.errors import error_line   # the telling line of TF's message
            raise ValueError(error_line(e)) from None
    genres, names = {}, {}
    where = os.path.join(path, "movies.csv")
    with open(where, newline="") as f:
        reader = csv.reader(f)
        if next(reader, None) != ["movieId", "title", "genres"]:
            raise ValueError(f"{where}: expected the header movieId,title,genres")
        for row in reader:
            if len(row) < 3 or not re.fullmatch("[0-9]{1,19}", row[0]) or int(row[0]) >= 2**63:
                raise ValueError(f"{where} line {reader.line_num}: is not movieId,title,genres with an integer movieId")
            ids = [names.setdefault(g, len(names)) % NUM_GENRES for g in row[-1].split("|")]
            genres[int(row[0])] = sorted(set(ids))
    return user, movie, rating, ts, genres


def _movie_before(movie, rating, ts):
    """Per rating: (count, rating sum) of the same movie's ratings strictly before its time."""
    count, total = np.zeros(len(movie), np.int64), np.zeros(len(movie), np.float64)
    order = np.lexsort((ts, movie))
    m, t, r = movie[order], ts[order], rating[order]
    starts = np.flatnonzero(np.r_[True, m[1:] != m[:-1]])
    for a, b in zip(starts, np.r_[starts[1:], len(m)]):
        first = a + np.searchsorted(t[a:b], t[a:b], side="left")       # first of its time: ties are not before
        sums = np.r_[0.0, np.cumsum(r[a:b])]
        count[order[a:b]] = first - a
        total[order[a:b]] = sums[first - a]
    return count, total


def _drop_latest(user, movie, rating, ts, fraction):
    """The ratings without each user's last floor(fraction * count) by time."""
    order = np.lexsort((ts, user))
    u = user[order]
    starts = np.flatnonzero(np.r_[True, u[1:] != u[:-1]])
    ends = np.r_[starts[1:], len(u)]
    keep = np.concatenate([order[a:b - int(np.floor(fraction * (b - a)))] for a, b in zip(starts, ends)]
                          or [np.zeros(0, np.int64)])
    keep.sort()
    return user[keep], movie[keep], rating[keep], ts[keep]


def movielens_user_samples(path, split="train", window=8, history_len=64, realtime_len=16, eval_fraction=0.2,
                           validation=False):
    """The samples of one split, as dicts of numpy arrays (see the module docstring):
      user int64 [], profile int64 [3], history_movie / history_rating / history_time [H],
      realtime_movie / realtime_rating / realtime_time [R], candidate_movie / candidate_time /
      label [K], candidate_genres int64 [K, NUM_GENRES] (multi-hot), cross float32 [K, len(CROSS)].
    validation: leave out each user's last eval_fraction of ratings (the test share: no feature
    reads them) and split the rest the same way, for tuning (as movielens.load).
    """
    if split not in ("train", "eval"):
        raise ValueError(f"movielens_user_samples: split must be 'train' or 'eval', got {split!r}")
    for name, v in (("window", window), ("history_len", history_len), ("realtime_len", realtime_len)):
        if not isinstance(v, int) or v < (1 if name == "window" else 0):
            raise ValueError(f"movielens_user_samples: {name} must be an int >= {1 if name == 'window' else 0}, got {v!r}")
    user, movie, rating, ts, genres = read_movielens(path)
    if validation:
        user, movie, rating, ts = _drop_latest(user, movie, rating, ts, eval_fraction)
    movie_count, movie_total = _movie_before(movie, rating, ts)
    hot = np.zeros([len(movie), NUM_GENRES], np.float32)
    for i, m in enumerate(movie):
        hot[i, genres.get(int(m), [NUM_GENRES - 1])] = 1.0
    samples = []
    order = np.lexsort((ts, user))
    starts = np.flatnonzero(np.r_[True, user[order][1:] != user[order][:-1]])
    for a, b in zip(starts, np.r_[starts[1:], len(order)]):
        rows = order[a:b]                                  # this user's ratings by time
        t, r, g = ts[rows], rating[rows].astype(np.float64), hot[rows]
        n_eval = int(np.floor(eval_fraction * len(rows)))
        first, last = (0, len(rows) - n_eval) if split == "train" else (len(rows) - n_eval, len(rows))
        counts = np.vstack([np.zeros(NUM_GENRES), np.cumsum(g, 0)])           # genre counts before index i
        sums = np.vstack([np.zeros(NUM_GENRES), np.cumsum(g * r[:, None], 0)])
        for w in range(first, last, window):
            cand = np.arange(w, min(w + window, last))
            before = np.searchsorted(t, t[cand], side="left")                  # ratings strictly before
            genre_n = (counts[before] * g[cand]).sum(1)
            genre_sum = (sums[before] * g[cand]).sum(1)
            mc, mt = movie_count[rows[cand]], movie_total[rows[cand]]
            cross = np.stack([np.log1p(before), np.log1p(genre_n), np.where(genre_n > 0, genre_sum / np.maximum(genre_n, 1), 0.0),
                              np.log1p(mc), np.where(mc > 0, mt / np.maximum(mc, 1), 0.0)], 1).astype(np.float32)
            # context: ratings strictly before the window's first request
            start = np.searchsorted(t, t[cand[0]], side="left")
            rt = np.r_[np.arange(max(0, start - realtime_len), start), cand[:-1]]
            hist = np.arange(max(0, start - realtime_len - history_len), max(0, start - realtime_len))
            seen = r[:start]
            profile = np.array([int(user[rows[0]]), int(np.log2(1 + start)), int(2 * seen.mean()) if start else 0],
                               np.int64)
            samples.append({
                "user": np.int64(user[rows[0]]), "profile": profile,
                "history_movie": movie[rows[hist]], "history_rating": rating[rows[hist]], "history_time": t[hist],
                "realtime_movie": movie[rows[rt]], "realtime_rating": rating[rows[rt]], "realtime_time": t[rt],
                "candidate_movie": movie[rows[cand]], "candidate_time": t[cand],
                "candidate_genres": g[cand].astype(np.int64),
                "label": (rating[rows[cand]] >= 4.0).astype(np.float32), "cross": cross})
    return samples


SPEC = {"user": tf.TensorSpec([], tf.int64), "profile": tf.TensorSpec([3], tf.int64),
        "history_movie": tf.TensorSpec([None], tf.int64), "history_rating": tf.TensorSpec([None], tf.float32),
        "history_time": tf.TensorSpec([None], tf.int64),
        "realtime_movie": tf.TensorSpec([None], tf.int64), "realtime_rating": tf.TensorSpec([None], tf.float32),
        "realtime_time": tf.TensorSpec([None], tf.int64),
        "candidate_movie": tf.TensorSpec([None], tf.int64), "candidate_time": tf.TensorSpec([None], tf.int64),
        "candidate_genres": tf.TensorSpec([None, NUM_GENRES], tf.int64),
        "label": tf.TensorSpec([None], tf.float32), "cross": tf.TensorSpec([None, len(CROSS)], tf.float32)}


def token_count(sample):
    """A sample's token count (int), as tokens() counts it in the graph."""
    return 3 + len(sample["history_movie"]) + len(sample["realtime_movie"]) + len(sample["candidate_movie"])


def tokens(sample):
    """A sample's token count (int32 scalar tensor): profile + history + real-time + candidates."""
    return (tf.size(sample["profile"]) + tf.size(sample["history_movie"]) + tf.size(sample["realtime_movie"])
            + tf.size(sample["candidate_movie"]))


@graph_code
def sample_dataset(samples):
    """An unbatched tf.data.Dataset of the samples (SPEC)."""
    return tf.data.Dataset.from_generator(lambda: iter(samples), output_signature=SPEC)


# -- TFRecords: one tf.train.Example per sample, list features (tfps convert --from movielens_sequences)
SEQUENCE_SPEC_FILE = "tfps_sequences.json"
_WIDTH = {"candidate_genres": NUM_GENRES, "cross": len(CROSS)}   # per-candidate rows, stored flat


def example_of(sample):
    """A sample (SPEC) as a serialized tf.train.Example of list features."""
    feature = {}
    for name, spec in SPEC.items():
        flat = np.asarray(sample[name]).reshape(-1)
        if spec.dtype == tf.int64:
            feature[name] = tf.train.Feature(int64_list=tf.train.Int64List(value=flat.tolist()))
        else:
            feature[name] = tf.train.Feature(float_list=tf.train.FloatList(value=flat.tolist()))
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def parse_example(serialized):
    """A serialized Example (example_of) -> a sample of SPEC's structure; a record whose lists
    disagree (candidates, a row width, a sequence's three lists) is InvalidArgumentError naming
    the feature."""
    specs = {name: (tf.io.FixedLenFeature(spec.shape, spec.dtype) if spec.shape.is_fully_defined()
                    else tf.io.VarLenFeature(spec.dtype)) for name, spec in SPEC.items()}
    parsed = tf.io.parse_single_example(serialized, specs)
    out = {k: (tf.sparse.to_dense(v) if isinstance(v, tf.SparseTensor) else v) for k, v in parsed.items()}
    k = tf.size(out["candidate_movie"])
    checks = []
    for name, width in _WIDTH.items():
        checks.append(tf.debugging.assert_equal(tf.size(out[name]), k * width, message=(
            f"sequence record: {name} must hold {width} values per candidate")))
    for prefix in ("history", "realtime"):
        for part in ("rating", "time"):
            checks.append(tf.debugging.assert_equal(tf.size(out[f"{prefix}_{part}"]), tf.size(out[f"{prefix}_movie"]),
                                                    message=f"sequence record: {prefix}_{part} and {prefix}_movie "
                                                            f"must have one value per item"))
    for part in ("candidate_time", "label"):
        checks.append(tf.debugging.assert_equal(tf.size(out[part]), k, message=(
            f"sequence record: {part} must have one value per candidate_movie")))
    with tf.control_dependencies(checks):
        for name, width in _WIDTH.items():
            out[name] = tf.reshape(out[name], [-1, width])
        out = {name: tf.identity(t) for name, t in out.items()}
    for name, spec in SPEC.items():
        out[name].set_shape(spec.shape)
    return out


@graph_code
def tfrecord_samples(directory):
    """The unbatched samples (SPEC) of the TFRecords in `directory`, in file order; a file that
    ends early is InvalidArgumentError naming it (tfps.data.tfrecord.record_batches)."""
    files = sorted(tf.io.gfile.glob(os.path.join(directory, "*.tfrecord*")))
    if not files:
        raise ValueError(f"{directory}: no *.tfrecord files (write them with tfps convert --from "
                         f"movielens_sequences)")
    records = None
    for path in files:
        batches = record_batches(path, 256)
        records = batches if records is None else records.concatenate(batches)
    return records.unbatch().map(parse_example)


def read_samples(make_dataset, limit=None):
    """The samples of make_dataset() (built in a graph of its own) as numpy dicts, the first
    `limit` of them."""
    with tf.Graph().as_default(), tf.compat.v1.Session() as sess:
        ds = make_dataset().take(-1 if limit is None else limit)
        nxt = tf.compat.v1.data.make_one_shot_iterator(ds).get_next()
        out = []
        try:
            while True:
                out.append(sess.run(nxt))
        except tf.errors.OutOfRangeError:
            return out


def write_tfrecords(samples, directory, rows_per_file=100_000):
    """Writes samples as TFRecords part-00000.tfrecord ... in `directory`; returns the file count."""
    tf.io.gfile.makedirs(directory)
    files = 0
    for start in range(0, max(len(samples), 1), rows_per_file):
        with tf.io.TFRecordWriter(os.path.join(directory, f"part-{files:05d}.tfrecord")) as writer:
            for sample in samples[start:start + rows_per_file]:
                writer.write(example_of(sample))
        files += 1
    return files


def write_sequence_tfrecords(path, out_dir, window=8, history_len=64, realtime_len=16, eval_fraction=0.2,
                             rows_per_file=100_000):
    """MovieLens at `path` -> out_dir/train and out_dir/eval TFRecords of user samples, and
    out_dir/tfps_sequences.json recording how they were cut (a config must ask for the same).
    Returns that record."""
    params = {"window": window, "history_len": history_len, "realtime_len": realtime_len,
              "eval_fraction": eval_fraction}
    record = dict(params, splits={})
    for split in ("train", "eval"):
        samples = movielens_user_samples(path, split, window, history_len, realtime_len, eval_fraction)
        files = write_tfrecords(samples, os.path.join(out_dir, split), rows_per_file)
        record["splits"][split] = {"samples": len(samples), "candidates": int(sum(len(s["label"]) for s in samples)),
                                   "files": files}
    with tf.io.gfile.GFile(os.path.join(out_dir, SEQUENCE_SPEC_FILE), "w") as f:
        f.write(json.dumps(record, indent=1))
    return record


def read_sequence_spec(path):
    """The record write_sequence_tfrecords left in `path`, or None (not a converted directory)."""
    spec = os.path.join(path, SEQUENCE_SPEC_FILE)
    if not tf.io.gfile.exists(spec):
        return None
    with tf.io.gfile.GFile(spec) as f:
        return json.loads(f.read())
