"""Graph checks for placed graphs: which ops read a variable that lives on another task."""
import dataclasses

import tensorflow as tf

VARIABLE_OPS = ("VarHandleOp", "VariableV2", "Variable", "TfpsTableHandle")
_READ_THROUGH = ("ReadVariableOp", "Identity")


@dataclasses.dataclass(frozen=True)
class CrossRead:
    op: str            # the reading op
    op_task: str       # "/job:ps/task:1"
    variable: str      # the variable (or table) op read
    variable_task: str


def _device(op):
    """The device an op is placed on: its own, or that of the op it is colocated with."""
    if op.device:
        return op.device
    for loc in op.colocation_groups():
        name = loc.decode()[len("loc:@"):]
        if name != op.name:
            try:
                other = op.graph.get_operation_by_name(name)
            except KeyError:
                continue
            if other.device:
                return other.device
    return ""


def _task(device):
    spec = tf.DeviceSpec.from_string(device or "")
    return f"/job:{spec.job}/task:{spec.task}" if spec.job is not None else "/job:localhost/task:0"


def _variable_of(tensor, depth=3):
    """The variable op a tensor reads (through ReadVariableOp / Identity), or None."""
    op = tensor.op
    for _ in range(depth):
        if op.type in VARIABLE_OPS:
            return op
        if op.type not in _READ_THROUGH or not op.inputs:
            return None
        op = op.inputs[0].op
    return op if op.type in VARIABLE_OPS else None


def cross_device_reads(graph=None):
    """Ops of a placed graph that read a variable living on another task.

    A read is an input edge from a variable (or from a ReadVariableOp / Identity of one) into an
    op placed on a different task; each (reader, variable) pair is listed once.

    Returns:
      list of CrossRead, sorted by variable then reader.
    """
    graph = graph or tf.compat.v1.get_default_graph()
    found = set()
    for op in graph.get_operations():
        if op.type in VARIABLE_OPS or op.type in _READ_THROUGH:
            continue
        reader_task = _task(_device(op))
        for tensor in op.inputs:
            var = _variable_of(tensor)
            if var is None:
                continue
            var_task = _task(_device(var))
            if var_task != reader_task:
                found.add(CrossRead(op.name, reader_task, var.name, var_task))
    return sorted(found, key=lambda r: (r.variable, r.op))
