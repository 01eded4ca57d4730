"""A model's state as one versioned thing: manifests and fingerprints (manifest), deltas and the
chain they form (deltas), the Saver that writes and restores whole cuts (saver), and the lease of
a model_dir (lease)."""
