"""The private TensorFlow APIs tfps uses (docs/training.md, "Private TensorFlow APIs tfps uses"):
each still exists and does what tfps needs, on both TensorFlow lines (marked compat: CI runs this
file on 2.15 too), and the page's list is complete -- a scan of tfps/ finds no use it lacks and
none it lists that is gone.

Only TensorFlow is imported here, never tfps: each check is a tiny real use of the private API
as tfps makes it."""
import collections
import os

import numpy as np
import pytest
import tensorflow as tf

from private_api_scan import SECTION, documented, scan

pytestmark = pytest.mark.compat


def _session(graph):
    return tf.compat.v1.Session(graph=graph)


# -- each private API, used as tfps uses it ----------------------------------------------------

def test_saveable_object(tmp_path):
    """A SaveableObject whose spec's tensor is a callable (PartSaveable builds its export on a
    Saver's first use) on a device: a Saver saves it under the spec's name and restores it
    through its restore()."""
    from tensorflow.python.training.saving import saveable_object

    class Part(saveable_object.SaveableObject):
        def __init__(self, tensor, target):
            self.target = target
            spec = saveable_object.SaveSpec(lambda: tensor, "", "part-values", dtype=tf.float32, device="/cpu:0")
            super().__init__(tensor, [spec], "part")

        def restore(self, restored_tensors, restored_shapes):
            return self.target.assign(restored_tensors[0])

    with tf.Graph().as_default() as graph:
        target = tf.compat.v1.Variable([0.0, 0.0], collections=[])
        saver = tf.compat.v1.train.Saver([Part(tf.constant([1.0, 2.0]), target)])
        with _session(graph) as session:
            session.run(target.initializer)
            path = saver.save(session, str(tmp_path / "model.ckpt"))
            saver.restore(session, path)
            np.testing.assert_array_equal(session.run(target), [1.0, 2.0])
    np.testing.assert_array_equal(tf.train.load_checkpoint(path).get_tensor("part-values"), [1.0, 2.0])


def test_resources():
    """A registered resource is what a Scaffold's default ready_op reports until its init_op ran."""
    from tensorflow.python.ops import resources
    with tf.Graph().as_default() as graph:
        v = tf.compat.v1.Variable(3.0, use_resource=True, collections=[])   # not a global variable
        resources.register_resource(v.handle, v.initializer, tf.raw_ops.VarIsInitializedOp(resource=v.handle))
        scaffold = tf.compat.v1.train.Scaffold()
        scaffold.finalize()
        with _session(graph) as session:
            assert [n.decode() for n in session.run(scaffold.ready_op)] == [v.handle.name]
            session.run(scaffold.init_op)
            assert session.run(scaffold.ready_op).size == 0
            assert session.run(v) == 3.0


def test_global_step_read_key(tmp_path):
    """The collection holds the one global-step read that TF's hooks fetch each step."""
    from tensorflow.python.training import training_util
    with tf.Graph().as_default():
        tf.compat.v1.train.get_or_create_global_step()
        hooks = [tf.compat.v1.train.StopAtStepHook(last_step=5),
                 tf.compat.v1.train.CheckpointSaverHook(str(tmp_path), save_steps=2)]
        for hook in hooks:
            hook.begin()
        reads = tf.compat.v1.get_collection(training_util.GLOBAL_STEP_READ_KEY)
        assert len(reads) == 1
        for hook in hooks:
            assert hook.before_run(None).fetches is reads[0]


def test_dense_column():
    """A _DenseColumn of one's own, as tfps's EmbeddingColumn implements it, in TF's input_layer."""
    from tensorflow.python.feature_column import feature_column as fc_v1

    class Scaled(fc_v1._DenseColumn, collections.namedtuple("Scaled", ["key"])):
        @property
        def name(self):
            return f"{self.key}_scaled"

        @property
        def _var_scope_name(self):
            return self.name

        @property
        def _parse_example_spec(self):
            return {self.key: tf.io.FixedLenFeature([1], tf.int64)}

        def _transform_feature(self, inputs):
            return tf.cast(inputs.get(self.key), tf.float32)

        @property
        def _variable_shape(self):
            return tf.TensorShape([2])

        def _get_dense_tensor(self, inputs, weight_collections=None, trainable=None):
            return tf.concat([inputs.get(self), 2 * inputs.get(self)], 1)

    with tf.Graph().as_default() as graph:
        out = tf.compat.v1.feature_column.input_layer({"k": tf.constant([[3], [4]], tf.int64)}, [Scaled("k")])
        with _session(graph) as session:
            np.testing.assert_array_equal(session.run(out), [[3, 6], [4, 8]])


def test_signature_defs():
    """PredictOutput's SignatureDef; build_all_signature_defs leaves out the signature whose
    outputs need a placeholder its inputs do not feed."""
    from tensorflow.python.saved_model import model_utils
    from tensorflow.python.saved_model.model_utils import export_output
    with tf.Graph().as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None], name="x")
        unfed = tf.compat.v1.placeholder(tf.float32, [None], name="unfed")
        outputs = {"serving_default": export_output.PredictOutput({"y": 2 * x}),
                   "needs_more": export_output.PredictOutput({"z": x + unfed})}
        signatures = model_utils.build_all_signature_defs({"x": x}, outputs, serving_only=True)
    assert list(signatures) == ["serving_default"]
    signature = signatures["serving_default"]
    assert signature.method_name == tf.saved_model.PREDICT_METHOD_NAME
    assert signature.inputs["x"].name == "x:0" and list(signature.outputs) == ["y"]


def test_op_def_registry():
    from tensorflow.python.framework import op_def_registry
    assert op_def_registry.get("MatMul").name == "MatMul"
    assert op_def_registry.get("TfpsNoSuchOp") is None


def test_saver_var_list(tmp_path):
    """A Saver's _var_list is its var_list (None: everything); set before a deferred build, it
    is what the Saver saves."""
    with tf.Graph().as_default() as graph:
        a = tf.compat.v1.Variable(1.0, name="a")
        b = tf.compat.v1.Variable(2.0, name="b")
        assert tf.compat.v1.train.Saver([b])._var_list == [b]

        class Late(tf.compat.v1.train.Saver):
            def build(self):
                assert self._var_list is None
                self._var_list = [a]
                super().build()

        saver = Late(defer_build=True)
        saver.build()
        with _session(graph) as session:
            session.run(tf.compat.v1.global_variables_initializer())
            path = saver.save(session, str(tmp_path / "model.ckpt"))
    assert sorted(tf.train.load_checkpoint(path).get_variable_to_shape_map()) == ["a"]


def test_dataset_subclass():
    """A tf.compat.v1.data.Dataset of a type of one's own over another dataset (PipelineDataset):
    a tf.data.Dataset that iterates and transforms as the one it wraps."""
    class Wrapper(tf.compat.v1.data.Dataset):
        def __init__(self, dataset):
            self._wrapped = dataset
            super().__init__()

        def _as_variant_tensor(self):
            return tf.data.experimental.to_variant(self._wrapped)

        def _inputs(self):
            return [self._wrapped]

        @property
        def element_spec(self):
            return self._wrapped.element_spec

    with tf.Graph().as_default() as graph:
        wrapper = Wrapper(tf.data.Dataset.range(3))
        assert isinstance(wrapper, tf.data.Dataset)
        nxt = tf.compat.v1.data.make_one_shot_iterator(wrapper.map(lambda x: 2 * x)).get_next()
        with _session(graph) as session:
            assert [session.run(nxt) for _ in range(3)] == [0, 2, 4]
            with pytest.raises(tf.errors.OutOfRangeError):
                session.run(nxt)


class _Saves(tf.compat.v1.train.CheckpointSaverListener):
    def __init__(self):
        self.steps = []

    def after_save(self, session, global_step_value):
        self.steps.append(global_step_value)


class _CountingSession(tf.compat.v1.Session):
    """A session that counts the runs fetching `self.fetch`."""
    fetch, reads = None, 0

    def run(self, fetches, *args, **kwargs):
        self.reads += fetches is self.fetch
        return super().run(fetches, *args, **kwargs)


def test_checkpoint_saver_hook(tmp_path):
    """TF CheckpointSaverHook's internals, as tfps.runner.CheckpointSaverHook uses them: with
    steps_per_run 1 a run whose fetched step is one short of a save reads the step once and
    saves, and another reads nothing; _save saves and tells the listeners; the rest are the
    hook's constructor arguments, saver, writer and global-step read."""
    model_dir = str(tmp_path)
    listener = _Saves()
    with tf.Graph().as_default() as graph:
        gs = tf.compat.v1.train.get_or_create_global_step()
        tf.compat.v1.Variable(1.0, name="w")
        saver = tf.compat.v1.train.Saver()
        hook = tf.compat.v1.train.CheckpointSaverHook(model_dir, save_steps=2, saver=saver, listeners=[listener])
        hook._set_steps_per_run(1)
        hook.begin()
        assert hook._checkpoint_dir == model_dir and hook._save_graph_def is True
        assert hook._get_saver() is saver
        assert hook._summary_writer is tf.compat.v1.summary.FileWriterCache.get(model_dir)
        with _CountingSession(graph=graph) as session:
            session.run(tf.compat.v1.global_variables_initializer())
            assert session.run(hook._global_step_tensor) == 0
            hook._save(session, 0)
            hook._timer.update_last_triggered_step(0)
            session.run(gs.assign(2))
            session.fetch = hook._global_step_tensor
            for fetched, reads in ((1, 1), (2, 1)):   # 1 + 1 is a save step (a read); 2 + 1 is not
                hook.after_run(tf.compat.v1.train.SessionRunContext(None, session),
                               tf.compat.v1.train.SessionRunValues(fetched, None, None))
                assert session.reads == reads
    assert listener.steps == [0, 2]
    assert [os.path.basename(p) for p in tf.train.get_checkpoint_state(model_dir).all_model_checkpoint_paths] == [
        "model.ckpt-0", "model.ckpt-2"]


def test_optimizer_subclass():
    """tf.compat.v1.train.AdamOptimizer's subclass protocol: _create_slots (with _zeros_slot and
    _create_non_slot_variable), _prepare's tensors, _apply_dense (a ref variable),
    _resource_apply_dense, _apply_sparse_shared (under both sparse paths) and _finish."""
    calls = collections.Counter()

    class Adam(tf.compat.v1.train.AdamOptimizer):
        def _create_slots(self, var_list):
            calls["_create_slots"] += 1
            super()._create_slots(var_list)
            extra = self._create_non_slot_variable(initial_value=0.5, name="extra_power", colocate_with=var_list[0])
            assert isinstance(extra, tf.Variable)
            for v in var_list:
                self._zeros_slot(v, "extra", self.get_name())

        def _apply_dense(self, grad, var):
            calls["_apply_dense"] += 1
            return super()._apply_dense(grad, var)

        def _resource_apply_dense(self, grad, var):
            calls["_resource_apply_dense"] += 1
            assert all(isinstance(t, tf.Tensor) for t in (self._lr_t, self._beta1_t, self._beta2_t, self._epsilon_t))
            return super()._resource_apply_dense(grad, var)

        def _apply_sparse_shared(self, grad, var, indices, scatter_add):
            calls["_apply_sparse_shared"] += 1
            return super()._apply_sparse_shared(grad, var, indices, scatter_add)

        def _finish(self, update_ops, name_scope):
            calls["_finish"] += 1
            return super()._finish(update_ops, name_scope)

    with tf.Graph().as_default() as graph:
        ref = tf.compat.v1.Variable([1.0, 2.0], use_resource=False, name="ref")
        res = tf.compat.v1.Variable([1.0, 2.0], use_resource=True, name="res")
        ref_rows = tf.compat.v1.Variable([[1.0], [2.0]], use_resource=False, name="ref_rows")
        res_rows = tf.compat.v1.Variable([[1.0], [2.0]], use_resource=True, name="res_rows")
        loss = tf.reduce_sum(ref * res) + tf.reduce_sum(tf.gather(ref_rows, [1]) + tf.gather(res_rows, [0]))
        opt = Adam(0.1)
        train_op = opt.minimize(loss)
        assert opt.get_slot(res, "extra") is not None
        with _session(graph) as session:
            session.run(tf.compat.v1.global_variables_initializer())
            session.run(train_op)
            assert session.run(ref_rows)[0, 0] == 1.0 and session.run(ref_rows)[1, 0] < 2.0   # the row looked up
    assert calls == {"_create_slots": 1, "_apply_dense": 1, "_resource_apply_dense": 1, "_apply_sparse_shared": 2,
                     "_finish": 1}


def test_optimizer_record_attributes():
    """The fingerprint's optimizer record (tfps.state.manifest.optimizer_record) is made of the
    optimizer's plain-valued attributes: TF keeps each hyper-parameter as one, under these names."""
    extra = {"_use_own_namescope_for_non_slot_vars"} if hasattr(
        tf.compat.v1.train.AdamOptimizer(), "_use_own_namescope_for_non_slot_vars") else set()
    common = {"_name", "_use_locking"} | extra
    cases = [(tf.compat.v1.train.GradientDescentOptimizer(0.1), {"_learning_rate"}),
             (tf.compat.v1.train.AdagradOptimizer(0.1), {"_learning_rate", "_initial_accumulator_value"}),
             (tf.compat.v1.train.AdamOptimizer(0.1), {"_lr", "_beta1", "_beta2", "_epsilon"}),
             (tf.compat.v1.train.FtrlOptimizer(0.1), {"_learning_rate", "_learning_rate_power", "_beta",
                                                      "_initial_accumulator_value", "_l1_regularization_strength",
                                                      "_l2_regularization_strength",
                                                      "_l2_shrinkage_regularization_strength"})]
    for optimizer, names in cases:
        plain = {k for k, v in vars(optimizer).items() if isinstance(v, (bool, int, float, str))}
        assert plain == names | common, type(optimizer).__name__


def test_save_slice_info():
    with tf.Graph().as_default():
        w = tf.compat.v1.get_variable("w", [4, 2], partitioner=tf.compat.v1.fixed_size_partitioner(2))
        info = list(w)[1]._save_slice_info
    assert (info.full_name, info.spec, list(info.full_shape)) == ("w", "4 2 2,2:0,2", [4, 2])


def test_callable_from_options():
    from tensorflow.core.protobuf import config_pb2
    with tf.Graph().as_default() as graph:
        x = tf.compat.v1.placeholder(tf.float32, [None], name="x")
        y = 2 * x
        with _session(graph) as session:
            run = session._make_callable_from_options(config_pb2.CallableOptions(feed=[x.name], fetch=[y.name]))
            (got,) = run(np.array([1.0, 2.0], np.float32))
    np.testing.assert_array_equal(got, [2.0, 4.0])


# -- the list is complete ----------------------------------------------------------------------

def test_this_list_is_complete():
    """Every private use the scan finds in tfps/ is in the page's table, and every one listed is
    still there; every test a row names is in this file."""
    found = scan()
    listed, tests = documented()
    missing = sorted(found - listed)
    gone = sorted(listed - found)
    assert not missing, f"private TensorFlow APIs used in tfps/ but not in {SECTION!r} of docs/training.md " \
                        f"(use a public API, or add a row saying why none serves): {missing}"
    assert not gone, f"listed in {SECTION!r} of docs/training.md but no longer used: {gone}"
    assert tests and tests <= set(globals()), f"tests named in the table that this file lacks: {tests - set(globals())}"


def test_the_scan_finds_each_kind_of_private_use(tmp_path):
    """The scan on a made-up tfps/: an import from tensorflow.python, a private attribute of a TF
    module, a getattr of one, an override and an inherited attribute in a TF subclass, and one
    read through a mixin; not os._exit, a namedtuple's _replace, or a subclass's own names."""
    (tmp_path / "tfps").mkdir()
    (tmp_path / "tfps" / "m.py").write_text('''
import os
import collections
import tensorflow as tf
from tensorflow.python.ops import resources

class Mixin:
    def f(self):
        return self._learning_rate

class Hook(tf.compat.v1.train.CheckpointSaverHook):
    def __init__(self):
        self._mine = 1
    def _save(self, session, step):
        return self._timer, self._mine

class Spec(collections.namedtuple("Spec", ["a"])):
    def g(self):
        return self._replace(a=1)

def h(v):
    os._exit(0)
    return tf.compat.v1.train.Saver()._var_list, getattr(v, "_save_slice_info", None)
''')
    want = ("tensorflow.python.ops.resources", "_learning_rate", "_save", "_timer", "_var_list", "_save_slice_info")
    assert scan(str(tmp_path)) == {("tfps/m.py", n) for n in want}
