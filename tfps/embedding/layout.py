"""How a table lies in a checkpoint (tfps.embedding.saveable writes it; kernels/checkpoint_parts.h
reads it for a restore): NAME-parts (k), NAME-slot_init, and per part p < k
NAME-part{p}-{keys, values, slots, freq, last_step, admission}. A checkpoint of the layout before
parts (NAME-keys, NAME-values, ...) reads as one part. For tools that read a checkpoint in Python:
the tables it holds, their shapes, and their rows part by part."""
import re

import numpy as np

from tfps.embedding.saveable import part_name

ROW_COLUMNS = ("keys", "values", "slots", "freq", "last_step")
_PART = re.compile(r"^(.*)-part(\d+)-keys$")


def table_names(shapes):
    """Sorted names of the tables in a bundle, from its {tensor name: shape}: those with a part
    count (NAME-parts), and those in the layout before parts (NAME-keys)."""
    names = {n[:-len("-parts")] for n in shapes if n.endswith("-parts") and not n.endswith("-delta-parts")}
    for n in shapes:
        if n.endswith("-keys") and not n.endswith("-delta-keys") and not _PART.match(n):
            names.add(n[:-len("-keys")])
    return sorted(names)


_COLUMN = re.compile(r"^-(?:part\d+-)?(?:keys|values|slots|freq|last_step|admission)$|^-(?:parts|slot_init)$")


def table_of(tensor, names):
    """The name of the table among `names` that bundle tensor `tensor` belongs to (one of its
    columns, in either layout, its part count or slot_init), or None."""
    for name in names:
        if tensor.startswith(name + "-") and _COLUMN.match(tensor[len(name):]):
            return name
    return None


def part_count(reader, name):
    """(number of parts, legacy) of table `name` in the bundle of `reader` (a
    tf.train.load_checkpoint reader): its NAME-parts (the parts past it, up to MAX_PARTS, are
    empty stand-ins); legacy, one part, when the table is in the layout before parts."""
    if reader.has_tensor(f"{name}-parts"):
        return int(reader.get_tensor(f"{name}-parts")), False
    return 1, True


def is_legacy(shapes, name):
    """Whether table `name` of a bundle is in the layout before parts (NAME-keys, ...)."""
    return f"{name}-parts" not in shapes and f"{name}-keys" in shapes


def column_name(name, part, column, legacy):
    return f"{name}-{column}" if legacy else part_name(name, part, column)


def table_shapes(reader, name):
    """{column: shape} of table `name` as one table (rows summed over its parts; None for a column
    missing in some part), and slot_init."""
    shapes = reader.get_variable_to_shape_map()
    count, legacy = part_count(reader, name)
    out = {}
    for column in ROW_COLUMNS:
        parts = [shapes.get(column_name(name, p, column, legacy)) for p in range(count)]
        if count == 0 or any(s is None for s in parts):
            out[column] = None
        else:
            out[column] = [sum(s[0] for s in parts)] + list(parts[0][1:])
    out["slot_init"] = shapes.get(f"{name}-slot_init")
    return out


def read_parts(reader, name, columns=ROW_COLUMNS):
    """Yields {column: numpy array} of each part of table `name` in turn (a
    tf.train.load_checkpoint reader): one part in memory at a time."""
    count, legacy = part_count(reader, name)
    for p in range(count):
        yield {c: reader.get_tensor(column_name(name, p, c, legacy)) for c in columns}


def read_table(reader, name, columns=ROW_COLUMNS):
    """{column: numpy array} of table `name`, its parts concatenated, and slot_init (tests and
    small tools; a large table is read with read_parts)."""
    parts = list(read_parts(reader, name, columns))
    out = {c: np.concatenate([p[c] for p in parts]) for c in columns}
    out["slot_init"] = reader.get_tensor(f"{name}-slot_init")
    return out
