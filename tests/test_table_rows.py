"""TfpsTableRows (an export's read of one table at a cut, kernels/table_rows_kernel.cc) against
two oracles: the live table a training wrote its checkpoint and deltas from, and a dict built in
numpy from hand-written bundles (parts of any count, removals, re-added keys, a complete delta,
admission sketches), read in slices far smaller than a part. A damaged or mismatched bundle is an
error naming what is wrong."""
import os

import numpy as np
import pytest
import tensorflow as tf

import tfps
from tfps.ops.checkpoint import table_rows
from tfps.runner.incremental import delta_files

from test_incremental import _DiesBeforeItsLastSave, _build, _sorted

DIM, SLOTS = 4, 2


def _rows(checkpoint, deltas, name, dim=DIM, **kwargs):
    with tf.Graph().as_default(), tf.compat.v1.Session() as s:
        return s.run(table_rows(checkpoint, tf.constant(list(deltas), tf.string), name, dim, **kwargs))


def _by_key(rows, pad=0):
    order = np.argsort(rows.keys)
    values = rows.values[pad:]
    out = {"keys": rows.keys[order], "values": values[order]}
    if len(rows.freq):
        out.update(slots=rows.slots[order], freq=rows.freq[order], last_step=rows.last_step[order])
    return out


def test_a_trained_tables_checkpoint_and_deltas_read_as_the_live_table(tmp_path):
    """Adam, eviction (removals in the deltas), 2 shards: the rows at the end of training equal
    the checkpoint of step 10 read with the chain 12..18, every column; the stock read (pad row,
    no state) the same keys and values."""
    run_dir = str(tmp_path)
    with tf.Graph().as_default():
        ev, train, export, _ = _build(num_shards=2)
        inc = tfps.runner.IncrementalCheckpoints(run_dir, every_steps=2, printer=lambda *a, **k: None)
        saver_hook = _DiesBeforeItsLastSave(run_dir, save_steps=10, listeners=[inc.listener])
        evict = tfps.runner.EvictionHook(3, printer=lambda *a, **k: None)
        with tf.compat.v1.train.SingularMonitoredSession(hooks=[saver_hook, evict, inc]) as s:
            while s.run(tf.compat.v1.train.get_global_step()) < 18:
                s.run(train)
            want = _sorted(s.run(export))
        assert evict.evicted > 0
    chain = [p for _, p in delta_files(run_dir, after_step=10)]
    assert len(chain) == 4
    got = _rows(os.path.join(run_dir, "model.ckpt-10"), chain, "emb", slice_bytes=64)
    mine = _by_key(got)
    for k in ("keys", "values", "slots", "freq", "last_step"):
        np.testing.assert_array_equal(mine[k], want[k], err_msg=k)
    stock = _rows(os.path.join(run_dir, "model.ckpt-10"), chain, "emb", pad_rows=1, with_state=False)
    np.testing.assert_array_equal(stock.values[0], np.zeros(DIM, np.float32))
    assert stock.slots.size == 0 and stock.freq.size == 0 and stock.admission.size == 0
    plain = _by_key(stock, pad=1)
    np.testing.assert_array_equal(plain["keys"], want["keys"])
    np.testing.assert_array_equal(plain["values"], want["values"])
    # Without deltas: the checkpoint alone is the table at step 10.
    assert len(_rows(os.path.join(run_dir, "model.ckpt-10"), [], "emb").keys) > 0


def _write(prefix, tensors):
    names = sorted(tensors)
    with tf.Graph().as_default(), tf.compat.v1.Session() as s:
        s.run(tf.raw_ops.SaveV2(prefix=prefix, tensor_names=names, shape_and_slices=[""] * len(names),
                                tensors=[tf.constant(tensors[n]) for n in names]))


def _part_tensors(table, rows, parts, rng, delta=None, sketch=0):
    """Bundle tensors of {key: (value, slots, freq, last)} as `parts` parts (keys by floormod)."""
    out = {f"{table}-parts": np.int64(parts), f"{table}-slot_init": np.full([SLOTS], 0.1, np.float32)}
    keys = np.array(sorted(rows), np.int64)
    for p in range(parts):
        mine = keys[np.mod(keys, parts) == p]
        cols = {"keys": mine,
                "values": np.array([rows[k][0] for k in mine], np.float32).reshape(-1, DIM),
                "slots": np.array([rows[k][1] for k in mine], np.float32).reshape(-1, SLOTS * DIM),
                "freq": np.array([rows[k][2] for k in mine], np.int64),
                "last_step": np.array([rows[k][3] for k in mine], np.int64),
                "admission": rng.integers(0, 9, sketch).astype(np.int32)}
        if delta is not None:
            removed, complete = delta
            cols["removed"] = np.array(sorted(k for k in removed if k % parts == p), np.int64)
            cols["complete"] = np.bool_(complete)
        for c, v in cols.items():
            out[f"{table}-part{p}-{c}"] = v
    return out


def _random_rows(rng, keys, step):
    return {int(k): (rng.standard_normal(DIM).astype(np.float32), rng.standard_normal(SLOTS * DIM).astype(np.float32),
                     int(rng.integers(1, 100)), step) for k in keys}


@pytest.mark.parametrize("complete_at", [None, 1])
def test_hand_written_cuts_of_any_part_counts_read_as_a_dict_applies_them(tmp_path, complete_at):
    """A checkpoint of 3 parts and deltas of 2, 5 and 1 parts: removals (of checkpoint keys, of
    keys a delta added, of keys never held), updates, keys removed and re-added in one delta; a
    complete delta replaces everything before it. Negative keys too."""
    rng = np.random.default_rng(7)
    table = "t"
    state = _random_rows(rng, rng.choice(np.arange(-5000, 5000), 2000, replace=False), 1)
    ckpt = str(tmp_path / "model.ckpt-1")
    _write(ckpt, _part_tensors(table, state, 3, rng, sketch=12))
    chain, sketch = [], None
    for d, parts in enumerate((2, 5, 1)):
        complete = complete_at == d
        if complete:
            state = _random_rows(rng, rng.choice(np.arange(-9000, 9000), 1500, replace=False), 10 + d)
            changed, removed = state, set()
        else:
            held = np.array(sorted(state), np.int64)
            removed = set(rng.choice(held, 300, replace=False).tolist()) | {123456789 + d}   # one never held
            changed = _random_rows(rng, np.concatenate([rng.choice(held, 200), rng.integers(9000, 9500, 100),
                                                        list(removed)[:20]]), 10 + d)   # 20 removed and re-added
            for k in removed:
                state.pop(k, None)
            state.update(changed)
        prefix = str(tmp_path / f"delta-{10 + d}")
        tensors = _part_tensors(f"{table}-delta", changed, parts, rng, delta=(removed, complete), sketch=12)
        _write(prefix, tensors)
        chain.append(prefix)
        sketch = np.max([tensors[f"{table}-delta-part{p}-admission"] for p in range(parts)], axis=0)
    got = _rows(ckpt, chain, table, slice_bytes=100)
    keys = np.array(sorted(state), np.int64)
    mine = _by_key(got)
    np.testing.assert_array_equal(mine["keys"], keys)
    np.testing.assert_array_equal(mine["values"], np.array([state[k][0] for k in keys]))
    np.testing.assert_array_equal(mine["slots"], np.array([state[k][1] for k in keys]))
    np.testing.assert_array_equal(mine["freq"], np.array([state[k][2] for k in keys]))
    np.testing.assert_array_equal(mine["last_step"], np.array([state[k][3] for k in keys]))
    np.testing.assert_array_equal(got.admission, sketch)
    np.testing.assert_array_equal(got.slot_init, np.full([SLOTS], 0.1, np.float32))


def test_a_checkpoint_saved_before_the_first_apply_takes_its_deltas_slots(tmp_path):
    """A checkpoint of rows without optimizer slots (saved before the optimizer's first apply),
    then a delta with rows of 2 slots: the base rows get slot_init in each slot, as a restore
    gives them; a later delta with rows of another slot count is refused."""
    rng = np.random.default_rng(5)
    table = "t"
    base = {int(k): (rng.standard_normal(DIM).astype(np.float32), np.zeros(0, np.float32), 1, 0)
            for k in range(100)}
    tensors = _part_tensors(table, base, 2, rng)
    tensors[f"{table}-slot_init"] = np.zeros([0], np.float32)
    for p in range(2):
        tensors[f"{table}-part{p}-slots"] = np.zeros([len(tensors[f"{table}-part{p}-keys"]), 0], np.float32)
    ckpt = str(tmp_path / "model.ckpt-0")
    _write(ckpt, tensors)
    changed = _random_rows(rng, range(90, 120), 3)
    delta = str(tmp_path / "delta-3")
    _write(delta, _part_tensors(f"{table}-delta", changed, 1, rng, delta=(set(), False)))
    got = _by_key(_rows(ckpt, [delta], table))
    np.testing.assert_array_equal(got["keys"], np.arange(120))
    np.testing.assert_array_equal(got["slots"][:90], np.full([90, SLOTS * DIM], 0.1, np.float32))
    np.testing.assert_array_equal(got["slots"][90:], np.array([changed[k][1] for k in range(90, 120)]))
    np.testing.assert_array_equal(got["values"][:90], np.array([base[k][0] for k in range(90)]))
    other = _part_tensors(f"{table}-delta", _random_rows(rng, range(5), 4), 1, rng, delta=(set(), False))
    other[f"{table}-delta-slot_init"] = np.full([1], 0.1, np.float32)
    other[f"{table}-delta-part0-slots"] = other[f"{table}-delta-part0-slots"][:, :DIM]
    _write(str(tmp_path / "delta-4"), other)
    with pytest.raises(tf.errors.InvalidArgumentError, match="delta .*delta-4 has rows of 1 optimizer slots"):
        _rows(ckpt, [delta, str(tmp_path / "delta-4")], table)


def test_bad_cuts_are_errors_naming_what_is_wrong(tmp_path):
    rng = np.random.default_rng(1)
    ckpt = str(tmp_path / "model.ckpt-1")
    _write(ckpt, _part_tensors("t", _random_rows(rng, range(5000), 1), 2, rng))
    with pytest.raises(tf.errors.NotFoundError, match="table 'u' is not in the checkpoint"):
        _rows(ckpt, [], "u")
    with pytest.raises(tf.errors.InvalidArgumentError, match="table 't'"):
        _rows(ckpt, [], "t", dim=DIM + 1)
    with pytest.raises(tf.errors.NotFoundError, match="delta-2"):
        _rows(ckpt, [str(tmp_path / "delta-2")], "t")   # no such bundle
    # A part whose keys are another part's, and a data file cut short.
    tensors = _part_tensors("t", _random_rows(rng, range(5000), 1), 2, rng)
    tensors["t-part0-keys"] = tensors["t-part0-keys"] + 1
    bad = str(tmp_path / "bad.ckpt-1")
    _write(bad, tensors)
    with pytest.raises(tf.errors.DataLossError, match="not its own"):
        _rows(bad, [], "t", slice_bytes=64)
    data = ckpt + ".data-00000-of-00001"
    with open(data, "r+b") as f:
        f.truncate(os.path.getsize(data) // 2)
    with pytest.raises((tf.errors.DataLossError, tf.errors.OutOfRangeError), match="rows of table 't'"):
        _rows(ckpt, [], "t", slice_bytes=4096)
