"""YAML onto typed dataclasses, field by field: the mapping under tfps.config, which knows no
job. A key the dataclass lacks, a wrong type or a missing field is a ConfigError naming it."""
import dataclasses
import typing
from typing import List


class ConfigError(ValueError):
    """A configuration key or value is wrong; the message names it."""



def numeric_fields(cls, prefix=""):
    """(dotted name, type) of every int and float field of the dataclass cls (Optional ones and
    lists of them included; data.features.length for the features' lengths)."""
    out = []
    for name, tp in typing.get_type_hints(cls).items():
        where = f"{prefix}{name}"
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if typing.get_origin(tp) is typing.Union:
            tp = args[0]
            args = list(typing.get_args(tp))
        if dataclasses.is_dataclass(tp):
            out += numeric_fields(tp, where + ".")
        elif typing.get_origin(tp) in (list, List) and dataclasses.is_dataclass(args[0]):
            out += numeric_fields(args[0], where + ".")
        elif typing.get_origin(tp) in (list, List) and args[0] in (int, float):
            out.append((where, args[0]))
        elif tp in (int, float):
            out.append((where, tp))
    return out



def values(cfg, dotted):
    """(name, value) of a numeric field of cfg, one per list item (None values left out)."""
    node, parts = [("", cfg)], dotted.split(".")
    for part in parts:
        nxt = []
        for where, obj in node:
            value = getattr(obj, part)
            name = f"{where}.{part}" if where else part
            if isinstance(value, list):
                nxt += [(f"{name}[{i}]", v) for i, v in enumerate(value)]
            else:
                nxt.append((name, value))
        node = nxt
    return [(name, v) for name, v in node if v is not None]



def coerce(value, tp, where):
    origin = typing.get_origin(tp)
    if origin is typing.Union:  # Optional[X]
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return None if value is None else coerce(value, args[0], where)
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise ConfigError(f"config key '{where}' must be a mapping, got {value!r}")
        return build(tp, value, where)
    if origin in (list, List):
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"config key '{where}' must be a list, got {value!r}")
        (item,) = typing.get_args(tp)
        return [coerce(v, item, f"{where}[{i}]") for i, v in enumerate(value)]
    if tp is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if tp is float and isinstance(value, str):
        try:   # PyYAML reads 1e-6 (no dot) as a string
            return float(value)
        except ValueError:
            pass
    if tp in (int, float, str, bool) and (not isinstance(value, tp) or (tp is int and isinstance(value, bool))):
        raise ConfigError(f"config key '{where}' must be {tp.__name__}, got {value!r}")
    return value


def build(cls, raw, prefix=""):
    fields = {f.name: f for f in dataclasses.fields(cls)}
    hints = typing.get_type_hints(cls)
    for key in raw:
        if key not in fields:
            where = f"{prefix}.{key}" if prefix else key
            raise ConfigError(f"unknown config key '{where}' (known: {', '.join(sorted(fields))})")
    kwargs = {k: coerce(v, hints[k], f"{prefix}.{k}" if prefix else k) for k, v in raw.items()}
    missing = [f.name for f in fields.values() if f.default is dataclasses.MISSING
               and f.default_factory is dataclasses.MISSING and f.name not in kwargs]
    if missing:
        raise ConfigError(f"config section '{prefix}' needs {', '.join(missing)}")
    return cls(**kwargs)


def set_dotted(raw, dotted, value):
    node = raw
    parts = dotted.split(".")
    for p in parts[:-1]:
        node = node.setdefault(p, {})
        if not isinstance(node, dict):
            raise ConfigError(f"config key '{dotted}': '{p}' is not a section")
    node[parts[-1]] = value
