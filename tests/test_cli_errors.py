"""tfps.cli's one-line errors: the telling line of TF's multi-line messages; bad launches, bad
TF_CONFIGs and user errors answered with exit code 2 and one line naming what is wrong (in
this process: they end before any training)."""
import glob
import os
import json
import socket

import pytest

from tfps.cluster.launch import cluster_spec
from tfps.cli import _op_error_line
from tfps.state import disk


def test_the_reason_of_a_remote_and_a_local_graph_error_is_found():
    remote = ("=====================\nINVALID_ARGUMENT: From /job:ps/replica:0/task:1:\n"
              "criteo: /data/day.txt line 5: has I3 = 'abc', not an integer\n\t [[{{node TfpsCheckRows}}]]\n"
              "=====================")
    assert _op_error_line(remote) == "criteo: /data/day.txt line 5: has I3 = 'abc', not an integer"
    local = ("Graph execution error:\n\nDetected at node 'save/RestoreV2' defined at (most recent call last):\n"
             "  File \"x.py\", line 1, in <module>\nNode: 'save/RestoreV2'\nKey mlp_1/bias not found in checkpoint\n"
             "\t [[{{node save/RestoreV2}}]]")
    assert _op_error_line(local) == "Key mlp_1/bias not found in checkpoint"
    assert _op_error_line("From /job:chief/replica:0/task:0:\nmovielens: r.csv line 2: bad") == \
        "movielens: r.csv line 2: bad"


def test_bad_launches_fail_clearly(cli):
    for args, message in ((["--ps", "0"], "--ps must be >= 1"),
                          (["--protocol", "grpc+verbs"], "needs a TensorFlow build with that transport"),
                          (["--set", "train.nope=1"], "unknown config key 'train.nope'")):
        code, _, err = cli("launch", "--config", "configs/demo.yaml", *args)
        assert code == 2 and message in err, (args, err[-2000:])


def test_bad_cluster_configs_fail_clearly(tmp_path, cli):
    taken = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    busy = f"127.0.0.1:{taken.getsockname()[1]}"
    spec = cluster_spec(1, 1)
    cases = (({"cluster": {**spec, "ps": [busy]}, "task": {"type": "ps", "index": 0}}, f"cannot listen on {busy}"),
             ({"cluster": {"chief": spec["chief"]}, "task": {"type": "chief", "index": 0}}, "no 'ps' tasks"),
             ({"cluster": {**spec, "trainer": ["127.0.0.1:1"]}, "task": {"type": "ps", "index": 0}},
              "unknown task type 'trainer'"))
    try:
        for tf_config, message in cases:
            code, _, err = cli("train", "--config", "configs/demo.yaml", "--set", f"model_dir={tmp_path}",
                               env={"TF_CONFIG": json.dumps(tf_config)})
            assert code == 2 and message in err, (message, err[-2000:])
    finally:
        taken.close()


def test_user_errors_are_one_line(tmp_path, cli):
    locked = tmp_path / "a_file"            # a directory cannot be made under a file (even as root)
    locked.write_text("x")
    cases = [["launch", "--set", "cluster.host=no.such.host.invalid"],
             ["launch", "--set", f"model_dir={locked / 'run'}"],
             ["train", "--set", f"model_dir={locked / 'run'}"],
             ["train", "--set", "train.steps=[1, 2"]]
    for args in cases:
        code, _, err = cli(args[0], "--config", "configs/demo.yaml", *args[1:])
        lines = err.strip().splitlines()
        assert code == 2 and len(lines) == 1 and lines[0].startswith("tfps: "), (args, err[-2000:])


def _all_bad(tmp_path, reader):
    """(config overrides) of a data set of `reader` whose every row is malformed."""
    if reader == "criteo":   # (a good eval row: the check of the eval set before training passes)
        path, good = tmp_path / "bad.txt", tmp_path / "eval.txt"
        path.write_text("1\t2\n" * 40 + "x\t" * 39 + "y\n")
        good.write_text("\t".join(["1"] + ["1"] * 13 + ["a"] * 26) + "\n")
        return ["data.format=criteo", f"data.path={path}", f"data.eval_path={good}"]
    if reader == "tfrecord":   # an empty file: nothing to read at all
        path = tmp_path / "empty.tfrecord"
        path.write_bytes(b"")
        return ["data.format=tfrecord", f"data.path={path}", f"data.eval_path={path}",
                "data.features=[{name: x, type: float}]"]
    directory = tmp_path / "ml"
    directory.mkdir()
    (directory / "ratings.csv").write_text("userId,movieId,rating,timestamp\n" + "a,b,c,d\n" * 30)
    (directory / "movies.csv").write_text("movieId,title,genres\n1,Toy Story (1995),Comedy\n")
    return [f"data.format={reader}", f"data.path={directory}"]


@pytest.mark.parametrize("reader", ["criteo", "movielens", "movielens_sequences", "tfrecord"])
@pytest.mark.parametrize("skip", [True, False])
def test_an_input_with_nothing_to_train_on_is_an_error_not_a_hang(tmp_path, cli, reader, skip):
    """Every row malformed (or no row at all), with and without data.skip_bad_rows: `tfps train`
    ends with exit 2 (an error, not an endless skip) having trained no step (at most the
    initial checkpoint of step 0 is written)."""
    model = "mtgr" if reader == "movielens_sequences" else "deepfm"
    sets = _all_bad(tmp_path, reader) + [f"model.name={model}", f"data.skip_bad_rows={str(skip).lower()}",
                                         "train.steps=20", f"model_dir={tmp_path / 'm'}"]
    code, _, err = cli("train", "--config", "configs/demo.yaml", *[a for s in sets for a in ("--set", s)])
    assert code == 2, err[-2000:]
    assert {step for step, _ in disk.full_checkpoints(str(tmp_path / "m"))} <= {0}


def test_an_eval_set_that_is_empty_is_refused_before_training(tmp_path, cli):
    """MovieLens with one good rating (every user's latest share rounds down to nothing): the
    empty eval set is an error before any step is trained (no checkpoint written)."""
    directory = tmp_path / "ml"
    directory.mkdir()
    (directory / "ratings.csv").write_text("userId,movieId,rating,timestamp\n1,1,4.0,100\n" + "a,b,c,d\n" * 5)
    (directory / "movies.csv").write_text("movieId,title,genres\n1,Toy Story (1995),Comedy\n")
    sets = ["data.format=movielens", f"data.path={directory}", "data.skip_bad_rows=true", "train.steps=20",
            f"model_dir={tmp_path / 'm'}"]
    code, _, err = cli("train", "--config", "configs/demo.yaml", *[a for s in sets for a in ("--set", s)])
    assert code == 2, err[-2000:]
    assert not glob.glob(str(tmp_path / "m" / "model.ckpt-*"))


def _bad_eval(tmp_path, case):
    """(config overrides) of good training data and an eval set without a good row."""
    train = tmp_path / "train.txt"
    train.write_text("\t".join(["1"] + ["1"] * 13 + ["a"] * 26) + "\n" + "\t".join(["0"] + ["2"] * 13 + ["b"] * 26)
                     + "\n")
    if case.startswith("criteo"):
        bad = tmp_path / "eval.txt"
        bad.write_text("1\t2\n" * 40)
        return ["data.format=criteo", f"data.path={train}", f"data.eval_path={bad}",
                f"data.skip_bad_rows={str(case == 'criteo_skipped').lower()}"]
    if case == "tfrecord":   # records of the training text, and an eval file of none
        from tfps.data.convert import convert
        data = convert("criteo", str(train), str(tmp_path / "rec"), printer=lambda *a, **k: None)["data"]
        (tmp_path / "eval.tfrecord").write_bytes(b"")
        return ["data.format=tfrecord", f"data.path={data['path']}", f"data.eval_path={tmp_path / 'eval.tfrecord'}"]
    directory = tmp_path / "ml"   # one rating a user: each user's latest 20% rounds down to none
    directory.mkdir()
    (directory / "ratings.csv").write_text("userId,movieId,rating,timestamp\n1,1,4.0,100\n2,1,1.0,200\n")
    (directory / "movies.csv").write_text("movieId,title,genres\n1,Toy Story (1995),Comedy\n")
    return ["data.format=movielens_sequences", f"data.path={directory}", "model.name=mtgr"]


@pytest.mark.parametrize("case", ["criteo_skipped", "criteo_not_skipped", "tfrecord", "movielens_sequences"])
def test_an_eval_set_without_a_good_row_is_refused_before_training(tmp_path, cli, case):
    """Criteo eval rows all malformed (skipped or not), a TFRecord eval file of no record, MTGR's
    empty eval split: exit 2 before any step is trained (no checkpoint written), not after
    training and a checkpoint."""
    sets = _bad_eval(tmp_path, case) + ["train.steps=20", "train.batch_size=2", f"model_dir={tmp_path / 'm'}"]
    code, _, err = cli("train", "--config", "configs/demo.yaml", *[a for s in sets for a in ("--set", s)])
    assert code == 2, err[-2000:]
    assert not glob.glob(str(tmp_path / "m" / "model.ckpt-*"))


def _criteo_files(tmp_path, case):
    """(training file, eval file, the line the reader stops at or None when only the reader knows)
    for `case`: a malformed row, or a gzip file cut mid-stream."""
    import gzip
    from tfps.data.synthetic import SyntheticConfig, SyntheticCriteo, write_criteo_text
    clean = tmp_path / "clean.txt"
    write_criteo_text(SyntheticCriteo(SyntheticConfig()), str(clean), 300)
    rows = clean.read_text().splitlines()
    (tmp_path / "eval.txt").write_text("\n".join(rows[:50]) + "\n")
    if case == "bad_row":
        rows[40] = "1\t2\t3"                      # line 41: 3 fields
        train = tmp_path / "train.txt"
        train.write_text("\n".join(rows) + "\n")
        return train, 41
    train = tmp_path / "train.txt.gz"
    whole = gzip.compress(("\n".join(rows) + "\n").encode())
    train.write_bytes(whole[:len(whole) // 2])   # cut mid-stream: where exactly, only the reader knows
    return train, None


@pytest.mark.parametrize("case", ["bad_row", "truncated_gzip"])
def test_an_input_functions_error_is_the_readers_own_line_and_tfs_chain_only_with_verbose(tmp_path, cli, case):
    """Oracle: the error the Criteo reader raises on the same file read on its own (the
    structured ReaderError found in it, whose text is the reader's, verbatim)."""
    import tensorflow as tf
    from tfps.data.criteo import criteo_dataset
    from tfps.data.schema import numpy_batches
    from tfps.errors import ReaderError
    train, line = _criteo_files(tmp_path, case)
    with pytest.raises(tf.errors.InvalidArgumentError) as raised:
        list(numpy_batches(lambda: criteo_dataset([str(train)], batch_size=100)))
    reader = ReaderError.find(raised.value)
    assert reader is not None and reader.reader == "criteo" and reader.file == str(train) and reader.hint
    assert str(reader) in raised.value.message              # the reader's words, as it raised them
    assert reader.line == line if line is not None else 1 <= reader.line <= 300
    sets = ["data.format=criteo", f"data.path={train}", f"data.eval_path={tmp_path / 'eval.txt'}",
            "train.batch_size=100", "train.steps=3", "model.hidden_units=[8]", "eval.examples=null"]
    args = ["train", "--config", "configs/demo.yaml"] + [a for s in sets for a in ("--set", s)]
    code, _, err = cli(*args, "--set", f"model_dir={tmp_path / 'a'}")
    assert code == 2 and err.strip().splitlines() == [f"tfps: {reader}"], err[-3000:]
    code, _, err = cli(*args, "--set", f"model_dir={tmp_path / 'b'}", "--verbose")
    lines = err.strip().splitlines()
    assert code == 2 and lines[-1] == f"tfps: {reader}", err[-3000:]
    # before it, TF's whole message: the reader's words inside a longer chain
    assert any(str(reader) in x and x != lines[-1] for x in lines[:-1]), err[-3000:]


def test_a_launch_that_every_task_would_refuse_is_refused_before_any_task(tmp_path, cli):
    """A model_dir holding a partial copy of a checkpoint (its index without its data file), and
    a data path that does not exist: `tfps launch` exits 2 before any task, log, pid file or
    lease (what each task would have refused, one by one)."""
    import shutil
    from tfps.data.file_source import DataMissing
    model_dir = tmp_path / "m"
    code, _, err = cli("train", "--config", "configs/demo.yaml", "--set", f"model_dir={model_dir}",
                       "--set", "train.steps=10", "--set", "eval.examples=512")
    assert code == 0, err[-2000:]
    partial = tmp_path / "partial"
    partial.mkdir()
    shutil.copy(model_dir / "model.ckpt-10.index", partial / "model.ckpt-10.index")
    missing = tmp_path / "nowhere"
    launches = [["--set", f"model_dir={partial}"],
                ["--set", f"model_dir={tmp_path / 'fresh'}", "--set", "data.format=criteo",
                 "--set", f"data.path={missing}", "--set", f"data.eval_path={missing}"]]
    for sets in launches:
        code, _, err = cli("launch", "--config", "configs/demo.yaml", "--ps", "1", "--workers", "1", *sets)
        assert code == 2, err[-2000:]
    assert sorted(os.listdir(partial)) == ["model.ckpt-10.index"]   # no logs/, no lease
    assert not (tmp_path / "fresh").exists()
    # what was refused, as the exceptions each task's own check raises
    from tfps.config import load_config
    from tfps.data.sources import make_source
    from tfps.state import deltas
    with pytest.raises(disk.CheckpointUnreadable):
        deltas.latest_cut(str(partial))
    with pytest.raises(DataMissing):
        make_source(load_config("configs/demo.yaml", launches[1][1::2]))
