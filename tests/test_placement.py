"""Load-balanced placement vs round-robin, and capacities."""
import pytest
import tensorflow as tf

import tfps
from tfps.cluster import LoadBalancedStrategy


def _loads(graph, tasks, expected_rows=200_000):
    sizes = LoadBalancedStrategy(tasks, expected_rows=expected_rows)
    loads = [0] * tasks
    for op in graph.get_operations():
        if op.type == "VarHandleOp" or op.type == "TfpsTableHandle":
            task = tf.DeviceSpec.from_string(op.device).task
            loads[task] += sizes.bytes_of(op)
    return loads


def _model(setter):
    g = tf.Graph()
    with g.as_default(), tf.compat.v1.device(setter):
        # Shapes round-robin places badly: a big, small, big, small ... pattern over 2 tasks.
        for i in range(8):
            rows = 100_000 if i % 2 == 0 else 1_000
            tf.compat.v1.get_variable(f"v{i}", [rows, 16])
        tfps.get_embedding_variable("table", 8, num_shards=2)
    return g


def test_balanced_within_10_percent_where_round_robin_is_2_to_1():
    rr = _loads(_model(tf.compat.v1.train.replica_device_setter(
        ps_tasks=2, ps_ops=["VarHandleOp", "TfpsTableHandle"])), 2)
    assert max(rr) >= 2 * min(rr)
    strategy = LoadBalancedStrategy(2, expected_rows=200_000)
    ours = _loads(_model(tfps.cluster.replica_device_setter(ps_tasks=2, ps_strategy=strategy)), 2)
    ideal = sum(ours) / 2
    assert max(abs(x - ideal) for x in ours) <= 0.1 * ideal
    assert strategy.loads == ours   # what it reports (its placement table) is where the bytes went


def test_capacities_2_to_1():
    strategy = LoadBalancedStrategy(2, capacities=[2, 1])
    g = tf.Graph()
    with g.as_default(), tf.compat.v1.device(tfps.cluster.replica_device_setter(ps_tasks=2, ps_strategy=strategy)):
        for i in range(60):
            tf.compat.v1.get_variable(f"v{i}", [1000, 8])
    a, b = _loads(g, 2)   # from the devices the graph's variables got
    assert abs(a / b - 2.0) < 0.1


def test_tables_go_to_ps():
    g = tf.Graph()
    with g.as_default(), tf.compat.v1.device(tfps.cluster.replica_device_setter(ps_tasks=3)):
        ev = tfps.get_embedding_variable("t", 4, num_shards=3)
    assert {tf.DeviceSpec.from_string(h.device).job for h in ev.handles} == {"ps"}


def test_bad_strategy_arguments():
    with pytest.raises(ValueError, match="capacities must be 2 positive numbers"):
        LoadBalancedStrategy(2, capacities=[1, 0])
    with pytest.raises(ValueError, match="num_tasks must be > 0"):
        LoadBalancedStrategy(0)


def test_plan_places_known_tables_largest_first():
    sizes = [1000 * 1.5 ** i for i in range(12)]  # created smallest first: the worst order online
    rows = {f"t{i}/": int(s) for i, s in enumerate(sizes)}
    per_row = 4 * 4 * 2 + 8
    online, planned = LoadBalancedStrategy(3, expected_rows=rows), LoadBalancedStrategy(3, expected_rows=rows)
    planned.plan({name: n * per_row for name, n in rows.items()})
    loads = []
    for strategy in (online, planned):
        g = tf.Graph()
        with g.as_default(), tf.compat.v1.device(tfps.cluster.replica_device_setter(ps_tasks=3,
                                                                                    ps_strategy=strategy)):
            evs = [tfps.get_embedding_variable(f"t{i}", 4) for i in range(12)]
        # the bytes each task got, from the device of each table and its known size
        load = [0.0] * 3
        for i, ev in enumerate(evs):
            load[tf.DeviceSpec.from_string(ev.handles[0].device).task] += rows[f"t{i}/"] * per_row
        loads.append(load)
    online_loads, planned_loads = loads
    ideal = sum(planned_loads) / 3
    assert max(planned_loads) <= 1.1 * ideal
    assert max(online_loads) > max(planned_loads)
    assert len(planned.placed) == 12 and not planned._planned
