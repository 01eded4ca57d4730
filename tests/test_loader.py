"""tfps/ops/_loader.py: a library built for another TF fails loudly, naming both versions."""
import json

import pytest
import tensorflow as tf

from tfps.ops import _loader


def test_version_mismatch_names_both_versions(tmp_path, monkeypatch):
    info = tmp_path / "_build_info.json"
    info.write_text(json.dumps({"tensorflow": "1.0.0"}))
    monkeypatch.setattr(_loader, "_INFO", str(info))
    monkeypatch.setattr(_loader, "_module", None)
    with pytest.raises(ImportError, match=rf"built for TensorFlow 1\.0\.0 but TensorFlow {tf.__version__}"):
        _loader.load()


def test_missing_library_says_how_to_build(tmp_path, monkeypatch):
    monkeypatch.setattr(_loader, "_SO", str(tmp_path / "_tfps_ops.so"))
    monkeypatch.setattr(_loader, "_module", None)
    with pytest.raises(ImportError, match="make build"):
        _loader.load()


def test_loaded_library_has_the_ops():
    module = _loader.load()
    assert _loader.built_for() == tf.__version__
    for op in ("tfps_table_handle", "tfps_table_lookup_unique", "tfps_table_apply_adagrad"):
        assert hasattr(module, op)
