"""tfps.models.hstu: MTGR's dynamic mask, Group-Layer Norm and HSTU blocks.

Oracles: the mask rules written out as loops in numpy; the block's own outputs under changed
inputs (invisible tokens change nothing, bit for bit; visible ones do); each candidate scored
alone."""
import numpy as np
import pytest
import tensorflow as tf

from tfps.models.hstu import CANDIDATE, HISTORY, PAD, PROFILE, REALTIME, group_layer_norm, hstu_block, mtgr_mask

D, HEADS = 8, 2


def _mask_oracle(group, time):
    b, n = group.shape
    out = np.zeros([b, n, n], bool)
    for s in range(b):
        for i in range(n):
            for j in range(n):
                gi, gj, ti, tj = group[s, i], group[s, j], time[s, i], time[s, j]
                if gi == PAD or gj == PAD:
                    continue
                out[s, i, j] = (i == j or gj in (PROFILE, HISTORY)
                                or (gj == REALTIME and gi == REALTIME and (tj < ti or (tj == ti and j <= i)))
                                or (gj == REALTIME and gi == CANDIDATE and tj < ti))
    return out


def test_the_mask_follows_the_rules(graph):
    rng = np.random.default_rng(0)
    group = rng.integers(-1, 4, [6, 12]).astype(np.int32)
    time = rng.integers(0, 6, [6, 12]).astype(np.int64)     # ties on purpose
    with tf.compat.v1.Session() as s:
        got = s.run(mtgr_mask(group, time))
        example = s.run(mtgr_mask([[HISTORY, REALTIME, CANDIDATE, CANDIDATE]], [[1, 5, 4, 9]]))
    np.testing.assert_array_equal(got, _mask_oracle(group, time))
    assert example[0, 2].tolist() == [True, False, True, False]
    assert example[0, 3].tolist() == [True, True, False, True]


def _model(blocks=2, gln=True):
    x = tf.compat.v1.placeholder(tf.float32, [None, None, D])
    group = tf.compat.v1.placeholder(tf.int32, [None, None])
    time = tf.compat.v1.placeholder(tf.int64, [None, None])
    mask = mtgr_mask(group, time)
    y = x
    for i in range(blocks):
        y = hstu_block(y, group, time, mask, HEADS, f"block{i}", gln=gln)
    return (x, group, time), y


# one user: profile, 2 history, 3 real-time, 3 candidates
GROUP = [PROFILE, HISTORY, HISTORY, REALTIME, REALTIME, REALTIME, CANDIDATE, CANDIDATE, CANDIDATE]
TIME = [0, 1, 2, 10, 20, 30, 15, 25, 40]


def _randomize(s):
    """Initializes every variable, then sets it to random values (the relative bias starts at
    zero, which would hide what it does)."""
    s.run(tf.compat.v1.global_variables_initializer())
    rng = np.random.default_rng(7)
    for v in tf.compat.v1.global_variables():
        s.run(v.assign(0.3 * rng.normal(size=v.shape.as_list()).astype(np.float32)))


def _run(s, inputs, y, x, group=GROUP, time=TIME):
    return s.run(y, dict(zip(inputs, ([x], [group], [time]))))[0]


def test_a_candidate_sees_only_what_the_mask_allows(graph):
    inputs, y = _model()
    x = np.random.default_rng(1).normal(size=[len(GROUP), D]).astype(np.float32)
    with tf.compat.v1.Session() as s:
        _randomize(s)
        base = _run(s, inputs, y, x)
        # candidate 6 (request at 15) cannot see real-time tokens at 20 and 30, nor candidates 7, 8
        bump = 3.0 * np.random.default_rng(5).normal(size=D).astype(np.float32)   # not a shift LayerNorm removes
        for hidden in (4, 5, 7, 8):
            changed = x.copy()
            changed[hidden] += bump
            np.testing.assert_array_equal(_run(s, inputs, y, changed)[6], base[6], err_msg=f"token {hidden}")
        # ... but sees the profile, the history, the real-time token at 10 and itself
        for visible in (0, 1, 2, 3, 6):
            changed = x.copy()
            changed[visible] += bump
            assert np.abs(_run(s, inputs, y, changed)[6] - base[6]).max() > 1e-4, visible
        # moving a real-time token after the request hides it
        later = list(TIME)
        later[3] = 16
        changed = x.copy()
        changed[3] += bump
        np.testing.assert_array_equal(_run(s, inputs, y, changed, time=later)[6], _run(s, inputs, y, x, time=later)[6])


def test_scoring_all_candidates_in_one_pass_equals_scoring_each_alone(graph):
    inputs, y = _model()
    x = np.random.default_rng(2).normal(size=[len(GROUP), D]).astype(np.float32)
    with tf.compat.v1.Session() as s:
        _randomize(s)
        together = _run(s, inputs, y, x)
        for c in (6, 7, 8):
            keep = list(range(6)) + [c]
            alone = _run(s, inputs, y, x[keep], [GROUP[i] for i in keep], [TIME[i] for i in keep])
            np.testing.assert_allclose(alone[-1], together[c], rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(alone[:6], together[:6], rtol=1e-5, atol=1e-6)
        # padding (another, shorter user in the batch) changes nothing either
        pad = np.zeros([2, D], np.float32)
        batch = s.run(y, dict(zip(inputs, ([x, np.concatenate([x[:7], pad])],
                                           [GROUP, GROUP[:7] + [PAD, PAD]], [TIME, TIME[:7] + [0, 0]]))))
        np.testing.assert_allclose(batch[0], together, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(batch[1, :7], s.run(y, dict(zip(inputs, ([x[:7]], [GROUP[:7]], [TIME[:7]]))))[0],
                                   rtol=1e-5, atol=1e-6)


def test_group_layer_norm_has_parameters_per_group(graph):
    xs = np.random.default_rng(3).normal(size=[1, len(GROUP), D]).astype(np.float32)
    x = tf.constant(xs)
    out = group_layer_norm(x, tf.constant([GROUP]), "gln")
    plain = group_layer_norm(x, tf.constant([GROUP]), "ln", enabled=False)
    scale = [v for v in tf.compat.v1.global_variables() if v.op.name == "gln/scale"][0]
    assert scale.shape.as_list() == [4, D]
    assert [v.shape.as_list() for v in tf.compat.v1.global_variables() if v.op.name == "ln/scale"] == [[1, D]]
    with tf.compat.v1.Session() as s:
        s.run(tf.compat.v1.global_variables_initializer())
        before, ln = s.run([out, plain])
        np.testing.assert_allclose(before, ln, rtol=1e-6, atol=1e-6)      # same at initialization
        s.run(scale[CANDIDATE].assign(2.0 * tf.ones([D])))
        after = s.run(out)
    is_candidate = np.array(GROUP) == CANDIDATE
    np.testing.assert_array_equal(after[0, ~is_candidate], before[0, ~is_candidate])
    np.testing.assert_allclose(after[0, is_candidate], 2.0 * before[0, is_candidate], rtol=1e-6)
    # numpy LayerNorm as the oracle of the normalization itself (scale 1, offset 0 at first)
    centered = xs - xs.mean(-1, keepdims=True)
    np.testing.assert_allclose(before, centered / np.sqrt((centered ** 2).mean(-1, keepdims=True) + 1e-6),
                               rtol=1e-4, atol=1e-5)


def test_a_width_the_heads_do_not_divide_is_refused(graph):
    x = tf.zeros([1, 3, 6])
    g = tf.zeros([1, 3], tf.int32)
    t = tf.zeros([1, 3], tf.int64)
    with pytest.raises(ValueError, match="divisible by heads"):
        hstu_block(x, g, t, mtgr_mask(g, t), 4, "b")


def _bias_and_norm_gradients(values=None, ps=False):
    """Gradients of a loss through relative_bias and group_layer_norm w.r.t. their four tables.
    ps: built under a replica_device_setter; returns (gradient tensors, the graph's op types).
    Else returns (gradient tensors, their values as dense arrays, the tables' values)."""
    from tfps.models.hstu import relative_bias
    rng = np.random.default_rng(5)
    n = 7
    with tf.Graph().as_default() as graph:
        time = tf.constant(rng.integers(0, 10**6, size=[3, n]), tf.int64)
        position = tf.constant(np.sort(rng.integers(0, 20, size=[3, n]), 1), tf.int64)
        group = tf.constant(rng.integers(0, 4, size=[3, n]), tf.int32)
        x = tf.constant(rng.normal(size=[3, n, D]), tf.float32)
        weights = tf.constant(rng.normal(size=[3, HEADS, n, n]), tf.float32)
        with tf.compat.v1.device(tf.compat.v1.train.replica_device_setter(ps_tasks=1) if ps else None):
            bias = relative_bias(time, position, HEADS, "rab")
            normed = group_layer_norm(x, group, "gln")
            loss = tf.reduce_sum(bias * weights) + tf.reduce_sum(tf.square(normed) * tf.range(1.0, D + 1.0))
        tables = sorted(tf.compat.v1.global_variables(), key=lambda v: v.op.name)
        grads = tf.compat.v1.gradients(loss, tables)
        if ps:
            return grads, {op.type for op in graph.get_operations()}
        with tf.compat.v1.Session() as s:
            s.run(tf.compat.v1.global_variables_initializer())
            values = values or {v.op.name: rng.normal(size=v.shape.as_list()).astype(np.float32) for v in tables}
            s.run([v.assign(values[v.op.name]) for v in tables])
            return grads, s.run([tf.convert_to_tensor(g) for g in grads]), values


def test_small_tables_are_read_whole_and_get_dense_gradients_equal_to_a_gathers(monkeypatch):
    """The bias and norm tables cross to a PS once each way (the table, its gradient), not as a
    row per token pair. Oracle: the gradients of a plain tf.gather of the same tables."""
    from tfps.models import hstu
    grads, types = _bias_and_norm_gradients(ps=True)
    assert len(grads) == 4 and all(isinstance(g, tf.Tensor) for g in grads)   # dense, the tables' shapes
    # a gather of a resource variable (ResourceGather) runs where the variable lives; a read of
    # the whole table and a gather of that tensor runs on the worker
    assert "ResourceGather" not in types and "ReadVariableOp" in types
    _, got, values = _bias_and_norm_gradients()
    assert sorted(values) == ["gln/offset", "gln/scale", "rab/position", "rab/time_gap"]
    monkeypatch.setattr(hstu, "small_gather", tf.gather)
    plain, plain_types = _bias_and_norm_gradients(ps=True)
    assert any(isinstance(g, tf.IndexedSlices) for g in plain)    # a row per token (pair): what it replaces
    assert "ResourceGather" in plain_types
    _, want, _ = _bias_and_norm_gradients(values)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
