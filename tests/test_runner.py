"""tfps.runner: the ModelSpec contract, and the runner's path (train, evaluate, export) touches no
tf.estimator -- what TensorFlow 2.16+ lacks."""
import json
import os
import subprocess
import sys

import pytest
import tensorflow as tf

from tfps.runner.graph import RunSettings, call_model_fn
from tfps.models.spec import ModeKeys, ModelSpec, SERVING_SIGNATURE

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_a_spec_names_what_its_mode_lacks(graph):
    loss = tf.constant(1.0)
    with pytest.raises(ValueError, match="needs a train_op"):
        ModelSpec(ModeKeys.TRAIN, loss=loss).checked()
    with pytest.raises(ValueError, match="needs a loss"):
        ModelSpec(ModeKeys.EVAL).checked()
    with pytest.raises(ValueError, match="needs predictions"):
        ModelSpec(ModeKeys.PREDICT).checked()
    with pytest.raises(ValueError, match="mode 'fit'"):
        ModelSpec("fit", loss=loss).checked()
    spec = ModelSpec(ModeKeys.PREDICT, predictions={"p": loss}).checked()
    assert list(spec.export_outputs) == [SERVING_SIGNATURE]


def test_the_runner_takes_only_model_specs(graph):
    def estimator_like(features, labels, mode, params):
        return {"loss": tf.constant(0.0)}
    with pytest.raises(TypeError, match="ModelSpec"):
        call_model_fn(estimator_like, {}, None, ModeKeys.EVAL, {})

    def wrong_mode(features, labels, mode, params):
        return ModelSpec(ModeKeys.EVAL, loss=tf.constant(0.0))
    with pytest.raises(ValueError, match="asked for 'train'"):
        call_model_fn(wrong_mode, {}, None, ModeKeys.TRAIN, {})


def test_settings_refuse_two_checkpoint_frequencies_and_a_trainer_without_a_place_of_its_own():
    with pytest.raises(ValueError, match="not both"):
        RunSettings("/tmp/x", save_checkpoints_steps=10, save_checkpoints_secs=5)
    # each trainer of a cluster marks its own session on the PS (StateSaver.rejoin_hook)
    for place in ({"is_chief": False}, {"is_chief": True, "trainer_rank": 1}, {"is_chief": False, "trainer_rank": 2}):
        with pytest.raises(ValueError, match="trainer_rank"):
            RunSettings("/tmp/x", master="grpc://localhost:1", num_worker_replicas=2, **place)
    assert RunSettings("/tmp/x", master="grpc://localhost:1", num_worker_replicas=2, is_chief=False,
                       trainer_rank=1).trainer_rank == 1


def test_train_evaluate_export_import_no_tf_estimator(tmp_path):
    """`tfps train` and `tfps export` on a tiny model, in a process that fails any use of
    tf.estimator (TensorFlow 2.16+ has none): both work, and tensorflow_estimator is never imported."""
    code = f"""
import sys
import tensorflow as tf
class NoEstimator:
    def __getattr__(self, name):
        raise AttributeError("tf.estimator used on the runner's path: " + name)
tf.estimator = NoEstimator()
from tfps.cli import main
sets = ["--set", "model_dir={tmp_path}/m", "--set", "train.steps=20", "--set", "train.batch_size=64",
        "--set", "train.save_checkpoints_steps=10", "--set", "eval.examples=512", "--set", "model.hidden_units=[16]"]
assert main(["train", "--config", "configs/demo.yaml"] + sets) == 0
assert main(["export", "--config", "configs/demo.yaml", "--export-dir", "{tmp_path}/e"] + sets) == 0
with open("{tmp_path}/modules.json", "w") as f:
    json.dump(sorted(sys.modules), f)
"""
    out = subprocess.run([sys.executable, "-c", "import json\n" + code], cwd=ROOT, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    with open(tmp_path / "modules.json") as f:
        modules = json.load(f)
    assert "tfps.runner" in modules and not [m for m in modules if m.split(".")[0] == "tensorflow_estimator"]
    assert len(os.listdir(tmp_path / "e")) == 1


def _tiny_model_fn(features, labels, mode, params):
    import tfps
    emb = tfps.get_embedding_variable("ids", embedding_dim=4)
    logits = tf.reduce_sum(tfps.embedding_lookup(emb, features["ids"]), 1)
    loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits))
    gs = tf.compat.v1.train.get_or_create_global_step()
    return ModelSpec(mode, loss=loss, train_op=tfps.train.AdagradOptimizer(0.1).minimize(loss, global_step=gs))


def _tiny_input_fn():
    ids = tf.data.Dataset.range(10**6).map(lambda i: i % 50)
    return tf.data.Dataset.zip(({"ids": ids}, ids.map(lambda i: tf.cast(i % 2, tf.float32)))).batch(32)


def test_train_of_a_program_of_ones_own_logs_its_progress_on_the_tfps_runner_logger(tmp_path, caplog):
    """Without a ProgressHook, tfps.runner.train logs `step N loss L` every save_summary_steps;
    oracle: the steps logged are the multiples up to max_steps, and the last loss is train's."""
    import logging
    from tfps.runner import train
    settings = RunSettings(str(tmp_path), save_checkpoints_steps=20, save_summary_steps=5)
    with caplog.at_level(logging.INFO, logger="tfps.runner"):
        last = train(_tiny_model_fn, {}, _tiny_input_fn, settings, max_steps=20)
    records = [r for r in caplog.records if r.name == "tfps.runner"]
    assert [r.args[0] for r in records] == [5, 10, 15, 20]
    assert records[-1].args[1] == pytest.approx(last)
    assert tf.train.latest_checkpoint(str(tmp_path)).endswith("-20")


class _Saves(tf.compat.v1.train.CheckpointSaverListener):
    def __init__(self):
        self.steps = []

    def after_save(self, session, global_step_value):
        self.steps.append(global_step_value)


def test_saving_listeners_hear_every_save_of_the_runners_saver_hook(tmp_path):
    """train(saving_listeners=) reaches the saver hook the runner makes (its listeners= argument);
    oracle: the listener hears the checkpoints on disk. Beside a saver hook of the run's own they
    are refused, naming that hook's listeners= argument (TF's list is private)."""
    from tfps.runner import CheckpointSaverHook, train
    listener = _Saves()
    train(_tiny_model_fn, {}, _tiny_input_fn, RunSettings(str(tmp_path / "a"), save_checkpoints_steps=10),
          max_steps=20, saving_listeners=[listener])
    on_disk = tf.train.get_checkpoint_state(str(tmp_path / "a")).all_model_checkpoint_paths
    assert listener.steps == [0, 10, 20] == [int(p.rsplit("-", 1)[1]) for p in on_disk]
    own = CheckpointSaverHook(str(tmp_path / "b"), save_steps=10)
    with pytest.raises(ValueError, match="listeners= argument"):
        train(_tiny_model_fn, {}, _tiny_input_fn, RunSettings(str(tmp_path / "b"), save_checkpoints_steps=10),
              max_steps=20, hooks=[own], saving_listeners=[_Saves()])


class _CountSteps(tf.compat.v1.train.SessionRunHook):
    """The steps this trainer ran, and whether its session has been created (an event)."""

    def __init__(self):
        import threading
        self.steps, self.begun, self.created = 0, threading.Event(), threading.Event()

    def begin(self):
        self.begun.set()   # the graph is made: the session is asked for next

    def after_create_session(self, session, coord):
        self.created.set()

    def after_run(self, run_context, run_values):
        self.steps += 1


@pytest.mark.slow
def test_a_worker_started_with_the_chief_trains_a_share_of_the_steps(tmp_path):
    """In-process servers (a PS, a chief, a worker); the worker asks for its session first, before
    the chief has initialized the model. It trains as soon as the model is ready: the worker runs
    a share of the job's steps (MonitoredTrainingSession's worker waited 30 s between asks, and
    ran none of a job this short, and its first step after the chief's end overshot the job), and
    the two trainers' steps add up to the global step."""
    import threading
    from test_state import _every_batch_input_fn as input_fn, _every_batch_model_fn as model_fn
    from tfps.cluster.placement import replica_device_setter
    from tfps.cluster.ports import cluster_spec
    from tfps.runner import train
    spec = tf.train.ClusterSpec(cluster_spec(1, 2))
    servers = {job: tf.distribute.Server(spec, job_name=job, task_index=0) for job in ("ps", "chief", "worker")}
    steps = 600

    counts = {job: _CountSteps() for job in ("chief", "worker")}
    errors = []

    def run(job):
        settings = RunSettings(str(tmp_path), save_checkpoints_steps=10**6, master=servers[job].target,
                               is_chief=job == "chief", num_worker_replicas=2, trainer_rank=int(job == "worker"),
                               device_fn=replica_device_setter(cluster=spec, worker_device=f"/job:{job}/task:0"))
        try:
            train(model_fn, {}, input_fn, settings, steps, hooks=[counts[job]])
        except Exception as e:   # noqa: BLE001 -- reported below
            errors.append((job, e))
    worker = threading.Thread(target=run, args=("worker",))
    worker.start()
    assert counts["worker"].begun.wait(timeout=120)   # the worker asks before the chief has begun
    run("chief")
    worker.join(timeout=300)
    assert not worker.is_alive() and not errors, errors
    assert counts["worker"].created.is_set()
    final = int(tf.train.load_variable(tf.train.latest_checkpoint(str(tmp_path)), "global_step"))
    # Every step is one of the two trainers'. (The job ends at `steps`, or one past it when the
    # worker's last step, read before the chief's last reads, lands after them: a thread of this
    # loaded process can stall that long, as a task of tfps launch hardly can.)
    assert final == counts["chief"].steps + counts["worker"].steps and final - steps in (0, 1), (final, counts)
    assert counts["worker"].steps >= steps // 10, counts


def _item_model_fn(features, labels, mode, params):
    """docs/training.md's runner model: one table, a probability per item."""
    import tfps
    emb = tfps.get_embedding_variable("item", embedding_dim=8)
    logits = tf.reduce_sum(tfps.embedding_lookup(emb, features["item"], insert=mode == ModeKeys.TRAIN), axis=1)
    if mode == ModeKeys.PREDICT:
        return ModelSpec(mode, predictions={"probabilities": tf.sigmoid(logits)})
    loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits))
    gs = tf.compat.v1.train.get_or_create_global_step()
    return ModelSpec(mode, loss=loss, train_op=tfps.train.AdagradOptimizer(0.5).minimize(loss, global_step=gs))


def _train_items(tmp_path, model_fn, seed, ids, examples, batch, steps):
    """Trains model_fn on tfps's runner into tmp_path/m, `steps` batches of `batch` random items
    below `ids` (label: the item is even); returns the RunSettings."""
    import numpy as np
    from tfps.runner import train

    def input_fn():
        items = np.random.default_rng(seed).integers(0, ids, examples)
        return tf.data.Dataset.from_tensor_slices(({"item": items}, (items % 2 == 0).astype(np.float32))).batch(batch)
    settings = RunSettings(str(tmp_path / "m"), save_checkpoints_steps=100)
    train(model_fn, {}, lambda: input_fn().repeat(), settings, max_steps=steps)
    return settings


def _item_inputs():
    return {"item": tf.compat.v1.placeholder(tf.int64, [None], name="item")}


@pytest.mark.slow
def test_the_runners_export_writes_what_tfps_export_writes(tmp_path):
    """tfps.runner.export_saved_model: stock ops by default (TensorFlow alone loads it and scores
    as the tfps format does: stock_check in a fresh interpreter), `format="tfps"` on request, each
    with its manifest cut at the trained step, each a new newest version of the base path."""
    import numpy as np
    from stock_compare import assert_same_scores
    from tfps.runner import export_saved_model
    from tfps.serving.servable import read_export_manifest
    settings = _train_items(tmp_path, _item_model_fn, seed=0, ids=1000, examples=20_000, batch=256, steps=60)
    stock = export_saved_model(_item_model_fn, {}, _item_inputs, settings, str(tmp_path / "e"))
    own = export_saved_model(_item_model_fn, {}, _item_inputs, settings, str(tmp_path / "e"), format="tfps")
    assert int(os.path.basename(own)) > int(os.path.basename(stock))
    for path, kind in ((stock, "stock"), (own, "tfps")):
        manifest = read_export_manifest(path)
        assert (manifest["export_format"], manifest["step"]) == (kind, 60)
    items = np.concatenate([np.arange(0, 40, dtype=np.int64), np.array([2**40, -7], np.int64)])   # and unseen ids
    assert_same_scores(own, stock, {"item": items}, tmp_path)
    with pytest.raises(ValueError, match="format"):
        export_saved_model(_item_model_fn, {}, _item_inputs, settings, str(tmp_path / "e"), format="onnx")


def _counted_model_fn(features, labels, mode, params):
    """_item_model_fn, plus a checkpointed MutableHashTable of its own (a SaveableObject of the
    model_fn's, not a variable): how often training saw each item, added to the logit."""
    table = tf.lookup.experimental.MutableHashTable(tf.int64, tf.float32, default_value=0.0, name="seen")
    spec = _item_model_fn(features, labels, mode, params)
    if mode == ModeKeys.PREDICT:
        seen = table.lookup(features["item"])
        return ModelSpec(mode, predictions={"probabilities": spec.predictions["probabilities"] + seen})
    items = features["item"]
    counted = table.insert(items, table.lookup(items) + 1.0)
    return ModelSpec(mode, loss=spec.loss, train_op=tf.group(spec.train_op, counted))


def test_the_tfps_export_restores_the_model_fns_own_saveables(tmp_path):
    """The export restores the dense state alone and writes the tables itself: a SaveableObject of
    the model_fn's own (a MutableHashTable) is restored from the checkpoint too, as a restore
    does, and the export holds what the checkpoint holds."""
    from tfps.runner import export_saved_model
    settings = _train_items(tmp_path, _counted_model_fn, seed=1, ids=50, examples=4096, batch=64, steps=20)
    path = export_saved_model(_counted_model_fn, {}, _item_inputs, settings, str(tmp_path / "e"), format="tfps")
    saved = tf.train.load_checkpoint(tf.train.latest_checkpoint(str(tmp_path / "m")))
    exported = tf.train.load_checkpoint(os.path.join(path, "variables", "variables"))
    keys = [n for n in saved.get_variable_to_shape_map() if n.startswith("seen") and n.endswith("-keys")]
    assert len(keys) == 1, sorted(saved.get_variable_to_shape_map())
    values = keys[0][:-len("-keys")] + "-values"

    def rows(reader):   # {item: count}
        return dict(zip(reader.get_tensor(keys[0]).tolist(), reader.get_tensor(values).tolist()))
    want = rows(saved)
    assert len(want) == 50 and min(want.values()) >= 1   # every item counted (once per batch it is in)
    assert rows(exported) == want
