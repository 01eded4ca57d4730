"""A model_dir's full checkpoints as its files say, not as TensorFlow's `checkpoint` index says.

The index is a convenience that a copy can lose (a sync of `model.ckpt-*` only, a cleanup
script): a model_dir without it still holds its model. So every reader and every resume finds
the newest full checkpoint by its files: `model.ckpt-<step>.index` with each data shard it names
(`.data-<i>-of-<n>`). The newest such checkpoint is the one the index names, but for the moment
between a save's last rename and the index's update, when it is the newer and whole one.

TensorFlow's save (sharded or not) renames the data shards into place before it writes the
index, and its rotation deletes an old checkpoint's index before its data. So, as files go:
- an index with every data shard it names is a whole checkpoint (a file damaged afterwards is
  refused when it is read, naming it);
- an index with a data shard missing never comes from a save: it is a partial copy. When it is
  newer than every whole checkpoint, every reader refuses it (CheckpointUnreadable, naming the
  missing files) rather than pass over it to an older checkpoint or to step 0;
- data shards without an index come from a sharded save cut short (kill -9 between its renames
  and its index), which keeps its `model.ckpt-<step>_temp` directory until after the index is
  written: with that directory, a reader passes over them and says so (`unfinished_note`), and
  the trainer that holds the lease removes both before it resumes. Without it they are a
  partial copy (a copy writes the data files first, by name), refused like any other; so is a
  meta graph without its index (a save writes it last), and a `checkpoint` file naming a
  checkpoint none of whose files are there when no whole checkpoint is (beside one, a resume goes
  on from the newest whole checkpoint and says so).
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
    return sorted((step, prefix) for step, prefix in _indexed(model_dir) if not missing_files(prefix))


def missing_files(prefix):
    """The names of the data shards that checkpoint `prefix`'s index names and that are not
    there ([] for a whole checkpoint). The shard count is the index header's (a tensor bundle's
    first entry, under the empty key), or the data files' names where the header cannot be read."""
    present = {}
    for path in glob.glob(glob.escape(prefix) + ".data-*-of-*"):
        m = _SHARD.search(path)
        if m:
            present.setdefault(int(m.group(2)), set()).add(int(m.group(1)))
    n = _header_shards(prefix + ".index")
    if n is None:
        if len(present) != 1:
            return [os.path.basename(prefix) + ".data-*-of-*"]
        (n,) = present
    name = os.path.basename(prefix)
    return [f"{name}.data-{i:05d}-of-{n:05d}" for i in range(n) if i not in present.get(n, ())]


def _header_shards(index):
    """num_shards of a tensor bundle's index file, or None when it cannot be read. The index is a
    table whose first entry, under the empty key, is the BundleHeaderProto; TensorFlow writes it
    uncompressed: varints (shared key bytes 0, key bytes 0, value length), then the value."""
    from tensorflow.core.protobuf import tensor_bundle_pb2
    try:
        with open(index, "rb") as f:
            head = f.read(64)
        values, i = [], 0
        for _ in range(3):
            value, shift = 0, 0
            while True:
                byte = head[i]
                i += 1
                value |= (byte & 0x7F) << shift
                shift += 7
                if byte < 0x80:
                    break
            values.append(value)
        if values[:2] != [0, 0] or i + values[2] > len(head):
            return None
        header = tensor_bundle_pb2.BundleHeaderProto.FromString(head[i:i + values[2]])
        return header.num_shards or None
    except (OSError, IndexError, ValueError):
        return None


def latest_checkpoint(model_dir):
    """The prefix of model_dir's newest whole full checkpoint, or None: with or without the
    `checkpoint` index file. CheckpointUnreadable, naming what is missing, when a newer checkpoint
    is there in part without being a save cut short (see the module docstring): a reader never
    passes over it to an older checkpoint or to step 0."""
    for _ in range(3):   # a save that completes while we look: look again
        found = full_checkpoints(model_dir)
        newest = found[-1][0] if found else -1
        completed = False
        for step, prefix in sorted(_newer_files(model_dir, newest).items(), reverse=True):
            # A save renames its data, writes its index, then removes its _temp directory: looked
            # at in the other order, a save that ends meanwhile is never taken for a partial copy.
            saving = os.path.isdir(prefix + "_temp")   # read before the index (see above)
            if os.path.exists(prefix + ".index"):
                missing = missing_files(prefix)
                if not missing:
                    completed = True   # whole since we listed the whole ones
                    break
                raise unreadable(prefix, f"its index is there, but not its data file{'s' if len(missing) > 1 else ''} "
                                         f"{', '.join(missing)}: a partial copy")
            if saving:
                continue   # a save running, or one a kill cut short (unfinished)
            have = sorted(os.path.basename(p) for p in glob.glob(glob.escape(prefix) + ".*"))
            if have:
                raise unreadable(prefix, f"{', '.join(have)} {'are' if len(have) > 1 else 'is'} there, but not its "
                                         f"index {os.path.basename(prefix)}.index: a partial copy (a save writes its "
                                         f"index before its _temp directory goes)")
        if not completed:
            break
    named = named_checkpoint(model_dir)
    if not found and named is not None and not glob.glob(glob.escape(named[1]) + ".*"):
        # (beside a whole checkpoint, the trainer resumes from it and says so: index_stale)
        raise unreadable(named[1], f"the `{INDEX}` file names it, and none of its files are there: they were not "
                                   f"copied, or were removed")
    return found[-1][1] if found else None


def _newer_files(model_dir, newest):
    """{step: prefix} of the checkpoints newer than step `newest` of which some file (index, data,
    meta graph) is in model_dir."""
    out = {}
    pattern = re.compile(re.escape(BASENAME) + r"-(\d+)\.(index|meta|data-\d+-of-\d+)$")
    for name in os.listdir(model_dir) if os.path.isdir(model_dir) else ():
        match = pattern.match(name)
        if match and int(match.group(1)) > newest:
            out[int(match.group(1))] = os.path.join(model_dir, f"{BASENAME}-{match.group(1)}")
    return out


def named_checkpoint(model_dir):
    """(step, prefix) of the checkpoint the `checkpoint` index file names, or None."""
    try:
        state = tf.train.get_checkpoint_state(model_dir)
    except (tf.errors.OpError, ValueError):
        return None
    path = state.model_checkpoint_path if state is not None else ""
    prefix = os.path.join(model_dir, os.path.basename(path))   # (a copy's absolute paths name the original)
    match = _STEP.search(os.path.basename(prefix) + ".index") if path else None
    return (int(match.group(1)), prefix) if match else None


def _indexed(model_dir):
    """[(step, prefix)] of every `model.ckpt-<step>.index` in model_dir, newest first."""
    out = []
    for index in glob.glob(os.path.join(glob.escape(model_dir), f"{BASENAME}-*.index")):
        match = _STEP.search(os.path.basename(index))
        if match:
            out.append((int(match.group(1)), index[:-len(".index")]))
    return sorted(out, reverse=True)


def unfinished(model_dir):
    """What a reader of model_dir passes over as the remains of saves cut short by a kill -9:
    the prefixes of checkpoints newer than the newest whole one that have data shards, no index,
    and their save's `_temp` directory; and the deltas after it with data but no index (a delta's
    save renames its data before it writes its index)."""
    found = full_checkpoints(model_dir)
    newest = found[-1][0] if found else -1
    out = [p for _, p in sorted(_newer_files(model_dir, newest).items())
           if not os.path.exists(p + ".index") and os.path.isdir(p + "_temp")]
    for path in sorted(glob.glob(os.path.join(glob.escape(model_dir), "delta-*.data-*-of-*"))):
        prefix = path[:_SHARD.search(path).start()] if _SHARD.search(path) else ""
        step = prefix.rsplit("-", 1)[-1]
        if step.isdigit() and int(step) > newest and not os.path.exists(prefix + ".index") and prefix not in out:
            out.append(prefix)
    return out


def unfinished_note(model_dir):
    """A line that says what a reader of model_dir passes over (see unfinished) and where it goes
    on from, or None when there is nothing."""
    skipped = unfinished(model_dir)
    latest = latest_checkpoint(model_dir)
    named = named_checkpoint(model_dir)
    gone = named is not None and latest is not None and named[0] > int(_STEP.search(
        os.path.basename(latest) + ".index").group(1)) and not glob.glob(glob.escape(named[1]) + ".*")
    if not skipped and not gone:
        return None
    said = []
    if skipped:
        names = ", ".join(os.path.basename(p) for p in skipped)
        said.append(f"{names} {'have' if len(skipped) > 1 else 'has'} data files but no .index (saves a kill cut "
                    f"short): not readable, so passed over")
    if gone:
        said.append(f"the `{INDEX}` file names {os.path.basename(named[1])}, none of whose files are there")
    return (f"{model_dir}: {'; '.join(said)}; the newest whole checkpoint is "
            f"{os.path.basename(latest) if latest else 'none (training starts from step 0)'}")


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


def short_data(prefix, reader=None):
    """Why checkpoint `prefix`'s data files cannot hold what its index names (a file cut short),
    or "": the bytes of its fixed-size tensors against the data files' sizes, from the index
    alone (reader: its tf.train.load_checkpoint reader, if at hand). (A cut shorter than its
    string tensors is found by the restore's checksums.)"""
    import tensorflow as tf
    try:
        reader = reader or tf.train.load_checkpoint(prefix)
        shapes, dtypes = reader.get_variable_to_shape_map(), reader.get_variable_to_dtype_map()
    except (RuntimeError, ValueError, tf.errors.OpError):
        return ""   # an unreadable index is named by the reader that needs it
    need = 0
    for name, shape in shapes.items():
        dtype = tf.as_dtype(dtypes[name])
        if dtype != tf.string:
            count = 1
            for d in shape:
                count *= d
            need += count * dtype.size
    files = glob.glob(glob.escape(prefix) + ".data-*-of-*")
    have = sum(os.path.getsize(f) for f in files)
    if have >= need:
        return ""
    return (f"its data files hold {have} bytes, fewer than the {need} its index names (one of them cut short: "
            f"{', '.join(sorted(os.path.basename(f) for f in files))})")


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
    """Removes abandoned_saves(model_dir), with the data shards such a save renamed into place
    before it was cut short (those of a checkpoint without its index); only the holder of the
    model_dir's lease, before its session starts (no save of its own is running). Returns the
    directories removed."""
    import shutil
    removed = []
    for path in abandoned_saves(model_dir):
        prefix = path[:-len("_temp")]
        if not os.path.exists(prefix + ".index"):
            for data in glob.glob(glob.escape(prefix) + ".data-*-of-*"):
                os.remove(data)
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed
