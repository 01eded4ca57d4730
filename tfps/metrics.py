"""Ranking metrics of a scored evaluation set, exact (numpy): AUC, GAUC, logloss.

    auc(labels, scores)                 # ROC AUC, ties count one half
    gauc(users, labels, scores)         # per-user AUC, weighted by impressions, over users
                                        # that have both classes
    logloss(labels, probabilities)      # mean binary cross-entropy

and streaming_metrics(labels, probabilities, users): the same three as an estimator's
eval_metric_ops, exact over the whole evaluation.
"""
import warnings

import numpy as np
import tensorflow as tf

from tfps.data.synthetic import auc

__all__ = ["auc", "gauc", "logloss", "streaming_metrics", "streaming_sum"]


def gauc(users, labels, scores):
    """Group AUC: each user's AUC weighted by the user's impressions (rows), averaged over the
    users whose rows have both classes (the others have no AUC and are left out). ValueError
    when no user has both."""
    users = np.asarray(users)
    labels = np.asarray(labels).astype(bool)
    scores = np.asarray(scores, np.float64)
    if not len(users) == len(labels) == len(scores):
        raise ValueError(f"gauc: users, labels and scores differ in length ({len(users)}, {len(labels)}, "
                         f"{len(scores)})")
    order = np.argsort(users, kind="stable")
    users, labels, scores = users[order], labels[order], scores[order]
    starts = np.r_[0, np.flatnonzero(users[1:] != users[:-1]) + 1]
    ends = np.r_[starts[1:], len(users)]
    total = weight = 0.0
    for begin, end in zip(starts, ends):
        positives = labels[begin:end].sum()
        if 0 < positives < end - begin:
            total += (end - begin) * auc(labels[begin:end], scores[begin:end])
            weight += end - begin
    if weight == 0:
        raise ValueError("gauc: no user has both classes")
    return total / weight


def logloss(labels, probabilities, eps=1e-7):
    """Mean binary cross-entropy of probabilities (clipped to [eps, 1 - eps]) against 0/1 labels."""
    labels = np.asarray(labels, np.float64)
    p = np.clip(np.asarray(probabilities, np.float64), eps, 1 - eps)
    return float(-np.mean(labels * np.log(p) + (1 - labels) * np.log(1 - p)))


def _accumulator(name, dtype):
    """A local [N] variable that a streaming metric appends to (reset by the eval's local init)."""
    return tf.compat.v1.Variable(tf.zeros([0], dtype), name=name, trainable=False, shape=tf.TensorShape([None]),
                                 collections=[tf.compat.v1.GraphKeys.LOCAL_VARIABLES,
                                              tf.compat.v1.GraphKeys.METRIC_VARIABLES], use_resource=True)


def streaming_metrics(labels, probabilities, users=None):
    """eval_metric_ops computing the exact auc, logloss and (with users) gauc of a whole evaluation.

    Each batch's labels [B], probabilities [B] and users [B] are appended to local variables
    (12 or 20 bytes per example); the values are computed once, in numpy, from all of them.
    Returns {"auc": (value, update), "logloss": ..., "gauc": ...}; a value is NaN when it is
    undefined (one class only; no user with both classes)."""
    with tf.compat.v1.variable_scope("tfps_metrics"):
        cols = [(tf.cast(tf.reshape(labels, [-1]), tf.float32), _accumulator("labels", tf.float32)),
                (tf.cast(tf.reshape(probabilities, [-1]), tf.float32), _accumulator("scores", tf.float32))]
        if users is not None:
            cols.append((tf.cast(tf.reshape(users, [-1]), tf.int64), _accumulator("users", tf.int64)))
    update = tf.group(*[acc.assign(tf.concat([acc, x], 0)) for x, acc in cols])
    stored = [acc for _, acc in cols]

    def value(fn, *args):
        def compute(*arrays):
            try:
                with np.errstate(all="ignore"), warnings.catch_warnings():
                    warnings.simplefilter("ignore")   # an empty set: NaN, said by the runner
                    return np.float64(fn(*arrays))
            except ValueError:   # undefined on this set (one class, no user with both)
                return np.float64("nan")
        out = tf.numpy_function(compute, list(args), tf.float64, stateful=False)
        out.set_shape([])
        return out
    ops = {"auc": (value(auc, stored[0], stored[1]), update),
           "logloss": (value(logloss, stored[0], stored[1]), update)}
    if users is not None:
        ops["gauc"] = (value(lambda l, s, u: gauc(u, l, s), stored[0], stored[1], stored[2]), update)
    return ops


def streaming_sum(values):
    """(value, update) of the sum of int64 `values` over an evaluation (an eval_metric_op)."""
    with tf.compat.v1.variable_scope("tfps_metrics"):
        total = tf.compat.v1.Variable(tf.constant(0, tf.int64), name="sum", trainable=False,
                                      collections=[tf.compat.v1.GraphKeys.LOCAL_VARIABLES,
                                                   tf.compat.v1.GraphKeys.METRIC_VARIABLES], use_resource=True)
    update = total.assign_add(tf.reduce_sum(tf.cast(values, tf.int64)))
    return total.read_value(), update
