"""A model_dir's full checkpoints as its files say, not as TensorFlow's `checkpoint` index says.

The index is a convenience that a copy can lose (a sync of `model.ckpt-*` only, a cleanup
script): a model_dir without it still holds its model. So every reader and every resume finds
the newest full checkpoint by its files: `model.ckpt-<step>.index` with each data shard it names
(`.data-<i>-of-<n>`). TensorFlow's sharded save writes the index last, so a checkpoint whose
index is there is whole unless a file was damaged afterwards (which its read then refuses,
naming it). The newest such checkpoint is the one the index names, but for the moment between a
save's last rename and the index's update, when it is the newer and whole one.
"""
import glob
import os
import re

import tensorflow as tf

INDEX = "checkpoint"
BASENAME = "model.ckpt"
_STEP = re.compile(re.escape(BASENAME) + r"-(\d+)\.index$")
_SHARD = re.compile(r"\.data-(\d+)-of-(\d+)$")


def full_checkpoints(model_dir):
    """[(step, prefix)] of the whole full checkpoints in model_dir, in step order: those whose
    index file and every data shard are there."""
    out = []
    for index in glob.glob(os.path.join(glob.escape(model_dir), f"{BASENAME}-*.index")):
        match = _STEP.search(os.path.basename(index))
        if match is None:
            continue
        prefix = index[:-len(".index")]
        if _whole(prefix):
            out.append((int(match.group(1)), prefix))
    return sorted(out)


def _whole(prefix):
    shards = [_SHARD.search(p) for p in glob.glob(glob.escape(prefix) + ".data-*-of-*")]
    counts = {int(m.group(2)) for m in shards if m}
    if len(counts) != 1:
        return False
    (n,) = counts
    return {int(m.group(1)) for m in shards if m} == set(range(n))


def latest_checkpoint(model_dir):
    """The prefix of model_dir's newest whole full checkpoint, or None: with or without the
    `checkpoint` index file."""
    found = full_checkpoints(model_dir)
    return found[-1][1] if found else None


def index_stale(model_dir):
    """True when TensorFlow's `checkpoint` index of model_dir is missing or names another
    checkpoint than the newest whole one (so that TensorFlow's own restore would start elsewhere)."""
    latest = latest_checkpoint(model_dir)
    if latest is None:
        return False
    named = tf.train.latest_checkpoint(model_dir)
    return named is None or os.path.abspath(named) != os.path.abspath(latest)


def rewrite_index(model_dir):
    """Writes model_dir's `checkpoint` index to name its newest whole checkpoint (and list every
    whole one, so that the saver's rotation knows them). The trainer that holds the model_dir's
    lease calls it before its session restores. Returns the prefix it names."""
    found = full_checkpoints(model_dir)
    tf.compat.v1.train.update_checkpoint_state(   # relative paths, as the runner's saver writes them
        model_dir, os.path.basename(found[-1][1]),
        all_model_checkpoint_paths=[os.path.basename(p) for _, p in found])
    return found[-1][1]


class CheckpointUnreadable(ValueError):
    """A full checkpoint of a model_dir cannot be read whole (truncated, damaged, a file
    missing): nothing was resumed from it. The message names the files and what to do; `files`:
    the prefixes to move away (the checkpoint, then the deltas that continue it)."""

    def __init__(self, message, files):
        super().__init__(message)
        self.files = list(files)


def unreadable(prefix, error):
    """The CheckpointUnreadable of checkpoint `prefix` that failed to read with `error` (its
    telling line): which files to move away to resume from the cut before it."""
    model_dir, name = os.path.dirname(prefix) or ".", os.path.basename(prefix)
    step = _STEP.search(name + ".index")
    later = []
    if step:
        for index in glob.glob(os.path.join(glob.escape(model_dir), "delta-*.index")):
            tail = os.path.basename(index)[len("delta-"):-len(".index")]
            if tail.isdigit() and int(tail) > int(step.group(1)):
                later.append((int(tail), os.path.basename(index)[:-len(".index")]))
    earlier = [p for s, p in full_checkpoints(model_dir) if step and s < int(step.group(1))]
    moves = " ".join([name + ".*"] + [p + ".*" for _, p in sorted(later)])
    back = (f"to resume from {os.path.basename(earlier[-1])}" if earlier else
            "(no earlier full checkpoint is there: training would start from step 0)")
    return CheckpointUnreadable(
        f"checkpoint {prefix} cannot be read whole ({error}): it is damaged or was copied in part; nothing was "
        f"restored. Put back an intact copy of its files, or move {moves} out of {model_dir} {back}",
        [prefix] + [os.path.join(model_dir, p) for _, p in sorted(later)])


def abandoned_saves(model_dir):
    """The `model.ckpt-<step>_temp` directories of saves that never finished (a kill -9 mid-save):
    TensorFlow's sharded save writes its shards there and removes it when it merges them."""
    return sorted(p for p in glob.glob(os.path.join(glob.escape(model_dir), f"{BASENAME}-*_temp"))
                  if os.path.isdir(p))


def remove_abandoned_saves(model_dir):
    """Removes abandoned_saves(model_dir); only the holder of the model_dir's lease, before its
    session starts (no save of its own is running). Returns the directories removed."""
    import shutil
    removed = []
    for path in abandoned_saves(model_dir):
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed
