"""TF_CONFIG: the cluster description schedulers (Kubernetes TFJob, Slurm scripts, tfps launch)
hand every task, parsed and checked with errors that name what is wrong."""
import dataclasses
import json
import os

TASK_TYPES = ("chief", "master", "worker", "ps", "evaluator")


class ClusterConfigError(ValueError):
    """TF_CONFIG is malformed; the message names the field."""


@dataclasses.dataclass(frozen=True)
class ClusterConfig:
    cluster: dict          # task type -> list of "host:port"
    task_type: str
    task_index: int

    @property
    def num_ps(self):
        return len(self.cluster.get("ps", []))

    @property
    def is_chief(self):
        if "chief" in self.cluster or "master" in self.cluster:
            return self.task_type in ("chief", "master")
        return self.task_type == "worker" and self.task_index == 0

    def require_ps(self, what="embedding tables"):
        if self.num_ps == 0:
            raise ClusterConfigError(f"TF_CONFIG has no 'ps' tasks, but {what} need parameter servers")


def _check_address(task_type, i, address):
    if not isinstance(address, str) or address.count(":") != 1:
        raise ClusterConfigError(f"TF_CONFIG cluster.{task_type}[{i}] must be 'host:port', got {address!r}")
    host, port = address.split(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ClusterConfigError(f"TF_CONFIG cluster.{task_type}[{i}]: bad host or port in {address!r}")


def parse_tf_config(text=None):
    """ClusterConfig from a TF_CONFIG JSON string (default: the environment), or None when unset."""
    text = os.environ.get("TF_CONFIG") if text is None else text
    if not text:
        return None
    try:
        config = json.loads(text)
    except json.JSONDecodeError as e:
        raise ClusterConfigError(f"TF_CONFIG is not valid JSON: {e}") from None
    if not isinstance(config, dict) or not isinstance(config.get("cluster"), dict):
        raise ClusterConfigError("TF_CONFIG needs a 'cluster' mapping of task type to addresses")
    cluster = config["cluster"]
    seen = {}
    for task_type, addresses in cluster.items():
        if task_type not in TASK_TYPES:
            raise ClusterConfigError(f"TF_CONFIG cluster has unknown task type {task_type!r} "
                                     f"(known: {', '.join(TASK_TYPES)})")
        if not isinstance(addresses, list) or not addresses:
            raise ClusterConfigError(f"TF_CONFIG cluster.{task_type} must be a non-empty list of addresses")
        for i, address in enumerate(addresses):
            _check_address(task_type, i, address)
            if address in seen:
                raise ClusterConfigError(f"TF_CONFIG address {address} is given to both {seen[address]} and "
                                         f"{task_type}[{i}]")
            seen[address] = f"{task_type}[{i}]"
    task = config.get("task")
    if not isinstance(task, dict):
        raise ClusterConfigError("TF_CONFIG needs a 'task' mapping with 'type' and 'index'")
    task_type, index = task.get("type"), task.get("index", 0)
    if task_type == "evaluator" and "evaluator" not in cluster:
        # The evaluator stays outside the cluster spec (it reads checkpoints, joins no server).
        if index != 0:
            raise ClusterConfigError(f"TF_CONFIG task.index of the evaluator must be 0, got {index!r}")
        return ClusterConfig(cluster, task_type, index)
    if task_type not in cluster:
        raise ClusterConfigError(f"TF_CONFIG task.type {task_type!r} is not a task type of the cluster "
                                 f"({', '.join(cluster)})")
    if not isinstance(index, int) or not 0 <= index < len(cluster[task_type]):
        raise ClusterConfigError(f"TF_CONFIG task.index {index!r} is out of range for {len(cluster[task_type])} "
                                 f"{task_type} task(s)")
    return ClusterConfig(cluster, task_type, index)


def check_protocol(protocol):
    """Raises ClusterConfigError unless this TensorFlow can start a server with `protocol`
    (TF 2.15 wheels have only grpc; grpc+verbs and friends need a TF built with them)."""
    if protocol == "grpc":
        return
    import tensorflow as tf
    from tfps.cluster.ports import free_ports
    address = f"127.0.0.1:{free_ports(1)[0]}"
    try:
        tf.distribute.Server(tf.train.ClusterSpec({"probe": [address]}), job_name="probe", task_index=0,
                             protocol=protocol, start=False)
    except (tf.errors.NotFoundError, tf.errors.UnimplementedError, tf.errors.InvalidArgumentError):
        raise ClusterConfigError(f"cluster.protocol {protocol!r} needs a TensorFlow build with that transport; "
                                 f"this TensorFlow {tf.__version__} registers no server for it. "
                                 f"Use protocol grpc") from None
