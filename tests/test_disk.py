"""tfps.state.disk: a model_dir's checkpoints as its files say. A partial copy of the newest
checkpoint is refused, naming its missing files, whatever other files are there; it is never
passed over for an older checkpoint or for step 0 in silence."""
import itertools
import os
import shutil

import pytest
import tensorflow as tf

from tfps.state import disk


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A model_dir with two whole checkpoints, of steps 10 and 20, each in two data shards, with
    its `checkpoint` index file."""
    model_dir = str(tmp_path_factory.mktemp("saved"))
    with tf.Graph().as_default():
        with tf.device("/cpu:0"):
            v = tf.compat.v1.get_variable("v", initializer=[1.0, 2.0])
        with tf.device("/cpu:1"):
            w = tf.compat.v1.get_variable("w", initializer=[3.0])
            gs = tf.compat.v1.train.create_global_step()
        saver = tf.compat.v1.train.Saver([v, w, gs], sharded=True, max_to_keep=None)
        config = tf.compat.v1.ConfigProto(device_count={"CPU": 2})
        with tf.compat.v1.Session(config=config) as session:
            session.run(tf.compat.v1.global_variables_initializer())
            for step in (10, 20):
                session.run(gs.assign(step))
                saver.save(session, os.path.join(model_dir, disk.BASENAME), global_step=step)
    return model_dir


NEWEST = ["model.ckpt-20.index", "model.ckpt-20.data-00000-of-00002", "model.ckpt-20.data-00001-of-00002",
          "model.ckpt-20.meta", disk.INDEX]
DATA = NEWEST[1:3]


def _subsets():
    for n in range(len(NEWEST) + 1):
        yield from itertools.combinations(NEWEST, n)


@pytest.mark.parametrize("older", [False, True], ids=["alone", "beside-an-older-whole-one"])
def test_every_subset_of_the_newest_checkpoints_files(saved, tmp_path, older):
    """Every subset of the newest checkpoint's files (index, both data shards, meta graph, the
    `checkpoint` file naming it), with and without an older whole checkpoint beside it, with and
    without the `_temp` directory of a sharded save cut short:
    - an index without all its data shards is refused (CheckpointUnreadable) naming exactly the
      missing shards, by every reader (latest_checkpoint, the cut);
    - an index with its shards is the newest checkpoint (meta graph and `checkpoint` file or not);
    - data shards or a meta graph without the index are a partial copy, refused naming the index,
      unless the save's `_temp` directory is there: then they are passed over, said so
      (unfinished_note), and removed with it by the trainer that holds the lease;
    - the `checkpoint` file alone, naming a checkpoint none of whose files are there, is refused;
      beside a whole checkpoint, a resume goes on from that one and says so."""
    from tfps.state.deltas import latest_cut
    older_files = [f for f in os.listdir(saved) if f.startswith("model.ckpt-10.")] if older else []
    for subset, temp in itertools.product(_subsets(), (False, True)):
        model_dir = tmp_path / ("s" + "".join(str(NEWEST.index(f)) for f in subset) + ("t" if temp else ""))
        model_dir.mkdir()
        for name in list(subset) + older_files:
            shutil.copy(os.path.join(saved, name), model_dir / name)
        if temp:
            (model_dir / "model.ckpt-20_temp").mkdir()
        prefix = str(model_dir / "model.ckpt-20")
        fallback = str(model_dir / "model.ckpt-10") if older else None
        missing = [f for f in DATA if f not in subset]
        files = [f for f in subset if f != disk.INDEX]
        refused = None
        if NEWEST[0] in subset and missing:
            refused = missing
        elif NEWEST[0] not in subset and files and not temp:
            refused = ["model.ckpt-20.index"] + files
        elif subset == (disk.INDEX,) and not older:   # it names a checkpoint that is not there, and nothing else is
            refused = ["none of its files"]
        if refused is not None:
            with pytest.raises(disk.CheckpointUnreadable) as error:
                disk.latest_checkpoint(str(model_dir))
            assert error.value.files == [prefix], subset
            assert all(f in str(error.value) for f in refused), (subset, temp, str(error.value))
            with pytest.raises(disk.CheckpointUnreadable):
                latest_cut(str(model_dir))
            continue
        if NEWEST[0] in subset:
            assert disk.latest_checkpoint(str(model_dir)) == prefix, (subset, temp)
            assert latest_cut(str(model_dir))[0] == prefix
            continue
        assert disk.latest_checkpoint(str(model_dir)) == fallback, (subset, temp)
        note = disk.unfinished_note(str(model_dir))
        if files and temp:   # a save cut short: passed over, said so, removed by the lease holder
            assert disk.unfinished(str(model_dir)) == [prefix]
            assert "model.ckpt-20" in note and ("model.ckpt-10" if older else "step 0") in note, note
            disk.remove_abandoned_saves(str(model_dir))
            assert sorted(os.listdir(model_dir)) == sorted(f for f in list(subset) + older_files if f not in DATA)
        elif subset == (disk.INDEX,):   # beside a whole checkpoint: resumed from it, and said
            assert "none of whose files are there" in note and "model.ckpt-10" in note, note
        else:
            assert disk.unfinished(str(model_dir)) == [] and note is None, (subset, temp)


def test_a_partial_checkpoint_older_than_a_whole_one_does_not_matter(saved, tmp_path):
    """Only a partial copy newer than every whole checkpoint stops a reader: a whole newer one is
    where a resume goes on from anyway."""
    for name in os.listdir(saved):
        if name.startswith("model.ckpt-20.") or name == "model.ckpt-10.index":
            shutil.copy(os.path.join(saved, name), tmp_path / name)
    assert disk.latest_checkpoint(str(tmp_path)) == str(tmp_path / "model.ckpt-20")
    assert disk.full_checkpoints(str(tmp_path)) == [(20, str(tmp_path / "model.ckpt-20"))]


@pytest.mark.compat   # TensorFlow's on-disk index layout, read by hand: on both lines in CI
def test_the_shard_count_is_read_from_the_index_header(saved, tmp_path):
    shutil.copy(os.path.join(saved, "model.ckpt-20.index"), tmp_path / "model.ckpt-20.index")
    assert disk.missing_files(str(tmp_path / "model.ckpt-20")) == DATA
    (tmp_path / "model.ckpt-20.index").write_bytes(b"\x05garbage")   # a header that cannot be read
    assert disk.missing_files(str(tmp_path / "model.ckpt-20")) == ["model.ckpt-20.data-*-of-*"]


def test_a_save_that_completes_while_a_reader_looks_is_whole_not_a_partial_copy(saved, tmp_path, monkeypatch):
    """The reader lists the whole checkpoints, and a save's index lands before it looks at the
    newer files: it looks again and finds the new checkpoint whole (a worker's or the
    evaluator's read during the chief's save must never refuse the model_dir)."""
    for name in os.listdir(saved):
        if name.startswith(("model.ckpt-10.", "model.ckpt-20.")):
            shutil.copy(os.path.join(saved, name), tmp_path / name)
    listed = iter([[(10, str(tmp_path / "model.ckpt-10"))]])   # the first listing: before the index of 20 landed
    real = disk.full_checkpoints
    monkeypatch.setattr(disk, "full_checkpoints", lambda d: next(listed, None) or real(d))
    assert disk.latest_checkpoint(str(tmp_path)) == str(tmp_path / "model.ckpt-20")
