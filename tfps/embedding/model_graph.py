"""What one model graph holds, as one object: its tables and merged groups, its training step
(the lookups, their stager and push policy), the optimizer records its manifest reads and the
examples of its batch.

Whoever builds the graph makes its ModelGraph and hands it down: tfps.runner makes one per
graph, puts the input pipeline's stager and push policy into its step, and passes it to a
model_fn that takes a `model_graph` argument; the model's lookups and optimizer then name it
(step=model_graph.step). Code that is handed nothing -- a graph of your own, a tf.estimator
model_fn -- keeps working with no argument: every graph has one ModelGraph of its own, made on
first use (ModelGraph.of(graph)), and the one the runner makes is that one. The graph holds it
the way TF holds its variable store: in a collection under a tuple key, never serialized.

    mg = ModelGraph.of()                         # the default graph's
    ev = tfps.get_embedding_variable("e", 8)     # -> mg.tables["e"]
    loss = ...tfps.embedding_lookup(ev, ids)...  # -> mg.step.lookups
    tfps.train.AdagradOptimizer(0.1).minimize(loss, step=mg.step)   # -> mg.optimizers
"""
import dataclasses
import typing

import tensorflow as tf

_KEY = ("__tfps_model_graph",)   # a tuple key: the graph holds it, export_meta_graph skips it


@dataclasses.dataclass(frozen=True, eq=False)
class TableLookup:
    """One training lookup of `variable`: unique_ids int64 [U] and their rows float32 [U, dim].

    Either the table has one shard (offsets None), or the ids are grouped by shard and shard p
    owns positions offsets[p]:offsets[p+1] (offsets int64 [num_shards + 1])."""
    variable: object
    unique_ids: tf.Tensor
    unique_values: tf.Tensor
    offsets: tf.Tensor = None


class Stager(typing.Protocol):
    """What runs a step's lookups ahead of the step (tfps.pipeline.Pipeline is the one tfps has).

    A training lookup asks stage(); a tfps optimizer's train op runs lookahead_op(); a push policy that
    defers the push (tfps.train.push.DeferredPush) orders its queue after staged_batch() and hands
    the op computing a step's gradients to first_step()."""

    def stage(self, ev, keys, insert, probe):
        """The probe of `keys` (int64 [N]) run ahead and staged: (unique_ids int64 [U], inverse
        int32 [N], offsets int64 [num_shards + 1] or None, rows float32 [U, dim]), or None to probe
        in place. `probe(ev, keys, insert, after=None)` is the probe to run ahead."""

    def lookahead_op(self, after=None):
        """The op a train op also runs each step to keep the stages fed; after: None, or
        [(table handle, update op)] the probes ahead of a table shard run after."""

    def staged_batch(self):
        """The op that dequeues the step's staged batch."""

    def first_step(self, op):
        """Takes the op computing a step's gradients for a deferred push; the stager's
        initializer runs it once, on the first batch."""


class TrainingStep:
    """The lookups of one model's training step, their stager and push policy.

    Args:
      stager: None (lookups run where they are built) or a Stager.
      push: None (each gradient sent as TF sends it) or a tfps.train.push policy.
    """

    def __init__(self, stager=None, push=None):
        self.lookups = []
        self.stager = stager
        self.push = push

    @staticmethod
    def of(graph=None):
        """The step of the graph's ModelGraph (default: the default graph's)."""
        return ModelGraph.of(graph).step

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


class ModelGraph:
    """What one model graph holds (see the module docstring).

    Attributes:
      tables: {full name: tfps.EmbeddingVariable}, in creation order.
      merged: {group key: (EmbeddingVariable, {tag: feature name})}: the physical tables of
        tfps.embedding.merged features and the features each holds.
      step: the graph's TrainingStep.
      optimizers: the JSON records of the optimizers applied (tfps.state.manifest reads them).
      examples: the examples of the model's batch, int32 scalar (the ModelSpec's, set by the
        runner), or None.
      restore_checks: {checkpoint prefix tensor name: the op checking every table is there}, one
        per Saver restore (tfps.embedding.saveable); restore_stages: {(table name, prefix tensor
        name): the commits of that restore of the table}, built at a Saver's first shard of it.
    """

    def __init__(self):
        self.tables = {}
        self.merged = {}
        self.step = TrainingStep()
        self.optimizers = []
        self.examples = None
        self.restore_checks = {}
        self.restore_stages = {}

    @staticmethod
    def of(graph=None):
        """The graph's ModelGraph (default: the default graph's), made on first use."""
        held = (graph or tf.compat.v1.get_default_graph()).get_collection_ref(_KEY)
        if not held:
            held.append(ModelGraph())
        return held[0]

    @staticmethod
    def new(graph=None):
        """A ModelGraph made for a graph (default: the default graph) that holds no model yet:
        what a builder of graphs (tfps.runner) makes and hands down. ValueError when the graph
        already has tables, lookups or optimizers (a second model in one graph)."""
        held = (graph or tf.compat.v1.get_default_graph()).get_collection_ref(_KEY)
        if held and (held[0].tables or held[0].step.lookups or held[0].optimizers):
            raise ValueError("this graph already holds a model (its tables or lookups exist): build each model in "
                             "a graph of its own")
        held[:] = [ModelGraph()]
        return held[0]

    def trainable_tables(self):
        """The trainable EmbeddingVariables, in creation order."""
        return [ev for ev in self.tables.values() if ev.trainable]

    def record_optimizer(self, record):
        """Adds an optimizer's record (a JSON string; tfps.state.manifest.optimizer_record), once."""
        if record not in self.optimizers:
            self.optimizers.append(record)


__all__ = ["ModelGraph", "Stager", "TableLookup", "TrainingStep"]
