"""Adam for a PS world.

Dense variables: the same update as tf.compat.v1.train.AdamOptimizer. Stock TF keeps one
(beta1_power, beta2_power) pair on one PS, which every other PS reads each step; here each
device that holds dense variables has a pair colocated with them, so each apply op reads only
the pair on its own device, and every pair is advanced on its own device after every step.

Only one pair is model state, and it alone is saved: `beta1_power`/`beta2_power`, the names
stock TF saves, on the first device (in sorted order) that holds dense variables. The pairs on
the other devices are copies of it that no checkpoint, delta or fingerprint holds: local
variables (LOCAL_VARIABLES, so neither the savers' list, the chief's init_op nor
ready_for_local_init_op sees them; the ready_op does) whose initial value reads the saved pair.
MonitoredTrainingSession runs the local init after the chief has initialised or restored the
global variables (a StateSaver restore applies a delta's dense state within the restore), and
on a worker once ready_for_local_init_op says they are ready. So after a restore -- in one
process, on another PS count, or after a PS restart, when the chief restores and every
re-created session re-runs its local init -- each copy starts from the restored pair, then
moves with it. Whoever initialises by hand runs tf.compat.v1.local_variables_initializer()
after the global init or restore.

Why copies rather than b^t from a step count: the step lives on one PS, so each PS would need
a step of its own (a per-PS variable again) or a value sent from the worker; the worker knows
the global step only by reading it from its PS before the applies (a round trip the fused step
avoids), and a trainer-kept stamp lags the other trainers' steps. The copies keep TF's update,
its checkpoint names and its cost. With asynchronous trainers two advances of a pair can race
(unlocked read-modify-writes, as stock TF's), and a trainer whose session starts re-sets the
copies from the saved pair while others train, so a copy may be an advance or so off the saved
pair until the next restore; with one trainer all pairs stay equal.

Tables: lazy Adam -- only the rows of the batch move, m and v live in the row, and each row's
bias correction uses its own step count (its number of updates), see TfpsTableApplyAdam.
"""
import tensorflow as tf

from tfps.ops import training as training_ops
from tfps.train.optimizer import TableOptimizerMixin


def _device(var):
    return var.device or ""


class AdamOptimizer(TableOptimizerMixin, tf.compat.v1.train.AdamOptimizer):
    """Same arguments as tf.compat.v1.train.AdamOptimizer."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._pairs = {}   # (graph, device) -> its (beta1_power, beta2_power): the saved pair or copies

    def _create_slots(self, var_list):
        graph = tf.compat.v1.get_default_graph()
        first_on = {}
        for v in sorted(var_list, key=lambda x: x.name):
            first_on.setdefault(_device(v), v)
        home = sorted(first_on)[0]
        saved = tuple(self._create_non_slot_variable(initial_value=value, name=name, colocate_with=first_on[home])
                      for name, value in (("beta1_power", self._tfps_arguments["beta1"]),
                                          ("beta2_power", self._tfps_arguments["beta2"])))
        # Another minimize on this graph finds the pair where the first one put it.
        self._pairs.setdefault((graph, _device(saved[0])), saved)
        for device, v in sorted(first_on.items()):
            if (graph, device) not in self._pairs:
                self._pairs[graph, device] = tuple(_local_copy(p, v) for p in saved)
        for v in var_list:
            self._zeros_slot(v, "m", self.get_name())
            self._zeros_slot(v, "v", self.get_name())

    @property
    def _locking(self):
        return self._tfps_arguments["use_locking"]

    def beta_powers(self, var):
        """The (beta1_power, beta2_power) pair on var's device: the saved pair or its local copies."""
        return self._pairs[tf.compat.v1.get_default_graph(), _device(var)]

    def _hyper(self, var):
        dtype = var.dtype.base_dtype
        b1p, b2p = self.beta_powers(var)
        return [tf.cast(t, dtype) for t in (b1p, b2p, self._lr_t, self._beta1_t, self._beta2_t, self._epsilon_t)]

    def _apply_dense(self, grad, var):
        m, v = self.get_slot(var, "m"), self.get_slot(var, "v")
        b1p, b2p, lr, b1, b2, eps = self._hyper(var)
        return tf.raw_ops.ApplyAdam(var=var, m=m, v=v, beta1_power=b1p, beta2_power=b2p, lr=lr, beta1=b1,
                                    beta2=b2, epsilon=eps, grad=grad, use_locking=self._locking).op

    def _resource_apply_dense(self, grad, var):
        m, v = self.get_slot(var, "m"), self.get_slot(var, "v")
        b1p, b2p, lr, b1, b2, eps = self._hyper(var)
        return tf.raw_ops.ResourceApplyAdam(var=var.handle, m=m.handle, v=v.handle, beta1_power=b1p,
                                            beta2_power=b2p, lr=lr, beta1=b1, beta2=b2, epsilon=eps,
                                            grad=grad, use_locking=self._locking)

    def _apply_sparse_shared(self, grad, var, indices, scatter_add):
        # tf.compat.v1.train.AdamOptimizer's sparse update, reading var's own beta-power pair.
        b1p, b2p, lr_t, beta1_t, beta2_t, epsilon_t = self._hyper(var)
        lr = lr_t * tf.sqrt(1 - b2p) / (1 - b1p)
        m = self.get_slot(var, "m")
        m_t = tf.compat.v1.assign(m, m * beta1_t, use_locking=self._locking)
        with tf.control_dependencies([m_t]):
            m_t = scatter_add(m, indices, grad * (1 - beta1_t))
        v = self.get_slot(var, "v")
        v_t = tf.compat.v1.assign(v, v * beta2_t, use_locking=self._locking)
        with tf.control_dependencies([v_t]):
            v_t = scatter_add(v, indices, (grad * grad) * (1 - beta2_t))
        var_update = tf.compat.v1.assign_sub(var, lr * m_t / (tf.sqrt(v_t) + epsilon_t),
                                             use_locking=self._locking)
        return tf.group(*[var_update, m_t, v_t])

    def _finish(self, update_ops, name_scope):
        # Advance every pair after all updates, each on its own device.
        graph = tf.compat.v1.get_default_graph()
        with tf.control_dependencies(update_ops):
            advances = []
            for pair in [pair for (g, _), pair in self._pairs.items() if g is graph]:
                for power, beta in zip(pair, (self._beta1_t, self._beta2_t)):
                    with graph.colocate_with(power.op):
                        advances.append(power.assign(power * beta, use_locking=self._locking))
        return tf.group(*update_ops + advances, name=name_scope)

    def _apply_table(self, shard, keys, grads, lr, step):
        return training_ops.table_apply_adam(shard.handle, keys, grads, lr, step,
                                             tf.cast(self._argument("beta1"), tf.float32),
                                             tf.cast(self._argument("beta2"), tf.float32),
                                             tf.cast(self._argument("epsilon"), tf.float32))


def _local_copy(saved, colocate_with):
    """A local variable beside `colocate_with` whose initial value reads `saved` (a copy no
    checkpoint holds; its initializer runs with the local init, after a restore)."""
    graph = tf.compat.v1.get_default_graph()
    with graph.colocate_with(saved.op, ignore_existing=True):
        initial = saved.read_value()
    with graph.colocate_with(colocate_with.op, ignore_existing=True):
        return tf.compat.v1.Variable(initial, trainable=False, name=saved.op.name + "_local",
                                     collections=[tf.compat.v1.GraphKeys.LOCAL_VARIABLES],
                                     use_resource=hasattr(colocate_with, "handle"))   # a resource variable
