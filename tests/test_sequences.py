"""tfps.data.sequences: MTGR user samples from MovieLens, with no look at the future.

Oracle: the raw ratings, recounted by brute force for every candidate of a sample of users."""
import os

import numpy as np
import pytest
import tensorflow as tf

from tfps.data.sequences import (CROSS, NUM_GENRES, SPEC, movielens_user_samples, read_movielens, read_samples,
                                  sample_dataset, tfrecord_samples, tokens, write_tfrecords)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """A MovieLens directory with a planted taste (tests/ml_tiny.py), ties in time included."""
    import ml_tiny
    return ml_tiny.write_planted(tmp_path_factory.mktemp("ml"))



@pytest.fixture(scope="module")
def raw(data):
    return read_movielens(data)


@pytest.mark.parametrize("split", ["train", "eval"])
def test_cross_features_and_context_use_only_the_past(data, raw, split):
    user, movie, rating, ts, genres = raw
    samples = movielens_user_samples(data, split=split, window=8, history_len=32, realtime_len=8)
    rng = np.random.default_rng(0)
    for s in [samples[i] for i in rng.choice(len(samples), 60, replace=False)]:
        mine = user == s["user"]
        for k, (m, t) in enumerate(zip(s["candidate_movie"], s["candidate_time"])):
            past = mine & (ts < t)
            g = genres.get(int(m), [NUM_GENRES - 1])
            # the user's ratings in the candidate's genres: summed over its genres, as the feature
            hot = np.array([len(set(genres.get(int(x), [NUM_GENRES - 1])) & set(g)) for x in movie[past]])
            n_genre = hot.sum()
            mean_genre = (hot * rating[past]).sum() / n_genre if n_genre else 0.0
            seen = (movie == m) & (ts < t)
            want = [np.log1p(past.sum()), np.log1p(n_genre), mean_genre, np.log1p(seen.sum()),
                    rating[seen].mean() if seen.any() else 0.0]
            np.testing.assert_allclose(s["cross"][k], want, rtol=1e-5, atol=1e-5)
            assert s["label"][k] == float(rating[mine & (movie == m) & (ts == t)].max() >= 4.0)
        first = s["candidate_time"].min()
        assert (s["history_time"] < first).all()
        n_window = len(s["candidate_movie"]) - 1
        before = s["realtime_time"][:len(s["realtime_time"]) - n_window]
        assert (before < first).all()
        # the rest of the real-time tokens are the window's earlier candidates
        np.testing.assert_array_equal(s["realtime_movie"][len(before):], s["candidate_movie"][:-1])
        np.testing.assert_array_equal(s["realtime_time"][len(before):], s["candidate_time"][:-1])
        assert s["profile"][0] == s["user"]


def test_each_rating_is_a_candidate_once_across_the_splits(data, raw):
    user, movie, _, ts, _ = raw
    got = []
    for split in ("train", "eval"):
        for s in movielens_user_samples(data, split=split, window=8):
            got += [(int(s["user"]), int(m), int(t)) for m, t in zip(s["candidate_movie"], s["candidate_time"])]
    assert sorted(got) == sorted(zip(user.tolist(), movie.tolist(), ts.tolist()))


@pytest.mark.parametrize("split", ["train", "eval"])
def test_validation_samples_are_those_of_the_ratings_without_the_test_share(tmp_path, split):
    """Oracle: the samples of a directory whose ratings.csv lacks each user's test share."""
    import ml_tiny
    ratings, movies = ml_tiny.planted()
    (tmp_path / "full").mkdir()
    (tmp_path / "cut").mkdir()
    full = ml_tiny.write(tmp_path / "full", ratings, movies)
    cut = ml_tiny.write(tmp_path / "cut", ml_tiny.without_test_share(ratings), movies)
    got = movielens_user_samples(full, split=split, window=8, validation=True)
    want = movielens_user_samples(cut, split=split, window=8)
    assert len(got) == len(want) > 0
    for g, w in zip(got, want):
        assert g.keys() == w.keys() and all(np.array_equal(g[k], w[k]) for k in g)


def test_the_dataset_and_token_count(data, graph):
    samples = movielens_user_samples(data, split="eval", window=4, history_len=8, realtime_len=4)[:5]
    it = tf.compat.v1.data.make_one_shot_iterator(sample_dataset(samples)).get_next()
    n = tokens(it)
    with tf.compat.v1.Session() as s:
        for want in samples:
            got, count = s.run([it, n])
            np.testing.assert_array_equal(got["cross"], want["cross"])
            assert count == 3 + len(want["history_movie"]) + len(want["realtime_movie"]) + len(want["candidate_movie"])


def test_bad_arguments(data, tmp_path):
    with pytest.raises(ValueError, match="split must be"):
        movielens_user_samples(data, split="test")
    with pytest.raises(ValueError, match="window must be an int >= 1"):
        movielens_user_samples(data, window=0)
    (tmp_path / "ratings.csv").write_text("user,movie\n1,2\n")
    (tmp_path / "movies.csv").write_text("movieId,title,genres\n")
    with pytest.raises(ValueError, match="ratings.csv line 1: has header 'user,movie'"):
        read_movielens(str(tmp_path))


@pytest.mark.parametrize("ratings,movies,where,reason", [
    (["1,2,3"], [], "ratings.csv line {r}", "has 3 comma-separated fields, expected 4"),
    (["1,2,3.0,100,7"], [], "ratings.csv line {r}", "has 5 comma-separated fields, expected 4"),
    ([""], [], "ratings.csv line {r}", "has 1 comma-separated fields, expected 4"),
    (["1.5,2,3.0,100"], [], "ratings.csv line {r}", "has a userId that is not a non-negative integer"),
    (["1,2,nan,100"], [], "ratings.csv line {r}", "has a rating that is not a number"),
    (["1,2,3.0,soon"], [], "ratings.csv line {r}", "has a timestamp that is not an integer"),
    ([], ["100"], "movies.csv line {m}", "is not movieId,title,genres with an integer movieId"),
    ([], ["abc,Foo (1999),Comedy"], "movies.csv line {m}", "is not movieId,title,genres with an integer movieId"),
])
def test_a_malformed_line_is_an_error_naming_the_file_and_line(tmp_path, ratings, movies, where, reason):
    """As movielens_dataset's reader (the same checks of ratings.csv), for both files."""
    import ml_tiny
    rows, titles = ml_tiny.planted(users=3, movies=10, per_user=5)
    directory = ml_tiny.write(tmp_path, rows, titles, extra_rating_lines=ratings + ["1,1,4.0,5"])
    if movies:
        with open(os.path.join(directory, "movies.csv"), "a") as f:
            f.write("\n".join(movies) + "\n")
    line = where.format(r=len(rows) + 2, m=len(titles) + 2)
    with pytest.raises(ValueError) as err:
        movielens_user_samples(directory, split="train")
    assert f"{line}: {reason}" in str(err.value), str(err.value)


def test_tfrecords_of_the_samples_read_back_the_same_and_feed_the_source(data, tmp_path, cli):
    import json
    from tfps.config import load_config
    from tfps.data.sources import make_source
    code, out, err = cli("convert", "--from", "movielens_sequences", str(data), "--to", str(tmp_path / "seq"),
                         "--window", "6", "--history-len", "10", "--realtime-len", "3", "--rows-per-file", "40")
    assert code == 0, err[-3000:]
    written = json.loads(out.strip().splitlines()[-1])
    for split in ("train", "eval"):
        want = movielens_user_samples(data, split, window=6, history_len=10, realtime_len=3)
        got = read_samples(lambda: tfrecord_samples(str(tmp_path / "seq" / split)))
        assert len(got) == len(want) > 40   # several files, in order
        for g, w in zip(got, want):
            assert set(g) == set(w)
            for k in w:
                np.testing.assert_array_equal(g[k], w[k], err_msg=k)
    # the training source reads them as it reads the CSVs
    sets = [f"data.{k}={v}" for k, v in written["data"].items()] + ["model.name=mtgr"]
    cfg = load_config("configs/movielens_mtgr.yaml", sets)
    source = make_source(cfg)
    assert source.eval_size() == sum(len(s["label"]) for s in movielens_user_samples(
        data, "eval", window=6, history_len=10, realtime_len=3))
    assert len(source.samples("train", 64)) == 64
    # a config that asks for other samples than the files hold is refused, naming the field
    with pytest.raises(ValueError, match="data.window=8"):
        make_source(load_config("configs/movielens_mtgr.yaml", [s for s in sets if not s.startswith("data.window")]))
    # they were cut for the test share: a validation run needs the CSVs
    with pytest.raises(ValueError, match="data.validation needs the MovieLens CSVs"):
        make_source(load_config("configs/movielens_mtgr.yaml", sets + ["data.validation=true"]))


def test_a_record_whose_lists_disagree_is_an_error_naming_the_feature(tmp_path):
    sample = {name: np.zeros([2] + spec.shape.as_list()[1:] if spec.shape.rank else [],
                             spec.dtype.as_numpy_dtype) if name not in ("profile",) else np.zeros([3], np.int64)
              for name, spec in SPEC.items()}
    bad = dict(sample, cross=np.zeros([3, len(CROSS)], np.float32))   # 3 rows of cross for 2 candidates
    path = str(tmp_path / "bad")
    write_tfrecords([sample, bad], path)
    with pytest.raises(tf.errors.InvalidArgumentError, match=f"cross must hold {len(CROSS)} values per candidate"):
        read_samples(lambda: tfrecord_samples(path))
