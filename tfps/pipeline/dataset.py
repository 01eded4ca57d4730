"""PipelineDataset: what an input_fn returns to have its model's lookups pipelined."""
import tensorflow as tf

from tfps.pipeline.stage import Pipeline


class PipelineDataset(tf.compat.v1.data.Dataset):
    """A tf.data.Dataset of (features, labels) batches whose embedding lookups run `depth`
    batches ahead of the step that trains on them (tfps.pipeline.stage).

    Return it from an input_fn around the dataset you would return anyway; the model_fn does
    not change (for a tf.estimator.Estimator, wrap the input_fn in
    tfps.estimator.pipelined_input_fn and the model_fn in tfps.estimator.estimator_model_fn).
    Example:

        def input_fn():
            ds = tf.data.TFRecordDataset(files).batch(1024).map(parse)
            return tfps.data.PipelineDataset(ds, depth=1)

    Args:
      dataset: a tf.data.Dataset of batches.
      depth: batches the lookups run ahead (1 .. 8).
      fuse_dense: read the dense variables (those the model_fn makes with
        tf.compat.v1.get_variable) of each PS as one tensor per step, and push their gradients
        as one (tfps.train.fused); numerically the same training.
      defer_push: (with fuse_dense) push a step's gradients during the next step, so that the
        step never waits on the PS: dense values are then one step old, rows exactly depth. None:
        on at depth 1 when dense variables live on a PS, off in one process (where nothing waits
        on a network) and deeper (at depth 4 and more the demo model needs a smaller learning
        rate with it: see docs/pipeline.md).

    tfps.runner builds its pipeline (pipeline()) and puts the stager and push policy into the
    model graph's step; as a plain dataset (iterated, or transformed further) it is `dataset`
    unchanged. In a graph of your own:

        pipeline = ds.pipeline()                      # the iterator: get_next(), initializer
        step = tfps.ModelGraph.of().step
        step.use(pipeline, pipeline.push)
        features, labels = pipeline.get_next()
        with pipeline.push.dense_scope():
            ...build the model and minimize(loss, step=step)...
    """

    def __init__(self, dataset, depth=1, fuse_dense=True, defer_push=None):
        if not isinstance(dataset, tf.data.Dataset):
            raise TypeError(f"PipelineDataset: dataset must be a tf.data.Dataset, got {type(dataset).__name__}")
        self._wrapped = dataset
        self.depth = depth
        if defer_push and not fuse_dense:
            raise ValueError("PipelineDataset: defer_push=True needs fuse_dense=True (the deferred push is part of "
                             "the fused one)")
        self.fuse_dense = fuse_dense
        self.defer_push = defer_push
        Pipeline.check_depth(self.depth)
        super().__init__()

    # tf.compat.v1.data.Dataset's subclass protocol (no public way to subclass a dataset):
    # docs/training.md, "Private TensorFlow APIs tfps uses".
    def _as_variant_tensor(self):
        return tf.data.experimental.to_variant(self._wrapped)

    def _inputs(self):
        return [self._wrapped]

    @property
    def element_spec(self):
        return self._wrapped.element_spec

    def pipeline(self):
        """The tfps.pipeline.stage.Pipeline of this dataset in the default graph: the iterator a
        model trains on (get_next(), initializer), the stager of its lookups and (.push) the push
        policy of its gradients."""
        return Pipeline(self._wrapped, self.depth, self.fuse_dense, self.defer_push)
