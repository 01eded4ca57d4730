"""Re-building part of a graph on other inputs: the keys a model_fn derives from batch t,
derived again from batch t + depth.

The pipeline builds the user's model_fn once, on the staged batch. A lookup's keys are some
function of that batch's tensors (a reshape, a feature tag, a hashed string column, a sparse
feature's values); `replay` copies the ops of that function -- only the ops between the staged
tensors and the keys -- and feeds the copies the fresh batch, through
tf.compat.v1.import_graph_def's input_map (no TF internals touched).
"""
import tensorflow as tf


class ReplayError(ValueError):
    """The keys cannot be re-derived from the fresh batch (see the message)."""


def depends_on(tensor, sources):
    """Whether `tensor` is, or is computed from, any tensor in `sources` (a set of tensor names)."""
    return tensor.name in sources or any(_depends([tensor], sources).values())


def _ops_to_copy(outputs, sources, forbidden=()):
    """The ops between `sources` (tensor names) and `outputs`, in graph order (the order in which
    they were made): each op that has a source upstream of it (the sources' own ops excluded).
    ReplayError when an op of a type in `forbidden` is upstream of `outputs` (short of the sources)."""
    graph = outputs[0].graph
    depends = _depends(outputs, sources, forbidden)
    return [op for op in graph.get_operations() if depends.get(op.name)]


def _depends(outputs, sources, forbidden=()):
    """{op name: whether a source is upstream of it} over the ops upstream of `outputs`."""
    depends = {}
    stack = [t.op for t in outputs]
    while stack:
        op = stack[-1]
        if op.name in depends:
            stack.pop()
            continue
        pending = [t.op for t in op.inputs if t.name not in sources and t.op.name not in depends]
        if pending:
            stack.extend(pending)
            continue
        stack.pop()
        depends[op.name] = any(t.name in sources or depends[t.op.name] for t in op.inputs)
        if op.type in forbidden:
            raise ReplayError(f"the keys of a pipelined lookup are computed from {op.name!r} ({op.type}), another "
                              f"staged value; keys may only depend on the batch's features")
    return depends


def replay(outputs, mapping, name="tfps_replay", forbidden=()):
    """Copies of `outputs` computed from mapping's values instead of its keys.

    Args:
      outputs: list of Tensors.
      mapping: {Tensor: Tensor} of equal dtypes: the inputs to swap.
      forbidden: op types that may not lie between the mapped inputs and the outputs
        (ReplayError naming the op).

    Returns:
      list of Tensors, one per output (a mapped input gives its mapping; an output that does not
      depend on the mapped tensors is returned itself). Control inputs from outside the copied ops are dropped; devices are kept.
    """
    sources = {t.name: v for t, v in mapping.items()}
    ops = _ops_to_copy([t for t in outputs if t.name not in sources], sources, forbidden) if any(
        t.name not in sources for t in outputs) else []
    if not ops:
        return [sources.get(t.name, t) for t in outputs]
    copied = {op.name for op in ops}
    graph_def = tf.compat.v1.GraphDef()
    graph_def.versions.CopyFrom(outputs[0].graph.graph_def_versions)
    input_map = {}
    for op in ops:
        node = graph_def.node.add()
        node.CopyFrom(op.node_def)
        node.attr.pop("_class", None)   # colocation with ops outside the copy would not resolve
        del node.input[:]
        for t in op.inputs:
            node.input.append(t.name if t.op.name in copied else _external(t.name))
            if t.op.name not in copied:
                input_map[_external(t.name)] = sources.get(t.name, t)
        node.input.extend(f"^{c.name}" for c in op.control_inputs if c.name in copied)
    wanted = [t for t in outputs if t.op.name in copied]
    results = tf.compat.v1.import_graph_def(graph_def, input_map=input_map,
                                           return_elements=[t.name for t in wanted], name=name)
    by_name = dict(zip((t.name for t in wanted), results))
    out = []
    for t in outputs:
        if t.name in sources:            # an output that is a mapped input itself
            out.append(sources[t.name])
        elif t.name in by_name:
            by_name[t.name].set_shape(t.shape)
            out.append(by_name[t.name])
        else:
            out.append(t)
    return out


def _external(name):
    # import_graph_def maps inputs by the name they have inside graph_def; inputs that come from
    # outside get a name of their own so that they never clash with a copied op's.
    return "tfps_external/" + name
