"""The process-wide switch of the pipeline (tfps.pipeline.enable) that tfps's runners read."""
_DEPTH = [None]   # None: off


def enable(depth=1):
    """Pipelines the lookups of models that tfps's runners (tfps train / launch, and
    tfps.estimator.runner) build from now on, `depth` batches ahead; what the config's
    `pipeline.enabled: true` does. Your own input_fn opts in with tfps.data.PipelineDataset."""
    from tfps.pipeline.stage import Pipeline
    Pipeline.check_depth(depth)
    _DEPTH[0] = depth


def disable():
    """Turns the pipeline off again (the default)."""
    _DEPTH[0] = None


def enabled():
    return _DEPTH[0] is not None


def depth():
    """The enabled depth, else 1 (PipelineDataset's default)."""
    return _DEPTH[0] or 1
