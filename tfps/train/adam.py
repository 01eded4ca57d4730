"""Adam for a PS world.

Dense variables: the same update as tf.compat.v1.train.AdamOptimizer, but with one
(beta1_power, beta2_power) pair per device that holds variables, colocated with them and
advanced together after every step, so all pairs stay equal and each apply op reads only the
pair on its own device (stock TF keeps one pair on one PS, which every other PS reads each
step). In one process there is one device and one pair, named like TF's.

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
        self._pair_suffix = {}   # device -> name suffix of its beta-power pair

    def _create_slots(self, var_list):
        first_on = {}
        for v in sorted(var_list, key=lambda x: x.name):
            first_on.setdefault(_device(v), v)
        for i, device in enumerate(sorted(first_on)):
            suffix = "" if i == 0 else f"_{i}"
            self._pair_suffix[device] = suffix
            for name, value in (("beta1_power", self._beta1), ("beta2_power", self._beta2)):
                self._create_non_slot_variable(initial_value=value, name=name + suffix,
                                               colocate_with=first_on[device])
        for v in var_list:
            self._zeros_slot(v, "m", self._name)
            self._zeros_slot(v, "v", self._name)

    def beta_powers(self, var):
        """The (beta1_power, beta2_power) pair on var's device."""
        graph = tf.compat.v1.get_default_graph()
        suffix = self._pair_suffix[_device(var)]
        return (self._get_non_slot_variable("beta1_power" + suffix, graph=graph),
                self._get_non_slot_variable("beta2_power" + suffix, graph=graph))

    def _hyper(self, var):
        dtype = var.dtype.base_dtype
        b1p, b2p = self.beta_powers(var)
        return [tf.cast(t, dtype) for t in (b1p, b2p, self._lr_t, self._beta1_t, self._beta2_t, self._epsilon_t)]

    def _apply_dense(self, grad, var):
        m, v = self.get_slot(var, "m"), self.get_slot(var, "v")
        b1p, b2p, lr, b1, b2, eps = self._hyper(var)
        return tf.raw_ops.ApplyAdam(var=var, m=m, v=v, beta1_power=b1p, beta2_power=b2p, lr=lr, beta1=b1,
                                    beta2=b2, epsilon=eps, grad=grad, use_locking=self._use_locking).op

    def _resource_apply_dense(self, grad, var):
        m, v = self.get_slot(var, "m"), self.get_slot(var, "v")
        b1p, b2p, lr, b1, b2, eps = self._hyper(var)
        return tf.raw_ops.ResourceApplyAdam(var=var.handle, m=m.handle, v=v.handle, beta1_power=b1p,
                                            beta2_power=b2p, lr=lr, beta1=b1, beta2=b2, epsilon=eps,
                                            grad=grad, use_locking=self._use_locking)

    def _apply_sparse_shared(self, grad, var, indices, scatter_add):
        # tf.compat.v1.train.AdamOptimizer's sparse update, reading var's own beta-power pair.
        b1p, b2p, lr_t, beta1_t, beta2_t, epsilon_t = self._hyper(var)
        lr = lr_t * tf.sqrt(1 - b2p) / (1 - b1p)
        m = self.get_slot(var, "m")
        m_t = tf.compat.v1.assign(m, m * beta1_t, use_locking=self._use_locking)
        with tf.control_dependencies([m_t]):
            m_t = scatter_add(m, indices, grad * (1 - beta1_t))
        v = self.get_slot(var, "v")
        v_t = tf.compat.v1.assign(v, v * beta2_t, use_locking=self._use_locking)
        with tf.control_dependencies([v_t]):
            v_t = scatter_add(v, indices, (grad * grad) * (1 - beta2_t))
        var_update = tf.compat.v1.assign_sub(var, lr * m_t / (tf.sqrt(v_t) + epsilon_t),
                                             use_locking=self._use_locking)
        return tf.group(*[var_update, m_t, v_t])

    def _finish(self, update_ops, name_scope):
        # Advance every pair after all updates, each on its own device.
        with tf.control_dependencies(update_ops):
            advances = []
            graph = tf.compat.v1.get_default_graph()
            for suffix in sorted(set(self._pair_suffix.values())):
                b1p = self._get_non_slot_variable("beta1_power" + suffix, graph=graph)
                b2p = self._get_non_slot_variable("beta2_power" + suffix, graph=graph)
                with graph.colocate_with(b1p.op if hasattr(b1p, "op") else b1p):
                    advances.append(b1p.assign(b1p * self._beta1_t, use_locking=self._use_locking))
                    advances.append(b2p.assign(b2p * self._beta2_t, use_locking=self._use_locking))
        return tf.group(*update_ops + advances, name=name_scope)

    def _apply_table(self, shard, keys, grads, lr, step):
        return training_ops.table_apply_adam(shard.handle, keys, grads, lr, step,
                                             tf.cast(self._call_if_callable(self._beta1), tf.float32),
                                             tf.cast(self._call_if_callable(self._beta2), tf.float32),
                                             tf.cast(self._call_if_callable(self._epsilon), tf.float32))
