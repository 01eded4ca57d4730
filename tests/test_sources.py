"""tfps.data.schema.share and the sources: trainers split the stream, and a re-initialized
iterator resumes where its start function says (a session re-created after a failure)."""
import re

import numpy as np
import pytest
import tensorflow as tf

from tfps.config import ConfigError, load_config
from tfps.data.schema import numpy_batches, share


def _iterator(ds):
    it = tf.compat.v1.data.make_initializable_iterator(ds)
    return it, it.get_next()


def test_shares_partition_the_stream_and_resume_from_a_function(graph):
    stream = tf.data.Dataset.range(100)
    position = {"start": 0}
    shares = [share(stream, lambda: position["start"], k, 3) for k in range(3)]
    iterators = [_iterator(ds) for ds in shares]
    with tf.compat.v1.Session() as s:
        def read(n):
            out = []
            for it, nxt in iterators:
                s.run(it.initializer)
                out.append([int(s.run(nxt)) for _ in range(n)])
            return out
        first = read(5)
        assert sorted(x for share_ in first for x in share_) == list(range(15))
        assert first[1] == [1, 4, 7, 10, 13]
        position["start"] = 30                  # the latest checkpoint moved on: re-initializing resumes there
        assert read(2) == [[30, 33], [31, 34], [32, 35]]
    with pytest.raises(ValueError, match="shard_index must be in"):
        share(stream, 0, 3, 3)


@pytest.mark.parametrize("sets,message", [
    (["data.format=csv"], "data.format must be one of"),
    (["data.format=criteo"], "data.path must name the criteo data"),
    (["data.format=criteo", "data.path=x"], "data.eval_path must name the criteo eval files"),
    (["data.format=tfrecord", "data.path=x", "data.skip_bad_rows=true"], "data.skip_bad_rows applies to the text"),
    (["data.features=[{name: x, type: list}]"], "each type must be one of"),
    (["data.features=[{name: x}]"], "config section 'data.features[0]' needs type"),
    (["data.features=[{name: x, type: int, length: 2, names: [a]}]"], "names, if given, one per value"),
    (["model.name=fm"], "model.name must be deepfm, wdl, dcn_v2 or mtgr"),
    (["model.dcn_structure=mixed"], "model.dcn_structure must be stacked or parallel"),
    (["eval.examples=null"], "eval.examples must be set for synthetic data"),
])
def test_bad_data_and_model_keys_are_named(sets, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_config(None, sets)


@pytest.mark.parametrize("name", ["criteo_deepfm", "criteo_dcn", "movielens_deepfm", "movielens_wdl", "movielens_dcn"])
def test_shipped_configs_load(name):
    cfg = load_config(f"configs/{name}.yaml", ["train.optimizer=ftrl"])
    assert cfg.model.name in ("deepfm", "wdl", "dcn_v2") and cfg.data.format in ("criteo", "movielens")
    assert np.isfinite(cfg.train.learning_rate)


def test_eval_examples_takes_exactly_the_first_rows_of_the_eval_files(tmp_path):
    from tfps.data.sources import make_source
    from tfps.data.synthetic import SyntheticConfig, SyntheticCriteo, write_criteo_text
    gen = SyntheticCriteo(SyntheticConfig())
    for name in ("a.txt", "b.txt"):                         # two files: batches end at the first file's end
        write_criteo_text(gen, str(tmp_path / name), 300)
    cfg = load_config(None, ["data.format=criteo", f"data.path={tmp_path / 'a.txt'}", f"data.eval_path={tmp_path}/*.txt",
                             "eval.examples=450"])
    source = make_source(cfg)
    assert source.eval_size() == 450

    def labels_of(examples):
        c = load_config(None, ["data.format=criteo", f"data.path={tmp_path / 'a.txt'}",
                               f"data.eval_path={tmp_path}/*.txt", f"eval.examples={examples}"])
        return np.concatenate([b[1] for b in numpy_batches(make_source(c).eval_input_fn(128))])
    everything = labels_of("null")
    assert len(everything) == 600
    np.testing.assert_array_equal(labels_of(450), everything[:450])
    np.testing.assert_array_equal(labels_of(256), everything[:256])


def test_a_truncated_gzip_eval_file_is_named_before_training_or_counts_no_example(tmp_path):
    """The criteo source counts its eval rows (and looks for text) in Python: a gzip file cut
    mid-stream is TruncatedFileError (a ValueError) naming it, or with skip_bad_rows its whole
    rows are the count."""
    import gzip
    from tfps.data.lines import TruncatedFileError
    from tfps.data.sources import make_source
    from tfps.data.synthetic import SyntheticConfig, SyntheticCriteo, write_criteo_text
    write_criteo_text(SyntheticCriteo(SyntheticConfig()), str(tmp_path / "a.txt"), 300)
    lines = (tmp_path / "a.txt").read_bytes().split(b"\n")
    with open(tmp_path / "eval.gz", "wb") as raw:
        with gzip.GzipFile(fileobj=raw, mode="wb") as f:
            f.write(b"\n".join(lines[:100]) + b"\n" + lines[100][:7])   # 100 rows and a partial one
            f.flush()
            cut = raw.tell()
            f.write(lines[100][7:] + b"\n" + b"\n".join(lines[101:]))
    (tmp_path / "eval.gz").write_bytes((tmp_path / "eval.gz").read_bytes()[:cut])
    sets = ["data.format=criteo", f"data.path={tmp_path / 'a.txt'}", f"data.eval_path={tmp_path / 'eval.gz'}",
            "eval.examples=null"]
    with pytest.raises(TruncatedFileError) as err:
        make_source(load_config(None, sets)).eval_size()
    assert err.value.path == str(tmp_path / "eval.gz") and err.value.line == 101 and "truncated" in str(err.value)
    assert make_source(load_config(None, sets + ["data.skip_bad_rows=true"])).eval_size() == 100


def test_eval_examples_takes_the_first_user_samples_up_to_that_many_candidates(tmp_path):
    """MTGR's eval set in whole samples: the first ones until their candidates reach
    eval.examples. Oracle: the samples of movielens_user_samples, counted in numpy."""
    import ml_tiny
    from tfps.data.sequences import movielens_user_samples
    from tfps.data.sources import make_source
    directory = ml_tiny.write_planted(tmp_path)
    everything = movielens_user_samples(directory, "eval")
    total = sum(len(s["label"]) for s in everything)
    for examples in (5, sum(len(s["label"]) for s in everything[:4]), total + 10):
        taken, seen = [], 0
        for s in everything:             # whole samples while fewer candidates than asked were taken
            if seen >= examples:
                break
            taken.append(s)
            seen += len(s["label"])
        cfg = load_config("configs/movielens_mtgr.yaml", [f"data.path={directory}", f"eval.examples={examples}"])
        source = make_source(cfg)
        batches = list(numpy_batches(source.eval_input_fn(4)))
        np.testing.assert_array_equal(np.concatenate([b[0]["user"] for b in batches]), [s["user"] for s in taken])
        candidates = sum(int((b[0]["candidate_movie"] > 0).sum()) for b in batches)   # movie ids start at 1
        assert source.eval_size() == candidates == seen


def test_a_token_budget_below_the_longest_sample_is_refused_before_training(tmp_path):
    import ml_tiny
    from tfps.data.sequences import movielens_user_samples
    from tfps.data.sources import make_source
    directory = ml_tiny.write_planted(tmp_path)
    longest = max(3 + len(s["history_movie"]) + len(s["realtime_movie"]) + len(s["candidate_movie"])   # oracle
                  for s in movielens_user_samples(directory, "train"))
    cfg = load_config("configs/movielens_mtgr.yaml", [f"data.path={directory}", f"data.max_tokens={longest - 1}"])
    with pytest.raises(ValueError, match=f"below the longest train sample \\({longest} tokens"):
        make_source(cfg).train_input_fn(32)
    ok = load_config("configs/movielens_mtgr.yaml", [f"data.path={directory}", f"data.max_tokens={longest}"])
    assert next(numpy_batches(make_source(ok).train_input_fn(32)))[0]["profile"].shape[0] >= 1


def test_the_synthetic_eval_set_reads_every_example_once_and_stays_out_of_the_graph():
    """The eval batches are the generator's eval set, in order; the graph holds none of it (a
    graph's constants are copied each time TensorFlow optimizes it: 26 MB a copy at 100,000)."""
    from tfps.data.sources import make_source
    cfg = load_config("configs/demo.yaml", ["eval.examples=10000"])
    source = make_source(cfg)
    features, labels, _ = source.eval_set(4096)
    graph = tf.Graph()
    with graph.as_default():
        tf.compat.v1.data.make_one_shot_iterator(source.eval_input_fn(4096)()).get_next()
    assert graph.as_graph_def().ByteSize() < 100_000
    got = list(numpy_batches(source.eval_input_fn(4096)))
    assert [len(b[1]) for b in got] == [4096, 4096, 1808]
    np.testing.assert_array_equal(np.concatenate([b[0]["ids"] for b in got]), features["ids"])
    np.testing.assert_array_equal(np.concatenate([b[0]["dense"] for b in got]), features["dense"])
    np.testing.assert_array_equal(np.concatenate([b[1] for b in got]), labels)


def test_warm_up_requests_are_the_first_rows_evaluation_reads_without_generating_smaller_batches(monkeypatch):
    """A stock export's warm-up requests (1 and 4 rows) are the first rows of the eval batches that
    evaluation reads (eval.batch_size), and the synthetic generator is asked for those batches
    only: none of the requests' own size (25,000 of them at 100,000 examples)."""
    from tfps.data.synthetic import SyntheticCriteo
    from tfps.data.sources import make_source
    from tfps.runner.job import warmup_requests
    cfg = load_config("configs/demo.yaml", ["eval.examples=10000", "eval.batch_size=4096"])
    want, _, _ = make_source(cfg).eval_set(cfg.eval.batch_size)
    sizes, batch = [], SyntheticCriteo.batch
    monkeypatch.setattr(SyntheticCriteo, "batch", lambda self, i, n: sizes.append(n) or batch(self, i, n))
    requests = warmup_requests(cfg)
    assert [len(r["ids"]) for r in requests] == [1, 4]
    for r in requests:
        assert sorted(r) == ["dense", "ids"]
        for k in r:
            np.testing.assert_array_equal(r[k], want[k][:len(r[k])])
    assert sizes and set(sizes) <= {4096, 10000 % 4096}, sizes
