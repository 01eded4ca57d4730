"""A model's identity: its description, fingerprint and the manifest each saved cut carries.

The description is derived from the model alone (never from placement, shard or PS count):

    {"tables":    {name: {"dim": 16, "key_dtype": "int64", "admit_min_count": 1, ...}},
     "dense":     {variable name: {"shape": [..], "dtype": "float32"}},   # optimizer slots included
     "optimizer": ["{\"class\": \"AdamOptimizer\", \"learning_rate\": 0.001, ...}", ...]}

its fingerprint is the first 16 hex digits of the SHA-256 of its canonical JSON. Every full
checkpoint and every delta holds it as the string tensor `tfps_manifest` (JSON: format, version,
kind, fingerprint, model, and features: the feature names of merged tables' tags); an export holds it in `assets.extra/tfps_manifest.json` with the step
it was cut at. A reader compares the saved description with its model's before it changes
anything (`difference`) and names the first difference.
"""
import hashlib
import json

import tensorflow as tf

from tfps.embedding.model_graph import ModelGraph

MANIFEST = "tfps_manifest"            # the string tensor of a checkpoint or delta bundle
EXPORT_MANIFEST = "tfps_manifest.json"   # under a SavedModel's assets.extra/
FORMAT, VERSION = "tfps-state", 1


class StateMismatch(ValueError):
    """A saved state that does not belong to the model reading it (message: the first difference)."""


# Attributes of TF's optimizers that are no hyper-parameter and that one TensorFlow line has and
# the other lacks (2.21's optimizers set use_own_namescope_for_non_slot_vars, 2.15's do not): left
# out of a record, and out of a saved record when it is compared, so that a model_dir moves
# between the lines (a record saved on 2.21 before they were left out still matches).
_NOT_HYPER = ("name", "use_locking", "use_own_namescope_for_non_slot_vars")


def optimizer_record(optimizer):
    """The JSON string that names an optimizer and its hyper-parameters (its plain number, string
    and bool attributes; a tensor-valued one is recorded as 'tensor')."""
    hyper = {}
    for key, value in sorted(vars(optimizer).items()):
        name = key.lstrip("_")
        if name in _NOT_HYPER or name.endswith("_t") or key.startswith("__"):
            continue
        if isinstance(value, bool) or isinstance(value, (int, float, str)):
            hyper[name] = value
        elif isinstance(value, (tf.Tensor, tf.Variable)):
            hyper[name] = "tensor"
    return json.dumps({"class": type(optimizer).__name__, **hyper}, sort_keys=True)


def record_optimizer(optimizer, model_graph=None):
    """Adds optimizer_record(optimizer) to the optimizers of the model graph (default: the default
    graph's tfps.embedding.ModelGraph), once."""
    (model_graph or ModelGraph.of()).record_optimizer(optimizer_record(optimizer))


READY_FLAG = "tfps_state_ready"   # a training graph's readiness flag (tfps.state.saver), never saved
TRAINER_SESSIONS = "tfps_trainer_sessions"   # sessions per trainer on the live state (tfps.state.saver), never saved


def internal(variable):
    """Whether a variable is tfps's own bookkeeping, not the model's (never saved or described)."""
    name = getattr(getattr(variable, "op", None), "name", "")
    return name in (READY_FLAG, TRAINER_SESSIONS)


def dense_variables(graph):
    """{key: variable} of the graph's global variables that a checkpoint saves: the key is the
    name in a checkpoint (v.op.name), with '@' and the slice of a partitioned variable's part."""
    out = {}
    for v in graph.get_collection(tf.compat.v1.GraphKeys.GLOBAL_VARIABLES):
        if not internal(v):
            name, spec, _ = saved_as(v)
            out[f"{name}@{spec}" if spec else name] = v
    return out


def saved_as(v):
    """(name, slice spec, full shape) under which a checkpoint holds variable v: a part of a
    partitioned variable is a slice of its whole variable, whatever the partition count."""
    info = getattr(v, "_save_slice_info", None)
    if info is not None:
        return info.full_name, info.spec, list(info.full_shape)
    return v.op.name, "", v.shape.as_list()


def describe(graph=None):
    """The description of the model built in `graph` (see the module docstring)."""
    graph = graph or tf.compat.v1.get_default_graph()
    model_graph = ModelGraph.of(graph)
    tables = {}
    for ev in model_graph.tables.values():
        tables[ev.name] = {"dim": ev.dim, "key_dtype": ev.key_dtype.name,
                           "admit_min_count": ev.options.admit_min_count,
                           "admit_sketch_width": ev.options.admit_sketch_width if ev.options.admit_min_count > 1
                           else 0}
    dense = {}
    for v in dense_variables(graph).values():
        name, _, shape = saved_as(v)
        dense[name] = {"shape": shape, "dtype": v.dtype.base_dtype.name}
    return {"tables": tables, "dense": dense, "optimizer": sorted(set(model_graph.optimizers))}


def fingerprint(description):
    """16 hex digits of SHA-256 over the description's canonical JSON."""
    text = json.dumps(description, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def feature_names(graph=None):
    """{table name: [[tag, feature name], ...]} of the merged tables of the model built in `graph`,
    in the order the model made its features: what
    `tfps inspect` names a merged table's tags by. Kept beside the description in a manifest, not
    in it: names do not change what a checkpoint restores, nor the fingerprint."""
    model_graph = ModelGraph.of(graph or tf.compat.v1.get_default_graph())
    return {ev.name: [[tag, name] for tag, name in tags.items()] for ev, tags in model_graph.merged.values()}


def manifest(description, kind, features=None):
    """The manifest JSON string of a cut of `kind` ('full' or 'delta'); features: feature_names()."""
    return json.dumps({"format": FORMAT, "version": VERSION, "kind": kind, "fingerprint": fingerprint(description),
                       "model": description, **({"features": features} if features else {})}, sort_keys=True)


def parse(text, where):
    """The manifest dict of a JSON string read from `where`; StateMismatch when it is not one."""
    try:
        out = json.loads(text.decode() if isinstance(text, bytes) else text)
    except ValueError:
        raise StateMismatch(f"{where}: its {MANIFEST} is not JSON") from None
    if not isinstance(out, dict) or out.get("format") != FORMAT or "model" not in out:
        raise StateMismatch(f"{where}: its {MANIFEST} is not a tfps state manifest")
    if out.get("version", 0) > VERSION:
        raise StateMismatch(f"{where}: state format version {out['version']}, this tfps reads up to {VERSION}: "
                            f"upgrade tfps")
    return out


def read(prefix, reader=None):
    """The manifest dict of the checkpoint or delta bundle at `prefix`, or None when it has none
    (written by a tfps before manifests)."""
    reader = reader or tf.train.load_checkpoint(prefix)
    if not reader.has_tensor(MANIFEST):
        return None
    return parse(reader.get_tensor(MANIFEST), prefix)


def difference(saved, model, exact=True):
    """The first difference between a saved description and a model's, in words, or None.

    exact: every table, dense variable and optimizer must be the same on both sides (resuming
    training). Otherwise (evaluation, export: no optimizer in the graph) every table and dense
    variable of the model must be saved alike; the saved state may hold more."""
    for name in sorted(set(saved["tables"]) | set(model["tables"])):
        a, b = saved["tables"].get(name), model["tables"].get(name)
        if b is None:
            if exact:
                return f"table {name!r} is saved but not in the model"
            continue
        if a is None:
            others = {n: t["dim"] for n, t in saved["tables"].items() if n not in model["tables"]}
            return f"table {name!r} (dim {b['dim']}) of the model is not saved" + (
                f"; saved tables the model does not have: {others} (name: dim)" if others else "")
        for key in sorted(set(a) | set(b)):
            if a.get(key) != b.get(key):
                return f"table {name!r}: {key} {a.get(key)} saved, {b.get(key)} in the model"
    for name in sorted(set(saved["dense"]) | set(model["dense"])):
        a, b = saved["dense"].get(name), model["dense"].get(name)
        if b is None:
            if exact:
                return f"variable {name!r} {a['shape']} is saved but not in the model"
            continue
        if a is None:
            return f"variable {name!r} {b['shape']} of the model is not saved"
        if a != b:
            return (f"variable {name!r}: {a['dtype']} {a['shape']} saved, {b['dtype']} {b['shape']} in the model")
    if exact and _hyper(saved["optimizer"]) != _hyper(model["optimizer"]):
        return f"optimizer: {saved['optimizer'] or 'none recorded'} saved, {model['optimizer'] or 'none'} in the model"
    return None


def _hyper(records):
    """Optimizer records as compared: parsed, without the _NOT_HYPER attributes."""
    out = []
    for record in records:
        try:
            parsed = json.loads(record)
        except ValueError:
            out.append(record)
            continue
        out.append(json.dumps({k: v for k, v in parsed.items() if k not in _NOT_HYPER}, sort_keys=True)
                   if isinstance(parsed, dict) else record)
    return sorted(out)


def check(saved, model, where, exact=True):
    """Raises StateMismatch naming the first difference between `saved` (a manifest dict) and
    `model` (a description)."""
    problem = difference(saved["model"], model, exact)
    if problem is not None:
        theirs = f"the model's {fingerprint(model)}" if exact else "a model without an optimizer: no fingerprint"
        raise StateMismatch(f"{where} is another model's (fingerprint {saved['fingerprint']}; {theirs}): {problem}")
