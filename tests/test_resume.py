"""Resuming from deltas after kill -9 at random moments, and from a model_dir that lost its
index or holds a truncated checkpoint or delta: every batch is trained exactly once (each run's
update counts against one uninterrupted run of the same batches, the `straight` fixture)."""
import glob
import json
import os
import random
import time

import numpy as np
import pytest
import tensorflow as tf

from tfps.state import deltas
from test_state import _updates


STEPS = 1600
CHAOS = ["--config", "configs/demo.yaml", "--set", f"train.steps={STEPS}", "--set", "train.batch_size=256",
         "--set", "train.delta_every_secs=1", "--set", "train.save_checkpoints_steps=1200",
         "--set", "train.log_every_steps=1000", "--set", "eval.examples=20000"]


def _train(forker, model_dir, kill_after=None, kill_when=None):
    """`tfps train` of CHAOS into model_dir (a process of its own, forked by `forker`), killed with
    SIGKILL kill_after seconds after its first line, or once kill_when() is true (None: to the
    end). Returns the final JSON line's dict, or None when killed."""
    run = forker.start(["train", *CHAOS, "--set", f"model_dir={model_dir}"], f"{model_dir}.out")
    run.first_line()   # the config is read: the rest is graph, restore and training
    if kill_when is not None:
        deadline = time.time() + 300
        while run.poll() is None and not kill_when() and time.time() < deadline:
            time.sleep(0.05)
        kill_after = 0 if run.poll() is None else None
    if run.wait(kill_after if kill_after is not None else 600) is None:
        run.kill()
        return None
    assert run.returncode == 0, run.output()[-3000:]
    return json.loads(run.output().strip().splitlines()[-1])


@pytest.fixture(scope="session")   # kept for the worker's session: a module fixture is torn down
def straight(tmp_path_factory, forker):    # whenever xdist runs another file's test between the group's two
    """An uninterrupted run of CHAOS: (final JSON, {table: (keys, update counts)}, global step)."""
    model_dir = str(tmp_path_factory.mktemp("straight"))
    result = _train(forker, model_dir)
    return (result, *_updates(model_dir))


def _same_updates(model_dir, straight):
    got_updates, got_step = _updates(model_dir)
    _, want_updates, want_step = straight
    assert got_step == want_step == STEPS
    assert sorted(got_updates) == sorted(want_updates)
    for table, (keys, freq) in want_updates.items():
        np.testing.assert_array_equal(got_updates[table][0], keys)
        np.testing.assert_array_equal(got_updates[table][1], freq)


@pytest.mark.slow
@pytest.mark.xdist_group("straight")   # one uninterrupted run serves both (make test: --dist loadgroup)
def test_a_refused_delta_says_what_to_move_and_moving_it_trains_every_batch_once(tmp_path, straight, forker):
    """A delta in the middle of the chain is cut short: the resume is refused (exit 2) before it
    trains; moving the files DeltaRefused names resumes from the cut before it, and the run ends
    with every row's update count equal to the uninterrupted run's."""
    model_dir = str(tmp_path)
    def three_deltas():   # a chain of 3 deltas after the first checkpoint, at any machine load
        try:
            return len(deltas.latest_cut(model_dir)[1]) >= 3
        except (ValueError, tf.errors.OpError):   # a file being written as we read
            return False
    killed = _train(forker, model_dir, kill_when=three_deltas)
    assert killed is None, "the run ended before it was killed"
    full, chain, _ = deltas.latest_cut(model_dir)
    assert len(chain) >= 3, chain
    bad = chain[1][1]
    data = max(glob.glob(bad + ".data-*"), key=os.path.getsize)   # the data file of the table's part
    with open(data, "r+b") as f:
        f.truncate(os.path.getsize(data) // 2)
    before = sorted(os.listdir(model_dir))
    resume = forker.start(["train", *CHAOS, "--set", f"model_dir={model_dir}"], f"{model_dir}.resume.out")
    assert resume.wait(300) == 2, resume.output()[-2000:]
    assert sorted(os.listdir(model_dir)) == before   # a refused run leaves model_dir as it was
    assert deltas.delta_files(model_dir, after_step=-1)[-len(chain):] == chain   # nothing trained or written
    assert tf.train.latest_checkpoint(model_dir) == full
    with pytest.raises(deltas.DeltaRefused) as refused:
        deltas.delta_chain(model_dir, deltas.checkpoint_step(full))
    assert refused.value.files == [prefix for _, prefix in chain[1:]]
    os.makedirs(tmp_path / "moved")
    for prefix in refused.value.files:
        for path in tf.io.gfile.glob(prefix + ".*"):
            os.rename(path, tmp_path / "moved" / os.path.basename(path))
    assert deltas.latest_cut(model_dir)[2] == chain[0][0]
    # Asked to train to the step of the cut it resumes (a checkpoint and a delta after it):
    # nothing is trained, and no checkpoint or delta is written.
    at = chain[0][0]
    done = forker.run(["train", *CHAOS, "--set", f"model_dir={model_dir}", "--set", f"train.steps={at}"],
                      f"{model_dir}.at_cut", timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert tf.train.latest_checkpoint(model_dir) == full and deltas.latest_cut(model_dir)[2] == at
    assert [s for s, _ in deltas.delta_files(model_dir)] == [chain[0][0]]
    _train(forker, model_dir)
    _same_updates(model_dir, straight)


@pytest.mark.slow
@pytest.mark.xdist_group("straight")
def test_kill_9_at_random_moments_trains_every_batch_once(tmp_path, straight, forker):
    """6 kills at random moments (deltas every second, full checkpoints every 1200 steps), each
    resumed: every row has as many updates as in an uninterrupted run of the same batches, and
    the AUC is within 0.002 of it. Every other kill comes 0-4 s after the run's first line (the
    restore, or training on a fast machine); the others 0-1 s after the run has written a delta
    of its own, so some kills hit training with deltas however loaded the machine is."""
    rng = random.Random(23)
    chaos = str(tmp_path / "chaos")
    kills = deltas_seen = 0
    while kills < 6:
        if kills % 2:
            result = _train(forker, chaos, kill_when=_after_a_new_delta(chaos, rng.uniform(0.0, 1.0)))
        else:
            result = _train(forker, chaos, kill_after=rng.uniform(0.0, 4.0))
        if result is not None:
            break   # it finished before this kill
        kills += 1
        deltas_seen += len(deltas.delta_files(chaos))
    assert kills >= 5 and deltas_seen >= 3   # the kills hit training with deltas, not only start-ups
    if result is None:
        result = _train(forker, chaos)
    _same_updates(chaos, straight)
    assert abs(result["auc"] - straight[0]["auc"]) <= 0.002


def _after_a_new_delta(model_dir, delay):
    """A kill_when for _train: true `delay` seconds after a delta not in model_dir now appears."""
    known, seen = set(deltas.delta_files(model_dir)), []

    def when():
        if not seen and set(deltas.delta_files(model_dir)) - known:
            seen.append(time.time())
        return bool(seen) and time.time() >= seen[0] + delay
    return when


def _tree(model_dir):
    """{relative path: bytes} of every file under model_dir: what a refused run must not change."""
    out = {}
    for folder, _, files in os.walk(model_dir):
        for f in files:
            path = os.path.join(folder, f)
            with open(path, "rb") as fh:
                out[os.path.relpath(path, model_dir)] = fh.read()
    return out


@pytest.mark.slow
@pytest.mark.xdist_group("straight")
def test_a_model_dir_without_its_checkpoint_index_resumes_from_its_files(tmp_path, straight, forker):
    """The `checkpoint` index file is deleted after a kill -9 that left a full checkpoint and a
    chain of deltas: the resume goes on from the newest cut on disk (not from step 0 over the old
    checkpoints), and every row ends with the uninterrupted run's update count. The same model_dir
    with its full checkpoints gone too (deltas only) is refused, and left byte-identical."""
    model_dir = str(tmp_path)

    def two_deltas_after_a_checkpoint():
        try:
            full, chain, _ = deltas.latest_cut(model_dir)
            return full is not None and len(chain) >= 2
        except (ValueError, tf.errors.OpError):   # a file being written as we read
            return False
    assert _train(forker, model_dir, kill_when=two_deltas_after_a_checkpoint) is None, "ended before the kill"
    full, chain, step = deltas.latest_cut(model_dir)
    os.remove(os.path.join(model_dir, "checkpoint"))
    assert tf.train.latest_checkpoint(model_dir) is None   # TensorFlow's own restore would start from 0

    orphans = str(tmp_path / "orphans")   # a copy without any model.ckpt-*: nothing to resume from
    os.makedirs(orphans)
    for name in os.listdir(model_dir):
        if name.startswith("delta-"):
            with open(os.path.join(model_dir, name), "rb") as src, open(os.path.join(orphans, name), "wb") as dst:
                dst.write(src.read())
    before = _tree(orphans)
    refused = forker.run(["train", *CHAOS, "--set", f"model_dir={orphans}"], f"{orphans}.out", timeout=300)
    assert refused.returncode == 2, refused.stderr[-2000:]
    assert _tree(orphans) == before

    assert deltas.latest_cut(model_dir) == (full, chain, step)   # found by its files
    inspected = forker.run(["inspect", model_dir], f"{model_dir}.inspect", timeout=300)
    assert inspected.returncode == 0, inspected.stderr[-2000:]
    _train(forker, model_dir)
    _same_updates(model_dir, straight)


@pytest.mark.slow
@pytest.mark.xdist_group("straight")
def test_a_cluster_model_dir_without_its_index_resumes_in_one_process(tmp_path, straight, forker):
    """A 1-trainer cluster (2 PS) trains part of CHAOS's steps; its `checkpoint` index is deleted;
    `tfps train` in one process resumes from the cluster's newest checkpoint (a cut is the model's,
    not its placement's) and ends with the uninterrupted run's update counts."""
    model_dir = str(tmp_path)
    part = [a if a != f"train.steps={STEPS}" else "train.steps=300" for a in CHAOS]
    run = forker.run(["launch", "--ps", "2", "--workers", "1", *part, "--set", f"model_dir={model_dir}"],
                     tmp_path / "launch", timeout=300)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert deltas.latest_cut(model_dir)[2] == 300
    os.remove(os.path.join(model_dir, "checkpoint"))
    _train(forker, model_dir)
    _same_updates(model_dir, straight)


@pytest.mark.slow
@pytest.mark.xdist_group("straight")
def test_a_truncated_checkpoint_is_refused_naming_it_and_leaves_model_dir_as_it_was(tmp_path, straight, forker):
    """The newest full checkpoint's data file is cut short: `tfps train` and `tfps export` refuse
    (exit 2) naming the file, change nothing in model_dir, and moving the files the message names
    resumes from the cut before it, with every row's update count as uninterrupted."""
    model_dir = str(tmp_path / "m")
    short = [a if a != f"train.steps={STEPS}" else "train.steps=1300" for a in CHAOS]
    short = [a if a != "train.save_checkpoints_steps=1200" else "train.save_checkpoints_steps=500" for a in short]
    run = forker.run(["train", *short, "--set", f"model_dir={model_dir}"], tmp_path / "first", timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    newest = tf.train.latest_checkpoint(model_dir)
    assert newest.endswith("model.ckpt-1300"), newest
    data = max(glob.glob(newest + ".data-*"), key=os.path.getsize)   # the file of the table's part
    whole = open(data, "rb").read()
    for cut in (len(whole) // 3, 100):   # a third or almost all of the table's rows gone
        with open(data, "wb") as f:
            f.write(whole[:cut])
        before = _tree(model_dir)
        runs = [["train", *CHAOS]] + ([["export", *CHAOS, "--export-dir", str(tmp_path / "export")]] if cut == 100 else [])
        for argv in runs:
            r = forker.run([*argv, "--set", f"model_dir={model_dir}"], tmp_path / argv[0], timeout=300)
            assert r.returncode == 2, (cut, r.stderr[-2000:])
            assert _tree(model_dir) == before
    assert not os.path.exists(tmp_path / "export") or not os.listdir(tmp_path / "export")
    from tfps.config import load_config
    from tfps.runner.job import export
    from tfps.state.disk import CheckpointUnreadable
    sets = CHAOS[3::2] + [f"model_dir={model_dir}"]
    with pytest.raises(CheckpointUnreadable) as refused:   # the file it could not read, named
        export(load_config("configs/demo.yaml", sets), str(tmp_path / "export"))
    assert refused.value.files == [newest]
    os.makedirs(tmp_path / "moved")
    for path in tf.io.gfile.glob(newest + ".*"):
        os.rename(path, tmp_path / "moved" / os.path.basename(path))
    os.makedirs(os.path.join(model_dir, "model.ckpt-1250_temp"))   # a save a kill -9 cut short
    _train(forker, model_dir)
    _same_updates(model_dir, straight)
    from tfps.state import disk
    assert disk.abandoned_saves(model_dir) == []   # removed by the resume that holds the lease
