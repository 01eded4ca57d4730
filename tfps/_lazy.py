"""PEP 562 lazy attributes for a package's __init__: names are imported on first use, so that
importing a light module of the package (tfps.config, tfps.cli) imports no TensorFlow."""
import importlib


def attach(package, names):
    """(__getattr__, __dir__) for `package`, serving each of `names` ({name: module}) from its
    module on first access; a name equal to its module's last part is the module itself."""
    def __getattr__(name):
        if name not in names:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module = importlib.import_module(names[name])
        value = module if names[name].rsplit(".", 1)[-1] == name and not hasattr(module, name) else \
            getattr(module, name)
        globals_of(package)[name] = value
        return value

    def __dir__():
        return sorted(set(globals_of(package)) | set(names))
    return __getattr__, __dir__


def globals_of(package):
    return vars(importlib.import_module(package))
