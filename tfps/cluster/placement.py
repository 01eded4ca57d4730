"""Load-balanced placement of variables and table shards over PS tasks.

Stock tf.compat.v1.train.replica_device_setter places variables round-robin, so the PS that
happens to get the big tables becomes the bottleneck. LoadBalancedStrategy places each variable
(or table shard) on the PS task with the least load after adding it, where load is estimated
bytes divided by the task's capacity:

  dense variable:  shape x dtype size
  table shard:     expected rows x row bytes (4 * dim * (1 + slots) + 8)
"""
import dataclasses

import tensorflow as tf

VARIABLE_OPS = ("Variable", "VariableV2", "VarHandleOp", "AutoReloadVariable")
TABLE_OPS = ("TfpsTableHandle",)


@dataclasses.dataclass
class Placed:
    name: str
    task: int
    bytes: int


class LoadBalancedStrategy:
    """ps_strategy for replica_device_setter: op -> PS task index.

    Args:
      num_tasks: number of PS tasks.
      capacities: relative capacity per PS task (None: all equal), e.g. [2, 1] puts twice the
        bytes on task 0.
      expected_rows: rows a table shard is expected to hold (an int, or a dict from table name
        prefix to int; default 1e6).
      table_slots: optimizer slots per table row assumed for sizing (default 1, Adagrad).
    """

    def __init__(self, num_tasks, capacities=None, expected_rows=1_000_000, table_slots=1):
        if num_tasks <= 0:
            raise ValueError(f"LoadBalancedStrategy: num_tasks must be > 0, got {num_tasks}")
        capacities = list(capacities) if capacities is not None else [1.0] * num_tasks
        if len(capacities) != num_tasks or any(c <= 0 for c in capacities):
            raise ValueError(f"LoadBalancedStrategy: capacities must be {num_tasks} positive numbers, "
                             f"got {capacities}")
        self.num_tasks = num_tasks
        self.capacities = [float(c) for c in capacities]
        self.expected_rows = expected_rows
        self.table_slots = table_slots
        self.loads = [0] * num_tasks
        self.placed = []
        self._planned = {}   # table name prefix -> task, from plan()

    def _rows(self, name):
        if isinstance(self.expected_rows, dict):
            best = max((p for p in self.expected_rows if name.startswith(p)), key=len, default=None)
            return self.expected_rows[best] if best is not None else 1_000_000
        return int(self.expected_rows)

    def bytes_of(self, op):
        """Estimated bytes of a variable or table op."""
        if op.type in TABLE_OPS:
            dim = op.get_attr("dim")
            return self._rows(op.name) * (4 * dim * (1 + self.table_slots) + 8)
        shape = tf.TensorShape(op.get_attr("shape"))
        dtype = tf.as_dtype(op.get_attr("dtype"))
        n = shape.num_elements() if shape.is_fully_defined() else 1
        return int(n * dtype.size)

    def _least_loaded(self, size):
        return min(range(self.num_tasks), key=lambda t: ((self.loads[t] + size) / self.capacities[t], t))

    def plan(self, tables):
        """Places tables known before the graph is built, largest first (LPT), which balances far
        better than placing them in the order the graph creates them.

        tables: {table name prefix: estimated bytes}, e.g. from the config's vocabularies.
        """
        for name, size in sorted(tables.items(), key=lambda kv: (-kv[1], kv[0])):
            task = self._least_loaded(size)
            self._planned[name] = task
            self.loads[task] += int(size)

    def __call__(self, op):
        size = self.bytes_of(op)
        planned = max((p for p in self._planned if op.name.startswith(p)), key=len, default=None)
        if planned is not None:
            task = self._planned.pop(planned)   # its bytes were counted by plan()
        else:
            task = self._least_loaded(size)
            self.loads[task] += size
        self.placed.append(Placed(op.name, task, size))
        return task

    def table(self):
        """The placement table: task, items, bytes, load % of the total."""
        total = max(sum(self.loads), 1)
        lines = [f"{'task':<14}{'items':>7}{'bytes':>14}{'load %':>9}"]
        for t in range(self.num_tasks):
            items = sum(1 for p in self.placed if p.task == t)
            lines.append(f"{'/job:ps/task:' + str(t):<14}{items:>7}{self.loads[t]:>14}{100 * self.loads[t] / total:>8.1f}%")
        return "\n".join(lines)


def replica_device_setter(cluster=None, ps_tasks=None, worker_device=None, ps_strategy=None, ps_ops=None,
                          **kwargs):
    """tf.compat.v1.train.replica_device_setter that also places tfps tables on PS tasks, and by
    default balances them by size (LoadBalancedStrategy) instead of round-robin."""
    if ps_tasks is None:
        if cluster is None:
            raise ValueError("replica_device_setter: give a cluster or ps_tasks")
        spec = cluster if isinstance(cluster, tf.train.ClusterSpec) else tf.train.ClusterSpec(cluster)
        ps_tasks = len(spec.as_dict().get("ps", []))
    if ps_strategy is None and ps_tasks:
        ps_strategy = LoadBalancedStrategy(ps_tasks)
    ps_ops = list(ps_ops or VARIABLE_OPS) + [op for op in TABLE_OPS if op not in (ps_ops or [])]
    setter = tf.compat.v1.train.replica_device_setter(ps_tasks=ps_tasks if cluster is None else 0, cluster=cluster,
                                                      worker_device=worker_device, ps_ops=ps_ops,
                                                      ps_strategy=ps_strategy, **kwargs)
    if setter is None:
        return None

    def device_fn(op):
        # The ops built in the global step's scope (the checked read that TF's session hooks
        # fetch every step: a cond over is_variable_initialized, whose branches are functions)
        # run beside the variable, so a step fetches one value from its PS instead of a cond's
        # worth of control messages.
        graph, name = op.graph, op.name
        while getattr(graph, "outer_graph", None) is not None:
            name, graph = f"{graph.name}/{name}", graph.outer_graph
        if name.startswith(("global_step/", "global_step_cond_")) and not op.device:
            try:
                home = graph.get_operation_by_name("global_step")
            except KeyError:
                home = None
            if home is not None and home.device:
                return home.device
        return setter(op)
    return device_fn
