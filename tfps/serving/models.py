"""The models one server serves: --model_name/--model_base_path (one), or TF Serving's
--model_config_file (several), each a ModelStore (tfps.serving.store) found by name."""
import contextlib
import dataclasses
import os
import typing

from google.protobuf import text_format
from tensorflow_serving.config import model_server_config_pb2

from tfps.serving.errors import ServingError


@dataclasses.dataclass(frozen=True)
class ModelEntry:
    """One served model: its name, base path (of integer version directories) and the newest
    versions kept loaded (None: --num_versions)."""
    name: str
    base_path: str
    num_versions: typing.Optional[int] = None


def check_name(name, where):
    if not name or "/" in name or ":" in name:
        raise ValueError(f"tfps serve: {where} must be a non-empty name without '/' or ':', got {name!r}")


def read_model_config(path):
    """The models of a TF Serving model config file (text-format ModelServerConfig):

        model_config_list {
          config { name: "a" base_path: "/models/a" model_platform: "tensorflow" }
          config { name: "b" base_path: "/models/b"
                   model_version_policy { latest { num_versions: 2 } } }
        }

    -> [ModelEntry]. ValueError naming the file and what is wrong: a parse error, no model, a
    repeated name, a platform other than tensorflow, a version policy other than latest, version
    labels, a custom config; OSError for a base_path that is not a directory (a relative one is
relative to the working directory, as in TF Serving)."""
    with open(path) as f:
        text = f.read()
    config = model_server_config_pb2.ModelServerConfig()
    try:
        text_format.Parse(text, config)
    except text_format.ParseError as e:
        raise ValueError(f"--model_config_file {path}: not a text-format ModelServerConfig: {e}") from None
    if config.WhichOneof("config") != "model_config_list" or not config.model_config_list.config:
        raise ValueError(f"--model_config_file {path}: no model (give model_config_list {{ config {{ name: ... "
                         f"base_path: ... }} }})")
    entries, seen = [], set()
    for i, c in enumerate(config.model_config_list.config):
        where = f"--model_config_file {path}: config {i} ({c.name!r})"
        check_name(c.name, f"{where}: name")
        if c.name in seen:
            raise ValueError(f"{where}: the name {c.name!r} is given twice")
        seen.add(c.name)
        if not c.base_path:
            raise ValueError(f"{where}: no base_path")
        if c.model_platform not in ("", "tensorflow"):
            raise ValueError(f"{where}: model_platform {c.model_platform!r}; tfps serve serves 'tensorflow' "
                             f"SavedModels")
        policy = c.model_version_policy.WhichOneof("policy_choice") if c.HasField("model_version_policy") else None
        if policy not in (None, "latest"):
            raise ValueError(f"{where}: model_version_policy {policy} is not supported; use latest {{ num_versions: "
                             f"N }}")
        if c.version_labels:
            raise ValueError(f"{where}: version_labels are not supported")
        keep = c.model_version_policy.latest.num_versions if policy == "latest" else None
        base = os.path.abspath(c.base_path)
        if not os.path.isdir(base):
            raise OSError(f"{where}: base_path {c.base_path!r} is not a directory")
        entries.append(ModelEntry(c.name, base, keep or None))
    return entries


class Models:
    """{name: ModelStore}, with the look-ups a request makes (NOT_FOUND for an unknown name)."""

    def __init__(self, stores):
        self.stores = dict(stores)

    def store(self, name):
        store = self.stores.get(name)
        if store is None:
            raise ServingError("NOT_FOUND", f"model {name!r} not found; this server serves {sorted(self.stores)}")
        return store

    @contextlib.contextmanager
    def use(self, name, version=None):
        """The Servable for a request (ModelStore.use of the model named)."""
        with self.store(name).use(name, version) as servable:
            yield servable

    def status(self, name, version=None):
        return self.store(name).status(version)
