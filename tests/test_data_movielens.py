"""The MovieLens reader against a row-by-row Python featurization of a tiny hand-written directory."""
import math
import os

import numpy as np
import pytest
import tensorflow as tf

import ml_tiny
from tfps.config import load_config
from tfps.data.convert import convert
from tfps.data.file_source import DataMissing, EvalSetEmpty
from tfps.data.movielens import movielens_dataset
from tfps.data.schema import PAD_ID, numpy_batches
from tfps.data.sources import make_source
from tfps.errors import ReaderError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _read(directory, split, **kwargs):
    return list(numpy_batches(lambda: movielens_dataset(directory, 4, split, **kwargs)))


def _hash(strings):
    with tf.Graph().as_default(), tf.compat.v1.Session() as s:
        return s.run(tf.strings.to_hash_bucket_fast(strings, 2**63 - 1)).tolist() if strings else []


def _rows(batches):
    """{(user, movie): (label, ids, genre ids, dense)} of the batches read."""
    rows = {}
    for features, labels in batches:
        for i in range(len(labels)):
            ids = features["ids"][i].tolist()
            assert features["user"][i] == ids[0]
            genres = [g for g in features["genres"][i].tolist() if g != PAD_ID]
            rows[(ids[0], ids[1])] = (labels[i], ids, genres, features["dense"][i, 0])
    return rows


@pytest.mark.parametrize("split", ["train", "eval"])
def test_features_and_time_split_match_a_python_featurization(tmp_path, split):
    directory = ml_tiny.write(tmp_path)
    want = {k: v for k, v in ml_tiny.expected().items() if v[0] == split}
    got = _rows(_read(directory, split))
    assert set(got) == set(want)
    for key, (_, label, ids, genres, earlier) in want.items():
        g_label, g_ids, g_genres, g_dense = got[key]
        assert g_label == label and g_ids == ids, key
        assert g_genres == _hash(genres), key                 # a movie missing from movies.csv: no genres
        assert g_dense == pytest.approx(math.log1p(earlier), rel=1e-6)


@pytest.mark.parametrize("split", ["train", "eval"])
def test_validation_splits_the_ratings_before_the_test_share_and_never_reads_it(tmp_path, split):
    """Oracle: the python featurization of the ratings with each user's test share deleted."""
    directory = ml_tiny.write(tmp_path)
    rest = ml_tiny.without_test_share(ml_tiny.RATINGS)
    assert len(rest) < len(ml_tiny.RATINGS)
    want = {k: v for k, v in ml_tiny.expected(rest).items() if v[0] == split}
    got = _rows(_read(directory, split, validation=True))
    assert set(got) == set(want) and want
    for key, (_, label, ids, genres, earlier) in want.items():
        assert got[key][0] == label and got[key][1] == ids and got[key][2] == _hash(genres), key
        assert got[key][3] == pytest.approx(math.log1p(earlier), rel=1e-6)


def test_every_users_latest_ratings_are_eval_and_no_feature_sees_a_later_rating(tmp_path):
    directory = ml_tiny.write(tmp_path)
    by_key = {(u, m): ts for u, m, _, ts in ml_tiny.RATINGS}
    train, evaluation = _rows(_read(directory, "train")), _rows(_read(directory, "eval"))
    for user in {u for u, _ in by_key}:
        train_times = [by_key[k] for k in train if k[0] == user]
        eval_times = [by_key[k] for k in evaluation if k[0] == user]
        if eval_times:
            assert max(train_times) <= min(eval_times)
    for (user, movie), row in {**train, **evaluation}.items():
        earlier = sum(1 for u, _, _, ts in ml_tiny.RATINGS if u == user and ts < by_key[(user, movie)])
        assert row[3] == pytest.approx(math.log1p(earlier), rel=1e-6)     # only strictly earlier ratings


def test_training_order_is_shuffled_per_pass_and_repeats(tmp_path):
    directory = ml_tiny.write(tmp_path)
    with tf.Graph().as_default():
        batch = tf.compat.v1.data.make_one_shot_iterator(
            movielens_dataset(directory, 100, "train", repeat=True, seed=3)).get_next()
        with tf.compat.v1.Session() as s:
            passes = [s.run(batch) for _ in range(3)]
    orders = [p[0]["ids"][:, :2].tolist() for p in passes]
    assert all(sorted(o) == sorted(orders[0]) for o in orders)
    assert len({tuple(map(tuple, o)) for o in orders}) > 1


@pytest.mark.parametrize("line,reason", [
    ("1,2,3", "has 3 comma-separated fields, expected 4"),
    ("x,2,3.0,100", "has a userId that is not a non-negative integer"),
    ("1,2,good,100", "has a rating that is not a number"),
    ("1,2,3.0,soon", "has a timestamp that is not an integer"),
    ("", "has 1 comma-separated fields, expected 4"),          # a blank line is a malformed one
])
def test_a_malformed_line_is_named_or_skipped_and_counted(tmp_path, line, reason):
    directory = ml_tiny.write(tmp_path, extra_rating_lines=[line])
    with pytest.raises(tf.errors.InvalidArgumentError) as err:
        _read(directory, "train")
    message = str(err.value)
    bad_line = len(ml_tiny.RATINGS) + 2
    assert f"ratings.csv line {bad_line}: {reason}" in message
    batches = _read(directory, "train", skip_bad_rows=True)
    assert sum(int(b[0]["bad_rows"]) for b in batches) == 1
    assert set(_rows(batches)) == {k for k, v in ml_tiny.expected().items() if v[0] == "train"}


def test_a_bad_header_or_missing_file_is_an_error(tmp_path):
    directory = ml_tiny.write(tmp_path)
    (tmp_path / "ratings.csv").write_text("user,movie,rating,time\n1,1,4.0,5\n")
    with pytest.raises(tf.errors.InvalidArgumentError, match="ratings.csv line 1: has header 'user,movie,rating,time'"):
        _read(directory, "train")
    (tmp_path / "movies.csv").unlink()
    with pytest.raises(ValueError, match="has no movies.csv"):
        movielens_dataset(directory, 4)


@pytest.mark.parametrize("config", ["movielens_deepfm", "movielens_mtgr"])
def test_a_missing_directory_is_data_missing_naming_it_and_the_page_that_says_where_to_get_it(tmp_path, config):
    """A shipped config whose data.path does not exist (data/ml-latest-small in a clean clone), or
    is a file, or lacks movies.csv: DataMissing naming data.path and the directory, and a docs
    page that is there; `tfps convert` of such a path names itself ("convert")."""
    missing = tmp_path / "ml-latest-small"
    a_file = tmp_path / "ratings.csv"
    a_file.write_text("userId,movieId,rating,timestamp\n1,1,4.0,5\n")   # a directory without movies.csv
    for path in (missing, a_file, tmp_path):
        with pytest.raises(DataMissing) as raised:
            make_source(load_config(f"configs/{config}.yaml", [f"data.path={path}"]))
        assert (raised.value.what, raised.value.path) == ("data.path", str(path))
        assert os.path.isfile(os.path.join(ROOT, raised.value.docs))
    kind = "movielens_sequences" if config == "movielens_mtgr" else "movielens"
    with pytest.raises(DataMissing) as raised:
        convert(kind, str(missing), str(tmp_path / "out"), printer=lambda *a, **k: None)
    assert (raised.value.what, raised.value.path) == ("convert", str(missing))


@pytest.mark.parametrize("config", ["movielens_deepfm", "movielens_mtgr"])
def test_an_eval_split_without_a_rating_is_refused_by_the_check_before_training(tmp_path, config):
    """check_eval_rows: users of one rating each (their latest 20% rounds down to none) leave the
    eval split empty, as ratings and as MTGR's samples: EvalSetEmpty naming the directory; a
    malformed first rating is the reader's error naming the file and line; the tiny set passes."""
    directory = ml_tiny.write(tmp_path, ratings=[(1, 1, 4.0, 100), (2, 2, 3.0, 200)])
    with pytest.raises(EvalSetEmpty) as raised:
        make_source(load_config(f"configs/{config}.yaml", [f"data.path={directory}"])).check_eval_rows()
    assert raised.value.path == directory
    ml_tiny.write(tmp_path, extra_rating_lines=["1,x,4.0,5"])
    with pytest.raises(ValueError) as raised:
        make_source(load_config(f"configs/{config}.yaml", [f"data.path={directory}"])).check_eval_rows()
    found = ReaderError.find(raised.value)   # (MTGR's reader raises the line in a ValueError of its own)
    assert (found.file, found.line) == (os.path.join(directory, "ratings.csv"), 18)
    ml_tiny.write(tmp_path)
    make_source(load_config(f"configs/{config}.yaml", [f"data.path={directory}"])).check_eval_rows()


def test_trainers_share_the_batches(tmp_path):
    directory = ml_tiny.write(tmp_path)
    whole = _read(directory, "train")     # 12 training rows, batches of 4
    shares = [_read(directory, "train", shard_index=k, num_shards=2) for k in range(2)]
    for k in range(2):
        for got, want in zip(shares[k], whole[k::2]):
            np.testing.assert_array_equal(got[0]["ids"], want[0]["ids"])
    assert sum(len(s) for s in shares) == len(whole)


def test_ratings_that_are_all_bad_are_an_error_not_an_endless_read(tmp_path):
    """Every rating line malformed, skip_bad_rows on: reading the split is an error, whether the
    read repeats or not (no endless read of nothing)."""
    directory = ml_tiny.write(tmp_path, ratings=[], extra_rating_lines=["a,b,c,d", "1,2,3"])
    for repeat in (False, True):
        with pytest.raises(tf.errors.InvalidArgumentError):
            list(numpy_batches(lambda: movielens_dataset(directory, 4, "train", skip_bad_rows=True,
                                                         repeat=repeat).take(100)))


def test_ids_of_19_digits_up_to_int64_max_are_read(tmp_path):
    """userId and movieId up to 2^63 - 1 read as Python reads them; 2^63 is a bad line."""
    big = 2**63 - 1
    ratings = ml_tiny.RATINGS + [(big, big, 5.0, 2000), (big, 1, 4.0, 3000), (big, 2, 1.0, 4000),
                                 (big, 3, 4.0, 5000), (big, 5, 4.0, 6000)]
    directory = ml_tiny.write(tmp_path, ratings=ratings)
    want = ml_tiny.expected(ratings)
    got = _rows(_read(directory, "train"))
    assert set(got) == {k for k, v in want.items() if v[0] == "train"}
    assert (big, big) in got and got[(big, big)][1] == want[(big, big)][2]
    ml_tiny.write(tmp_path, ratings=ratings, extra_rating_lines=[f"{2**63},1,4.0,7000"])
    with pytest.raises(tf.errors.InvalidArgumentError):
        _read(directory, "train")
    assert sum(int(b[0]["bad_rows"]) for b in _read(directory, "train", skip_bad_rows=True)) == 1
