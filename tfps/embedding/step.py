"""The training step of a graph as one typed object: the lookups its model makes, the stager
that runs them ahead (tfps.pipeline) and the policy that carries its gradients to the PS
(tfps.train.push).

A tfps.embedding_lookup with insert=True on a trainable table adds a TableLookup to a
TrainingStep; the optimizer differentiates the loss with respect to the lookups of the tables it
trains and routes the gradients through the step's push policy. Code that builds its own graph
passes one explicitly (embedding_lookup(..., step=s), optimizer.minimize(loss, step=s)); code
that cannot (a tf.estimator model_fn, which only gets features) uses the graph's own, which TF
keeps with the graph the way it keeps its variable store: in a collection under a tuple key,
held by the graph and never serialized. A PipelineDataset's iterator sets the graph's stager and
push policy (use()).
"""
import dataclasses

import tensorflow as tf

_KEY = ("__tfps_training_step",)   # a tuple key: the graph holds it, export_meta_graph skips it


@dataclasses.dataclass(frozen=True, eq=False)
class TableLookup:
    """One training lookup of `variable`: unique_ids int64 [U] and their rows float32 [U, dim].

    Either the table has one shard (offsets None), or the ids are grouped by shard and shard p
    owns positions offsets[p]:offsets[p+1] (offsets int64 [num_shards + 1])."""
    variable: object
    unique_ids: tf.Tensor
    unique_values: tf.Tensor
    offsets: tf.Tensor = None


class TrainingStep:
    """The lookups of one model's training step, their stager and push policy.

    Args:
      stager: None (lookups run where they are built) or a tfps.pipeline.Pipeline, which has
        stage(ev, keys, insert, probe) -> (unique_ids, inverse, offsets, rows) or None: the
          probe of `keys` run ahead and staged, or None to probe in place;
        carrier(after) -> op: what a train op also runs each step to keep the stages fed.
      push: None (each gradient sent as TF sends it) or a tfps.train.push policy.
    """

    def __init__(self, stager=None, push=None):
        self.lookups = []
        self.stager = stager
        self.push = push

    @staticmethod
    def of(graph=None):
        """The graph's own step (default: the default graph's), made on first use."""
        graph = graph or tf.compat.v1.get_default_graph()
        steps = graph.get_collection_ref(_KEY)
        if not steps:
            steps.append(TrainingStep())
        return steps[0]

    def use(self, stager, push):
        """Makes `stager` run this step's lookups ahead and `push` carry its gradients."""
        if self.stager is not None:
            raise ValueError("PipelineDataset: this graph already reads a PipelineDataset; a graph has one pipeline")
        if self.lookups:
            raise ValueError("PipelineDataset: the model's lookups were built before its input; make the dataset "
                             "(input_fn) first")
        self.stager, self.push = stager, push

    def record(self, lookup):
        """Adds a TableLookup (in creation order)."""
        self.lookups.append(lookup)

    def lookups_of(self, variables):
        """The TableLookups of `variables`, in order."""
        wanted = {id(v) for v in variables}
        return [r for r in self.lookups if id(r.variable) in wanted]
