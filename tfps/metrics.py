"""Ranking metrics of a scored evaluation set, exact (numpy): AUC, GAUC, logloss.

    auc(labels, scores)                 # ROC AUC, ties count one half
    gauc(users, labels, scores)         # per-user AUC, weighted by impressions, over users
                                        # that have both classes
    logloss(labels, probabilities)      # mean binary cross-entropy
"""
import numpy as np

from tfps.data.synthetic import auc

__all__ = ["auc", "gauc", "logloss"]


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
