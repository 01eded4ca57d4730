"""A model's state as one versioned thing: manifests and fingerprints (manifest), deltas and the
chain they form (deltas), the Saver that writes and restores whole cuts (saver), and the lease of
a model_dir (lease)."""


def __getattr__(name):   # tfps.state.StateSaver, without importing the saver with the package
    if name == "StateSaver":
        from tfps.state.saver import StateSaver
        return StateSaver
    raise AttributeError(f"module 'tfps.state' has no attribute {name!r}")
