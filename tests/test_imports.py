"""tfps's layers only point down, and its modules import no cycle: the import graph, walked from
the source (every `import` and `from ... import`, module-level or inside a function), against
the layer order of DESIGN.md. And the light entry points import no TensorFlow."""
import ast
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Bottom to top: a module may import its own layer and those below it.
LAYERS = [
    ("tfps._lazy", "tfps.errors", "tfps.process", "tfps._core"),   # _core: the C++ core's binding
    ("tfps.ops",),
    ("tfps.embedding", "tfps.feature_column"),
    ("tfps.state",),
    ("tfps.train",),
    ("tfps.pipeline",),
    ("tfps.data", "tfps.metrics", "tfps.config", "tfps.config_bounds", "tfps.config_mapping"),
    ("tfps.models",),
    ("tfps.cluster",),
    ("tfps.runner",),
    ("tfps.estimator",),
    ("tfps.serving",),
    ("tfps.cli",),
    ("tfps",),   # the package itself: every name, lazily
]


def _modules():
    """{module name: path} of every tfps module (packages by their __init__)."""
    out = {}
    for folder, _, files in os.walk(os.path.join(ROOT, "tfps")):
        for f in files:
            if f.endswith(".py"):
                path = os.path.join(folder, f)
                name = os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".")
                out[name[:-len(".__init__")] if name.endswith(".__init__") else name] = path
    out["tfps._core"] = os.path.join(ROOT, "bindings", "core_module.cc")   # an extension module, built from C++
    return out


def _imports(path, modules):
    """[(imported tfps module, at module level)] of one file; `from pkg import x` is pkg.x when
    that is a module, else pkg."""
    out = []
    if not path.endswith(".py"):   # an extension module imports nothing of tfps
        return out
    tree = ast.parse(open(path).read())
    top = set(map(id, tree.body))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module
                     for a in node.names]
        else:
            continue
        out += [(n, id(node) in top) for n in names if n == "tfps" or n.startswith("tfps.")]
    return out


def _layer(module):
    for rank, prefixes in enumerate(LAYERS):
        if any(module == p or module.startswith(p + ".") for p in prefixes if p != "tfps"):
            return rank
    assert module == "tfps", f"{module} is in no layer of LAYERS"
    return len(LAYERS) - 1


def test_every_import_points_down_or_within_its_layer():
    modules = _modules()
    upward = []
    for name, path in modules.items():
        for target, _ in _imports(path, modules):
            assert target in modules, f"{name} imports {target}, which is not a tfps module"
            if _layer(target) > _layer(name):
                upward.append(f"{name} -> {target}")
    assert not upward, upward


def _cycles(module_level_only):
    """The import cycles of tfps's modules (each as a list of module names, first == last)."""
    modules = _modules()
    graph = {name: sorted({t for t, top in _imports(path, modules) if (top or not module_level_only) and t != name})
             for name, path in modules.items()}
    state, cycles = {}, []

    def visit(node, stack):
        state[node] = "open"
        for nxt in graph.get(node, []):
            if state.get(nxt) == "open":
                cycles.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt, stack + [nxt])
        state[node] = "done"
    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    return cycles


def test_module_level_imports_have_no_cycle():
    assert not _cycles(module_level_only=True)


def test_imports_inside_functions_close_no_cycle_either():
    """A cycle closed by an import inside a function is still a cycle: two modules that need
    each other (as embedding.saveable and embedding.variable did)."""
    assert not _cycles(module_level_only=False)


def test_no_state_travels_by_hidden_ways():
    """No graph-keyed module registries, no getter installed on the root variable scope, no
    override of tf.data's private iterator hook: a model graph's state is its ModelGraph."""
    hidden = ("WeakKeyDictionary", "set_custom_getter", "_make_initializable_iterator")
    found = [f"{os.path.relpath(path, ROOT)}: {word}" for path in _modules().values()
             for word in hidden if word in open(path).read()]
    assert not found, found


def test_light_entry_points_import_no_tensorflow():
    code = ("import sys, tfps, tfps.config, tfps.cli, tfps.data.synthetic, tfps.cluster.tf_config; "
            "print('tensorflow' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "False", out.stderr[-2000:]
    help_ = subprocess.run([sys.executable, "-m", "tfps.cli", "--help"], cwd=ROOT, capture_output=True, text=True,
                           timeout=60)
    assert help_.returncode == 0 and "train" in help_.stdout
