"""The TfpsTable* ops against numpy / TF built-in oracles."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from initializer_reference import init_row
from tfps.ops import embedding_table as et
from tfps.ops import training as tr

I64_MIN, I64_MAX = np.iinfo(np.int64).min, np.iinfo(np.int64).max


def run(fetches, feed=None, sess=None):
    return sess.run(fetches, feed)


@pytest.mark.parametrize("kind,a,b", [("zeros", 0, 0), ("constant", 0.25, 0), ("uniform", -0.5, 2.0),
                                      ("normal", 1.0, 0.3), ("truncated_normal", 0.0, 0.1)])
def test_new_keys_get_initializer_values(graph, kind, a, b):
    keys = np.array([0, 1, -1, 7, I64_MIN, I64_MAX, 123456789012345], np.int64)
    h = et.table_handle(5, kind, a, b, seed=11)
    vals = et.table_find(h, keys)
    with tf.compat.v1.Session() as s:
        got = s.run(vals)
        again = s.run(vals)
        assert s.run(et.table_size(h)) == len(keys)
    want = np.stack([init_row(kind, a, b, 11, int(k), 5) for k in keys])
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    np.testing.assert_array_equal(got, again)


def test_initializer_distribution_matches_tf(graph):
    """Per-key truncated normal has the moments of tf.random.truncated_normal."""
    keys = np.arange(20000, dtype=np.int64)
    h = et.table_handle(1, "truncated_normal", 0.0, 1.0, seed=3)
    with tf.compat.v1.Session() as s:
        ours = s.run(et.table_find(h, keys, insert=False))[:, 0]
        theirs = s.run(tf.random.truncated_normal([20000], seed=1))
    assert abs(ours.std() - theirs.std()) < 0.03
    assert abs(ours.mean() - theirs.mean()) < 0.03
    assert np.abs(ours).max() <= 2.0


def test_lookup_unique_matches_tf_unique(graph):
    rng = np.random.default_rng(0)
    for n in (0, 1, 5, 1000, 40000):
        ids = rng.integers(-50, 50, n).astype(np.int64)
        if n:
            ids[::7] = I64_MIN
        h = et.table_handle(3, "normal", 0, 1, seed=1, shared_name=f"t{n}")
        u, inv, vals = et.table_lookup_unique(h, ids)
        ref_u, _ = tf.unique(ids)
        with tf.compat.v1.Session() as s:
            u_, inv_, vals_, ref_u_ = s.run([u, inv, vals, ref_u])
        assert sorted(u_.tolist()) == sorted(ref_u_.tolist())
        np.testing.assert_array_equal(u_[inv_], ids)
        want = np.stack([init_row("normal", 0, 1, 1, int(k), 3) for k in u_]) if n else np.zeros((0, 3))
        np.testing.assert_allclose(vals_, want, rtol=1e-6, atol=1e-7)


def test_updates_count_frequency_and_step(graph):
    from tfps.ops.training import table_apply_gradient_descent
    h = et.table_handle(2)
    _, _, vals = et.table_lookup_unique(h, tf.constant([4, 4, 4, 9], tf.int64))
    step = tf.compat.v1.placeholder(tf.int64, [])
    apply = table_apply_gradient_descent(h, tf.constant([4], tf.int64), tf.ones([1, 2]), 0.1, step)
    with tf.compat.v1.Session() as s:
        s.run(vals)
        s.run(apply, {step: 7})
        s.run(apply, {step: 11})
        s.run(vals)  # lookups do not count
        exp = s.run(et.table_export(h))
    assert dict(zip(exp.keys.tolist(), exp.freq.tolist())) == {4: 2, 9: 0}
    assert dict(zip(exp.keys.tolist(), exp.last_step.tolist())) == {4: 11, 9: 0}


def test_find_without_insert_leaves_table_unchanged(graph):
    h = et.table_handle(4, "uniform", 0.0, 1.0, seed=2)
    keys = tf.constant([1, 2, 3], tf.int64)
    with tf.compat.v1.Session() as s:
        init_vals = s.run(et.table_find(h, keys, insert=False))
        zeros = s.run(et.table_find(h, keys, insert=False, missing_zeros=True))
        assert s.run(et.table_size(h)) == 0
        s.run(et.table_assign(h, tf.constant([2], tf.int64), tf.ones([1, 4])))
        mixed = s.run(et.table_find(h, keys, insert=False, missing_zeros=True))
        assert s.run(et.table_size(h)) == 1
    np.testing.assert_allclose(init_vals[0], init_row("uniform", 0, 1, 2, 1, 4), rtol=1e-6)
    np.testing.assert_array_equal(zeros, np.zeros((3, 4)))
    np.testing.assert_array_equal(mixed, [[0] * 4, [1] * 4, [0] * 4])


def test_assign_remove_size_and_memory(graph):
    h = et.table_handle(8)
    keys = np.arange(1000, dtype=np.int64) * 1_000_003 - 7
    vals = np.random.default_rng(1).normal(size=(1000, 8)).astype(np.float32)
    with tf.compat.v1.Session() as s:
        s.run(et.table_assign(h, keys, vals))
        np.testing.assert_array_equal(s.run(et.table_find(h, keys)), vals)
        assert s.run(et.table_remove(h, keys[:300])) == 300
        assert s.run(et.table_remove(h, keys[:300])) == 0
        assert s.run(et.table_size(h)) == 700
        rows, reserved, in_use, row_bytes, pending, removed_logged = s.run(et.table_memory_stats(h))
    # No incremental checkpoints: the 300 removed keys are not logged.
    assert rows == 700 and row_bytes == 8 + 8 * 4 + 8 and pending == 0 and removed_logged == 0   # key, value, meta
    assert in_use <= reserved


def test_memory_split_adds_up_to_the_reserved_bytes(graph):
    """table_memory_split: index, rows (with their meta), arena slack and side structures are
    exactly what table_memory_stats reserves, through growth, removal and a slot re-layout."""
    h = et.table_handle(16, shared_name="split")
    keys = tf.compat.v1.placeholder(tf.int64, [None])
    find, remove = et.table_find(h, keys), et.table_remove(h, keys)
    adagrad = tr.table_apply_adagrad(h, keys, tf.ones(tf.stack([tf.size(keys), 16])), 0.1, tf.constant(1, tf.int64))
    stats, split = et.table_memory_stats(h), et.table_memory_split(h)
    with tf.compat.v1.Session() as s:
        for step, (op, n) in enumerate([(find, 50000), (remove, 20000), (adagrad, 30000), (find, 90000)]):
            s.run(op, {keys: np.arange(n, dtype=np.int64) * 7919 + step})
            rows, reserved, _, row_bytes = s.run(stats)[:4]
            index, in_rows, meta, slack, side = s.run(split)
            assert index + in_rows + slack + side == reserved
            assert in_rows == rows * row_bytes and meta == rows * 8 and slack >= 0 and side == 0
            assert index >= rows * 4   # a 4-byte slot per row at least


def test_export_import_round_trip(graph):
    src = et.table_handle(3, "normal", 0, 1, seed=5, shared_name="src")
    dst = et.table_handle(3, "zeros", shared_name="dst")
    keys = tf.constant([3, -3, I64_MAX], tf.int64)
    exported = et.table_export(src)
    with tf.compat.v1.Session() as s:
        before = s.run(et.table_find(src, keys))
        s.run(et.table_import(dst, *exported))
        after = s.run(et.table_find(dst, keys, insert=False))
        assert s.run(et.table_size(dst)) == 3
    np.testing.assert_array_equal(before, after)


def test_bad_inputs_raise_invalid_argument(graph):
    h = et.table_handle(4)
    k = tf.compat.v1.placeholder(tf.int64)
    v = tf.compat.v1.placeholder(tf.float32)
    with tf.compat.v1.Session() as s:
        with pytest.raises(tf.errors.InvalidArgumentError, match="keys must be a vector"):
            s.run(et.table_find(h, k), {k: [[1, 2]]})
        with pytest.raises(tf.errors.InvalidArgumentError, match=r"values must be \[2, 4\]"):
            s.run(et.table_assign(h, k, v), {k: [1, 2], v: np.zeros((2, 3))})
        exp = et.table_export(h)
        wrong = et.table_handle(5, shared_name="wrong")
        with pytest.raises(tf.errors.InvalidArgumentError, match="table has dim 5"):
            s.run(et.table_import(wrong, *exp))
        # Truncated tensors: values shorter than keys.
        with pytest.raises(tf.errors.InvalidArgumentError, match="TfpsTableImport"):
            s.run(et.table_import(h, [1, 2], np.zeros((1, 4), np.float32), np.zeros((2, 0), np.float32),
                                  [0, 0], [0, 0], np.zeros([0], np.float32)))
        other = et.table_handle(6, shared_name=h.op.get_attr("shared_name") or h.op.name)
        with pytest.raises(tf.errors.InvalidArgumentError, match="exists with dim 4"):
            s.run([h, other])
    with pytest.raises(ValueError, match="initializer must be one of"):
        et.table_handle(4, "glorot")
    with pytest.raises((TypeError, ValueError)):
        et.table_find(h, tf.constant([1.5]))


@pytest.mark.parametrize("dim", [16, 3])
def test_gather_rows_matches_tf_gather_and_its_gradient(graph, dim):
    rng = np.random.default_rng(4)
    params = tf.constant(rng.normal(size=(50, dim)).astype(np.float32))
    idx = tf.constant(rng.integers(0, 50, 40000).astype(np.int32))
    ours, theirs = et.gather_rows(params, idx), tf.gather(params, idx)
    w = tf.constant(rng.normal(size=(40000, dim)).astype(np.float32))
    g_ours = tf.gradients(tf.reduce_sum(ours * w), params)[0]
    g_theirs = tf.gradients(tf.reduce_sum(theirs * w), params)[0]
    with tf.compat.v1.Session() as s:
        a, b, ga, gb = s.run([ours, theirs, tf.convert_to_tensor(g_ours), tf.convert_to_tensor(g_theirs)])
    np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(ga, gb, rtol=1e-5, atol=1e-4)


def test_gather_rows_rejects_out_of_range(graph):
    with tf.compat.v1.Session() as s:
        with pytest.raises(tf.errors.InvalidArgumentError, match=r"indices\[1\] = 7 is not in \[0, 2\)"):
            s.run(et.gather_rows(tf.zeros([2, 4]), tf.constant([0, 7], tf.int32)))


def test_scatter_add_rows_matches_unsorted_segment_sum(graph):
    rng = np.random.default_rng(6)
    data = tf.constant(rng.normal(size=(50000, 7)).astype(np.float32))
    idx = tf.constant(rng.integers(0, 300, 50000).astype(np.int32))
    ours = et.scatter_add_rows(data, idx, 301)
    theirs = tf.math.unsorted_segment_sum(data, idx, 301)
    with tf.compat.v1.Session() as s:
        a, b = s.run([ours, theirs])
        with pytest.raises(tf.errors.InvalidArgumentError, match="is not in"):
            s.run(et.scatter_add_rows(data, idx, 100))
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)


def test_sizes_that_used_to_kill_the_process(graph):
    """A wide table allocates small blocks (no std::bad_alloc abort); a dim past the limit, a
    negative or absurd row count, are InvalidArgument."""
    wide = et.table_handle(2**22, "constant", 0.5, shared_name="wide")
    with tf.compat.v1.Session() as s:
        rows = s.run(et.table_find(wide, tf.constant([1, 2], tf.int64)))
        assert rows.shape == (2, 2**22) and (rows == 0.5).all()
        stats = s.run(et.table_memory_stats(wide))
        assert stats[1] < 3 * 4 * (2**22 + 2)       # reserved: about two rows, not 4096
        with pytest.raises(tf.errors.InvalidArgumentError, match="dim must be in"):
            s.run(et.table_size(et.table_handle(2**24 + 1, shared_name="too_wide")))
        data, idx = tf.ones([2, 3]), tf.constant([0, 1], tf.int32)
        num_rows = tf.compat.v1.placeholder(tf.int64, [])
        scatter = et.scatter_add_rows(data, idx, num_rows)
        for n in (-1, 2**62):
            with pytest.raises(tf.errors.InvalidArgumentError, match="num_rows must be in"):
                s.run(scatter, {num_rows: n})


def test_out_of_memory_is_resource_exhausted_and_the_process_lives():
    """Under an address-space limit, the first optimizer update of a big table (which re-lays
    out every row with its slot) cannot get its memory: ResourceExhausted, the process lives,
    and the table keeps its rows and layout."""
    import json
    import subprocess
    import sys
    code = r"""
import json, resource
import numpy as np, tensorflow as tf
from tfps.ops import embedding_table as et
from tfps.ops.training import table_apply_adagrad
tf.compat.v1.disable_eager_execution()
h = et.table_handle(1024, "constant", 0.5, shared_name="t")
fill = et.table_size(h)
with tf.control_dependencies([et.table_find(h, tf.range(200000, dtype=tf.int64))]):
    fill = et.table_size(h)
apply = table_apply_adagrad(h, tf.constant([1], tf.int64), tf.ones([1, 1024]), 0.1, tf.constant(1, tf.int64))
with tf.compat.v1.Session() as s:
    s.run(fill)
    vm = int([l for l in open("/proc/self/status") if l.startswith("VmSize")][0].split()[1]) * 1024
    resource.setrlimit(resource.RLIMIT_AS, (vm + (512 << 20), resource.RLIM_INFINITY))
    try:
        s.run(apply)
        result = {"error": None}
    except tf.errors.ResourceExhaustedError:
        rows, _, _, row_bytes = s.run(et.table_memory_stats(h))[:4]
        result = {"error": "ResourceExhausted", "rows": int(rows), "row_bytes": int(row_bytes)}
print(json.dumps(result))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got == {"error": "ResourceExhausted", "rows": 200000, "row_bytes": 8 + 4 * 1024 + 8}, got   # key, value, meta


def test_a_table_wider_than_the_machine_is_resource_exhausted_not_killed(graph):
    """Rows of 2^22 floats (16 MiB each): a batch of ids whose rows would take more than the
    machine's whole memory is ResourceExhausted (the OOM killer's kill -9 before the guard, since
    the arena's mapping is only address space until rows are written); the table keeps what it
    had and takes rows again once they fit."""
    with open("/proc/meminfo") as f:
        total = int(f.readline().split()[1]) * 1024
    dim = 1 << 22
    h = et.table_handle(dim, "constant", 0.5, shared_name="wide")
    ids = tf.compat.v1.placeholder(tf.int64, [None])
    find, size = et.table_find(h, ids), et.table_size(h)
    with tf.compat.v1.Session() as s:
        s.run(tf.reduce_sum(find), {ids: [1, 2]})
        with pytest.raises(tf.errors.ResourceExhaustedError):
            s.run(tf.reduce_sum(find), {ids: np.arange(10, 10 + total // (4 * dim) + 1)})
        assert s.run(size) == 2
        np.testing.assert_array_equal(s.run(find, {ids: [3]}), np.full([1, dim], 0.5, np.float32))
        assert s.run(size) == 3


def test_scatter_add_rows_out_of_memory_is_resource_exhausted():
    """The parallel path's per-thread buffers come from TF's allocator: under an address-space
    limit that leaves room for the 600 MB output but not for the buffers beside it, the op fails
    with ResourceExhausted and the process lives (an allocation inside a worker thread used to
    throw std::bad_alloc there, and abort)."""
    code = r"""
import json, resource
import numpy as np
import tensorflow as tf
from tfps.ops import embedding_table as et
tf.compat.v1.disable_eager_execution()
n, dim, rows = 20000, 1000, 150000            # n past the parallel threshold; out 600 MB
# Fed, not constants (Grappler would fold the op before the run), in a session of 2 intra-op
# threads: the op splits over 2 threads, with a buffer for the second.
data = tf.compat.v1.placeholder(tf.float32, [n, dim])
idx = tf.compat.v1.placeholder(tf.int32, [n])
total = tf.reduce_sum(et.scatter_add_rows(data, idx, rows)[:n])
feed = {data: np.ones([n, dim], np.float32), idx: np.arange(n, dtype=np.int32) % rows}
config = tf.compat.v1.ConfigProto(intra_op_parallelism_threads=2)
with tf.compat.v1.Session(config=config) as s:
    s.run(tf.reduce_sum(data), feed)
    vm = int([l for l in open("/proc/self/status") if l.startswith("VmSize")][0].split()[1]) * 1024
    resource.setrlimit(resource.RLIMIT_AS, (vm + (1000 << 20), resource.RLIM_INFINITY))
    try:
        result = {"total": float(s.run(total, feed))}
    except tf.errors.ResourceExhaustedError:
        result = {"error": "ResourceExhausted"}
    resource.setrlimit(resource.RLIMIT_AS, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    result["after"] = float(s.run(total, feed))      # the same op runs once memory is there
print(json.dumps(result))
"""
    # oneDNN off: its CPU allocator retries a failed allocation for 40 s before it reports it.
    env = dict(os.environ, TF_ENABLE_ONEDNN_OPTS="0")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got == {"error": "ResourceExhausted", "after": 20000.0 * 1000}, got


def test_prefetch_mode_op_switches_modes_and_results_stay_identical(graph):
    """set_prefetch_mode: on a table past the prefetch threshold (512 KiB of rows per shard),
    every mode reads the same rows and applies the same update (checked against numpy), and
    the op returns the mode it replaced; the mode is the table's own (another table's stays)."""
    h = et.table_handle(16, "uniform", -1.0, 1.0, seed=3, shared_name="prefetched")
    keys = np.random.default_rng(0).permutation(600_000).astype(np.int64) * 7919 + 1
    batch = tf.constant(keys[:200_000])
    find = et.table_find(h, batch)
    sgd = tr.table_apply_gradient_descent(h, batch, tf.fill([200_000, 16], 0.5), 0.1, tf.constant(1, tf.int64))
    modes = {m: et.set_prefetch_mode(h, m) for m in ("off", "group", "rolling")}
    other = et.table_handle(16, "zeros", shared_name="not_prefetched")
    other_mode = et.set_prefetch_mode(other, "rolling")
    with tf.compat.v1.Session() as s:
        s.run(et.table_find(h, keys).op)   # 600k rows of 80 bytes: ~730 KiB per shard
        original = s.run(modes["off"]).decode()
        expected = s.run(find)
        last = "off"
        for mode in ("group", "rolling", "off"):
            assert s.run(modes[mode]).decode() == last
            last = mode
            np.testing.assert_array_equal(s.run(find), expected)
            s.run(sgd)
            expected = expected - np.float32(0.1) * np.float32(0.5)
            np.testing.assert_array_equal(s.run(find), expected)
        s.run(modes[original])
        assert s.run(other_mode).decode() == "rolling"   # the default: the first table's switches left it
    with pytest.raises(ValueError, match="off, group or rolling"):
        et.set_prefetch_mode(h, "fast")


@pytest.mark.parametrize("dim", [16, 20])
def test_batches_large_enough_to_stream_match_a_dict(graph, dim):
    """2^18 + 5 keys, each about twice, assigned then found: the batch's order by shard (4 MiB:
    written with streaming stores in this build, config.h kStreamMinBytes) and, at dim 16, the
    lookup's whole-line output rows too. Oracle: a dict assigned in batch order (the last value
    of a repeated key wins); missing keys read as zeros without insertion."""
    n = (1 << 18) + 5
    rng = np.random.default_rng(dim)
    keys = rng.integers(-(1 << 40), 1 << 40, n // 2).repeat(2)[rng.permutation(n - 1)]
    keys = np.concatenate([keys, keys[:1]])
    values = rng.standard_normal((n, dim)).astype(np.float32)
    want = {int(k): v for k, v in zip(keys, values)}
    probe = np.concatenate([keys, rng.integers(1 << 41, 1 << 42, 1 << 16)])   # present, then missing
    h = et.table_handle(dim, "zeros")
    with tf.compat.v1.Session() as s:
        s.run(et.table_assign(h, keys, values))
        got = s.run(et.table_find(h, probe, insert=False))
        assert s.run(et.table_size(h)) == len(want)
    np.testing.assert_array_equal(got[:n], np.stack([want[int(k)] for k in keys]))
    np.testing.assert_array_equal(got[n:], 0)
