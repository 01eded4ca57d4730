"""The scan of tfps/ for private TensorFlow APIs (test_tf_private.py checks its result against
docs/training.md's list): every `_` attribute of a TensorFlow object, import from
tensorflow.python and private name used in a subclass of a TensorFlow class, and the page's
table of them."""
import ast
import collections
import importlib
import inspect
import os
import re


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGE = os.path.join(ROOT, "docs", "training.md")
SECTION = "## Private TensorFlow APIs tfps uses"
# TensorFlow's protos of its own file formats, read by hand (not an API): listed like the private modules.
ON_DISK_FORMATS = ("tensorflow.core.protobuf.tensor_bundle_pb2",)


# `_` names that are not TensorFlow's: os._exit, and a namedtuple's public methods.
NOT_TENSORFLOW = {"_exit", "_replace", "_asdict", "_fields", "_make"}


def _private(name):
    return name.startswith("_") and not name.startswith("__")


def _tfps_sources(root):
    for folder, _, files in os.walk(os.path.join(root, "tfps")):
        for name in sorted(files):
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                with open(path) as f:
                    yield os.path.relpath(path, root), ast.parse(f.read(), path)


def _tensorflow_names(tree):
    """{local name: dotted path} of a module's imports from tensorflow."""
    out = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == "tensorflow":
                    out[a.asname or "tensorflow"] = a.name if a.asname else "tensorflow"
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "tensorflow":
            for a in node.names:
                out[a.asname or a.name] = f"{node.module}.{a.name}"
    return out


def _tensorflow_object(expr, names):
    """The TensorFlow object `expr` (a name or a.b.c) stands for, or None when it is not one."""
    parts = []
    while isinstance(expr, ast.Attribute):
        parts.append(expr.attr)
        expr = expr.value
    if not isinstance(expr, ast.Name) or expr.id not in names:
        return None
    path = names[expr.id]
    try:
        obj = importlib.import_module(path)
    except ImportError:   # a class or function imported from a module
        module, name = path.rsplit(".", 1)
        obj = getattr(importlib.import_module(module), name)
    for part in reversed(parts):
        obj = getattr(obj, part)
    return obj


def _class_names(cls):
    """The `_` names a TensorFlow class and its bases define or set (self._x in their source)."""
    names = set()
    for c in cls.__mro__:
        names |= set(vars(c))
        try:
            names |= set(re.findall(r"self\.(_\w+)", inspect.getsource(c)))
        except (OSError, TypeError):   # object, and classes without Python source
            pass
    return {n for n in names if _private(n)}


def scan(root=ROOT):
    """{(path, name)} of tfps's uses of private TensorFlow APIs: modules imported from
    tensorflow.python (name: the dotted path); `x._name` with x neither self nor cls, and
    getattr/hasattr/setattr of a "_name"; in a class with a TensorFlow base, the `_` names it
    reads, sets or defines that the TensorFlow class has; in another class, the `self._name`s it
    reads that neither it nor its tfps bases set or define."""
    sources = list(_tfps_sources(root))
    classes = collections.defaultdict(list)   # tfps class name -> [(node, its module's tensorflow names)]
    for _, tree in sources:
        names = _tensorflow_names(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                classes[node.name].append((node, names))

    def tf_bases(node, names, seen=()):
        out = []
        for base in node.bases:
            obj = _tensorflow_object(base, names)
            if obj is not None:
                out.append(obj)
            elif isinstance(base, ast.Name) and base.id in classes and base.id not in seen:
                for n, ns in classes[base.id]:
                    out += tf_bases(n, ns, seen + (base.id,))
        return out

    def own(node, seen=()):
        names = {m.name for m in ast.walk(node) if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef))}
        names |= {m.attr for m in ast.walk(node) if isinstance(m, ast.Attribute) and isinstance(m.ctx, ast.Store)
                  and isinstance(m.value, ast.Name) and m.value.id == "self"}
        for base in node.bases:
            if isinstance(base, ast.Name) and base.id in classes and base.id not in seen:
                for n, _ in classes[base.id]:
                    names |= own(n, seen + (base.id,))
        return names

    found = set()
    for path, tree in sources:
        names = _tensorflow_names(tree)
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for a in node.names:
                    full = a.name if isinstance(node, ast.Import) else f"{node.module}.{a.name}"
                    if full.startswith("tensorflow.python") or full in ON_DISK_FORMATS:
                        found.add((path, full))
            elif isinstance(node, ast.Attribute):
                if _private(node.attr) and node.attr not in NOT_TENSORFLOW and not (
                        isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
                    found.add((path, node.attr))
            elif isinstance(node, ast.Call):
                if isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr", "setattr") and \
                        len(node.args) > 1 and isinstance(node.args[1], ast.Constant) and \
                        isinstance(node.args[1].value, str) and _private(node.args[1].value):
                    found.add((path, node.args[1].value))
            elif isinstance(node, ast.ClassDef):
                used = {m.attr for m in ast.walk(node) if isinstance(m, ast.Attribute) and isinstance(m.value, ast.Name)
                        and m.value.id == "self" and _private(m.attr)}
                defined = {m.name for m in node.body if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef))
                           and _private(m.name)}
                bases = tf_bases(node, names)
                if bases:
                    tf_names = set().union(*(_class_names(b) for b in bases))
                    found |= {(path, n) for n in (used | defined) & tf_names}
                else:
                    found |= {(path, n) for n in used - own(node) - NOT_TENSORFLOW}
    return found


def documented():
    """{(path, name)} of the page's table, and the tests its rows name."""
    text = open(PAGE).read()
    assert SECTION in text, f"{PAGE} has no section {SECTION!r}"
    section = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    listed, tests = set(), set()
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 4 or not cells[1].startswith("`tfps/"):
            continue
        apis = [t for t in re.findall(r"`([^`]+)`", cells[0]) if t.startswith(("_", "tensorflow."))]
        paths = re.findall(r"`([^`]+\.py)`", cells[1])
        listed |= {(p, a) for p in paths for a in apis}
        tests |= set(re.findall(r"`(test_\w+)`", cells[3]))
    return listed, tests
