"""What every mode of the runner builds first: the settings of a run, the graph's global step and
its tfps.embedding.ModelGraph, the input tensors of an input_fn (a PipelineDataset's stager and
push policy put into the model graph's step), the model_fn's checked ModelSpec (the model_fn is
handed the ModelGraph when it takes a `model_graph` argument) and the scaffold whose saver is
tfps.state.StateSaver (the model's manifest on save, a checked restore of the newest cut)."""
import contextlib
import dataclasses
import inspect
import typing

import tensorflow as tf
from tensorflow.core.protobuf import rewriter_config_pb2

from tfps.embedding.model_graph import ModelGraph
from tfps.models.spec import ModeKeys, ModelSpec
from tfps.pipeline.dataset import PipelineDataset
from tfps.process import without_autotune
from tfps.state import disk
from tfps.state.saver import StateSaver


def default_session_config(device_filters=None):
    """Soft placement and one pass of Grappler's meta optimizer (what tf.estimator ran with);
    device_filters: the tasks a trainer of a cluster talks to (the PS tasks and itself)."""
    rewrite = rewriter_config_pb2.RewriterConfig(meta_optimizer_iterations=rewriter_config_pb2.RewriterConfig.ONE)
    return tf.compat.v1.ConfigProto(allow_soft_placement=True, device_filters=device_filters or [],
                                    graph_options=tf.compat.v1.GraphOptions(rewrite_options=rewrite))


@dataclasses.dataclass(frozen=True)
class RunSettings:
    """How the runner runs a model: where its state lives and how often it is saved, and (in a
    cluster) this task's place. Exactly one of save_checkpoints_steps / _secs, or neither (no
    full checkpoints while training)."""
    model_dir: str
    save_checkpoints_steps: typing.Optional[int] = None
    save_checkpoints_secs: typing.Optional[float] = None
    keep_checkpoint_max: int = 5
    seed: typing.Optional[int] = None
    save_summary_steps: int = 100
    master: str = ""                      # a grpc:// target in a cluster, "" in one process
    is_chief: bool = True
    device_fn: typing.Any = None          # tfps.cluster.replica_device_setter in a cluster
    num_worker_replicas: int = 1          # trainers of the cluster (the chief included)
    trainer_rank: int = 0                 # this trainer's place among them (the chief: 0)
    session_config: typing.Any = None     # a ConfigProto; None: default_session_config()
    session_creation_timeout_secs: int = 7200

    def __post_init__(self):
        if self.save_checkpoints_steps and self.save_checkpoints_secs:
            raise ValueError("RunSettings: give save_checkpoints_steps or save_checkpoints_secs, not both")
        if not self.model_dir:
            raise ValueError("RunSettings: model_dir is required")
        if not 0 <= self.trainer_rank < max(self.num_worker_replicas, 1):
            raise ValueError(f"RunSettings: trainer_rank {self.trainer_rank} is not one of the "
                             f"{self.num_worker_replicas} trainers (num_worker_replicas)")
        if self.master and self.is_chief != (self.trainer_rank == 0):
            raise ValueError(f"RunSettings: on a cluster the chief is trainer_rank 0 and every other trainer has a "
                             f"rank of its own (1 .. num_worker_replicas - 1): got is_chief={self.is_chief}, "
                             f"trainer_rank={self.trainer_rank}")

    @property
    def config(self):
        return self.session_config if self.session_config is not None else default_session_config()


class IteratorInitializer(tf.compat.v1.train.SessionRunHook):
    """Initializes an input iterator each time a session is created (a session re-created after
    a PS restart starts its input again, from where the input_fn says)."""

    def __init__(self, iterator):
        self._iterator = iterator

    def begin(self):
        self._initializer = self._iterator.initializer

    def after_create_session(self, session, coord):
        del coord
        session.run(self._initializer)


def input_tensors(input_fn, model_graph=None):
    """(features, labels or None, hooks, model scope) of an input_fn that returns a
    tf.data.Dataset of (features, labels), a (features, labels) pair or features. A tfps
    PipelineDataset's stager and push policy go into model_graph's step (default: the default
    graph's), and the model scope is the push policy's dense_scope(), which the model is built in
    (a null context otherwise). The input_fn runs on the CPU of the task (in a cluster: the
    trainer's own)."""
    with tf.compat.v1.device("/cpu:0"):
        result = input_fn()
    hooks, scope = [], contextlib.nullcontext()
    if isinstance(result, tf.data.Dataset):
        if isinstance(result, PipelineDataset):
            iterator = result.pipeline()
            (model_graph or ModelGraph.of()).step.use(iterator, iterator.push)
            scope = iterator.push.dense_scope()
        else:
            iterator = tf.compat.v1.data.make_initializable_iterator(without_autotune(result))
        hooks.append(IteratorInitializer(iterator))
        result = iterator.get_next()
    if isinstance(result, (tuple, list)):
        if len(result) != 2:
            raise ValueError(f"input_fn: a tuple result must be (features, labels), got {len(result)} elements")
        return result[0], result[1], hooks, scope
    return result, None, hooks, scope


def takes_model_graph(model_fn):
    """Whether model_fn has a `model_graph` parameter (then the runner hands it the ModelGraph)."""
    try:
        return "model_graph" in inspect.signature(model_fn).parameters
    except (TypeError, ValueError):   # a callable without a signature Python can read
        return False


def call_model_fn(model_fn, features, labels, mode, params, model_graph=None):
    """model_fn's ModelSpec for `mode`, checked (tfps.models.spec.ModelSpec.checked); TypeError
    when it returns something else (an EstimatorSpec: use tfps.estimator for an Estimator).
    model_graph is passed as model_fn(..., model_graph=) when model_fn takes it."""
    extra = {"model_graph": model_graph} if model_graph is not None and takes_model_graph(model_fn) else {}
    spec = model_fn(features, labels, mode, params, **extra)
    if not isinstance(spec, ModelSpec):
        raise TypeError(f"model_fn must return a tfps ModelSpec (tfps.runner.ModelSpec), got {type(spec).__name__}")
    if spec.mode != mode:
        raise ValueError(f"model_fn returned a spec of mode {spec.mode!r} when asked for {mode!r}")
    return spec.checked()


def checked_scaffold(spec, mode, settings):
    """The spec's scaffold, with a tfps.state.StateSaver unless it brings its own saver: exact,
    writing manifests and counting in-flight steps of other trainers for training; for evaluation
    and export it checks that the model's tables and variables are saved alike. Made in the graph
    the model is built in (the saver's readiness flag is a variable of it)."""
    scaffold = spec.scaffold or tf.compat.v1.train.Scaffold()
    if scaffold.saver is not None:
        return scaffold
    saver = state_saver(mode == ModeKeys.TRAIN, settings.keep_checkpoint_max, settings.num_worker_replicas)
    return tf.compat.v1.train.Scaffold(saver=saver, copy_from_scaffold=scaffold)


def state_saver(train, keep_checkpoint_max, num_worker_replicas):
    """The tfps.state.StateSaver of a run (the runner's and the Estimator adapter's): exact with
    manifests for training, counting the other trainers' in-flight steps; alike otherwise."""
    return StateSaver(sharded=True, max_to_keep=keep_checkpoint_max, defer_build=True, save_relative_paths=True,
                      exact=train, write_manifest=train, in_flight=max(num_worker_replicas - 1, 0))


def build(model_fn, params, mode, settings, input_fn=None, features=None):
    """In the default graph (under settings.device_fn): the seed, the global step, the graph's
    ModelGraph, the inputs (input_fn's, or `features` given as tensors) and the model, built in
    the input's model scope and handed the ModelGraph. Returns (spec, scaffold, input hooks,
    global step); the ModelGraph keeps the spec's example count."""
    tf.compat.v1.set_random_seed(settings.seed)
    gs = tf.compat.v1.train.create_global_step()
    model_graph = ModelGraph.new()
    labels, hooks, scope = None, [], contextlib.nullcontext()
    if input_fn is not None:
        features, labels, hooks, scope = input_tensors(input_fn, model_graph)
    with scope:
        spec = call_model_fn(model_fn, features, labels, mode, params, model_graph)
    model_graph.examples = spec.examples
    return spec, checked_scaffold(spec, mode, settings), hooks, gs


def latest_checkpoint(model_dir):
    """model_dir's newest whole full checkpoint, with or without its `checkpoint` index file."""
    return disk.latest_checkpoint(model_dir)


def checkpoint_global_step(model_dir):
    """The global step of model_dir's latest full checkpoint (0 without one)."""
    ckpt = latest_checkpoint(model_dir)
    return int(tf.train.load_variable(ckpt, tf.compat.v1.GraphKeys.GLOBAL_STEP)) if ckpt else 0
