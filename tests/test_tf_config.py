"""TF_CONFIG parsing: good configs, and each kind of bad one named in the error."""
import json

import pytest

from tfps.cluster import ClusterConfigError, parse_tf_config

CLUSTER = {"chief": ["127.0.0.1:2222"], "worker": ["127.0.0.1:2223"], "ps": ["127.0.0.1:2224", "127.0.0.1:2225"]}


def _config(task, cluster=CLUSTER):
    return json.dumps({"cluster": cluster, "task": task})


def test_good_config(monkeypatch):
    c = parse_tf_config(_config({"type": "ps", "index": 1}))
    assert (c.task_type, c.task_index, c.num_ps, c.is_chief) == ("ps", 1, 2, False)
    assert parse_tf_config(_config({"type": "chief", "index": 0})).is_chief
    no_chief = {k: v for k, v in CLUSTER.items() if k != "chief"}
    assert parse_tf_config(_config({"type": "worker", "index": 0}, no_chief)).is_chief
    evaluator = parse_tf_config(_config({"type": "evaluator", "index": 0}))   # outside the cluster spec
    assert (evaluator.task_type, evaluator.is_chief, evaluator.num_ps) == ("evaluator", False, 2)
    monkeypatch.delenv("TF_CONFIG", raising=False)
    assert parse_tf_config() is None
    monkeypatch.setenv("TF_CONFIG", _config({"type": "worker", "index": 0}))
    assert parse_tf_config().task_type == "worker"


@pytest.mark.parametrize("text,match", [
    ("{not json", "not valid JSON"),
    (json.dumps({"task": {"type": "ps"}}), "needs a 'cluster'"),
    (_config({"type": "ps", "index": 0}, {**CLUSTER, "gpu_worker": ["h:1"]}), "unknown task type 'gpu_worker'"),
    (_config({"type": "ps", "index": 0}, {**CLUSTER, "ps": ["localhost"]}), r"cluster.ps\[0\] must be 'host:port'"),
    (_config({"type": "ps", "index": 0}, {**CLUSTER, "ps": ["h:99999"]}), "bad host or port"),
    (_config({"type": "ps", "index": 0}, {**CLUSTER, "ps": ["127.0.0.1:2222"]}), "given to both chief"),
    (_config({"type": "evaluator", "index": 1}), "index of the evaluator must be 0"),
    (_config({"type": "trainer", "index": 0}), "task.type 'trainer' is not a task type"),
    (_config({"type": "ps", "index": 2}), "task.index 2 is out of range for 2 ps"),
    (json.dumps({"cluster": CLUSTER}), "needs a 'task'"),
])
def test_bad_configs_are_named(text, match):
    with pytest.raises(ClusterConfigError, match=match):
        parse_tf_config(text)


def test_tables_need_ps():
    no_ps = {k: v for k, v in CLUSTER.items() if k != "ps"}
    with pytest.raises(ClusterConfigError, match="no 'ps' tasks"):
        parse_tf_config(_config({"type": "worker", "index": 0}, no_ps)).require_ps()


def test_k8s_tfjob_commands_are_valid_tfps_configs():
    """configs/k8s/tfjob.yaml is not run here; its replica types and commands must still be ones
    tfps accepts."""
    import yaml

    from tfps.cluster.tf_config import TASK_TYPES
    from tfps.config import load_config

    with open("configs/k8s/tfjob.yaml") as f:
        replicas = yaml.safe_load(f)["spec"]["tfReplicaSpecs"]
    assert {"PS", "Chief", "Worker", "Evaluator"} == set(replicas)
    for name, spec in replicas.items():
        assert name.lower() in TASK_TYPES
        (container,) = spec["template"]["spec"]["containers"]
        command = container["command"]
        assert command[:2] == ["tfps", "train"]
        args = command[2:]
        config = args[args.index("--config") + 1]
        overrides = [args[i + 1] for i, a in enumerate(args) if a == "--set"]
        assert load_config(config, overrides).model_dir == "/shared/tfps-demo"
