"""The training lookups of a graph: what tfps optimizers differentiate the loss with respect to.

A lookup with insert=True on a trainable table hands its distinct ids and their rows to the
graph's record as a TableLookup; an optimizer asks for the lookups of the variables it trains.
The record belongs to the graph (as TF's variable collections do), not to the variable, and
holds Python objects, so it is kept beside the graph rather than in a serialized collection.
"""
import dataclasses
import weakref

import tensorflow as tf

_LOOKUPS = weakref.WeakKeyDictionary()   # graph -> [TableLookup], in creation order


@dataclasses.dataclass(frozen=True, eq=False)
class TableLookup:
    """One training lookup of `variable`: unique_ids int64 [U] and their rows float32 [U, dim].

    Either all ids live in shard `shard`, or (sharded lookups) they are grouped by shard and
    shard p owns positions offsets[p]:offsets[p+1] (offsets int64 [num_shards + 1])."""
    variable: object
    unique_ids: tf.Tensor
    unique_values: tf.Tensor
    shard: int = 0
    offsets: tf.Tensor = None


def record(lookup):
    """Adds a TableLookup to the default graph's record."""
    _LOOKUPS.setdefault(tf.compat.v1.get_default_graph(), []).append(lookup)


def lookups_of(variables, graph=None):
    """The TableLookups of `variables` in the graph (default: the default graph), in order."""
    wanted = {id(v) for v in variables}
    return [r for r in _LOOKUPS.get(graph or tf.compat.v1.get_default_graph(), []) if id(r.variable) in wanted]


_STAGERS = weakref.WeakKeyDictionary()   # graph -> the stager of its lookups (tfps.pipeline)


def set_stager(stager, graph=None):
    """Makes `stager` handle the graph's lookups (None: lookups run where they are built).

    A stager (tfps.pipeline.Pipeline) has
      stage(ev, keys, insert, probe) -> (unique_ids, inverse, offsets, rows) or None: the probe
        of `keys` run ahead and staged, or None to probe in place; probe(ev, keys, insert) is the
        lookup itself;
      carrier() -> op: what a train op must also run each step to keep the stages fed."""
    graph = graph or tf.compat.v1.get_default_graph()
    if stager is None:
        _STAGERS.pop(graph, None)
    else:
        _STAGERS[graph] = stager


def stager_of(graph=None):
    """The graph's stager, or None."""
    return _STAGERS.get(graph or tf.compat.v1.get_default_graph())
