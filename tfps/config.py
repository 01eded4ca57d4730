"""Typed job configuration: dataclasses that configs/*.yaml map onto one-to-one.

`load_config(path, overrides)` reads YAML, applies `--set a.b=value` overrides, and checks
every key and type; an unknown key or a wrong type is a ConfigError naming it. Every numeric
field has a range (BOUNDS), checked before anything is built: a value outside it (NaN and the
infinities included) is a ConfigError naming the field and the range.
"""
import dataclasses
import os
import tempfile
import warnings
from typing import List, Optional

import yaml

from tfps.config_bounds import (  # noqa: F401 -- tfps.config's names too
    BOUNDS,
    MAX_BATCH,
    MAX_DIM,
    MAX_FLOAT32,
    MAX_HIDDEN_LAYERS,
    MAX_SECS,
    MAX_SEED,
    MAX_SHARDS,
    MAX_SKETCH_WIDTH,
    MAX_STOCK_VALUES,
    MAX_STEPS,
    MAX_SYNTHETIC_EVAL,
    MIN_FLOAT32,
    MIN_SKETCH_WIDTH,
    Range)
from tfps.config_mapping import ConfigError, build, set_dotted, values as _values  # noqa: F401 -- tfps.config's names too
from tfps.config_mapping import numeric_fields as _numeric_fields
from tfps.data.synthetic import SyntheticConfig


@dataclasses.dataclass
class EvictionConfig:
    """The tables' eviction rules (tfps.EmbeddingOptions); null: rule off. They run every
    train.evict_every_steps steps (on the chief in a cluster)."""
    after_steps: Optional[int] = None    # rows not updated for more than this many steps
    min_freq: Optional[int] = None       # rows updated fewer times than this
    l2_below: Optional[float] = None     # rows whose value has a smaller L2 norm
    max_rows: Optional[int] = None       # then at most this many rows per table
    cap_policy: str = "lfu"              # lfu | lru: which rows max_rows drops first

    @property
    def any(self):
        return any(v is not None for v in (self.after_steps, self.min_freq, self.l2_below, self.max_rows))


FORMATS = ("synthetic", "criteo", "movielens", "tfrecord", "movielens_sequences")
FEATURE_TYPES = ("int", "float", "string", "int_list")


@dataclasses.dataclass
class FeatureSpec:
    """One feature of a TFRecord of tf.train.Example (data.features)."""
    name: str
    type: str                            # int | float | string: model inputs; int_list: a list feature
    length: int = 1                      # values per example (int, float, string)
    names: Optional[List[str]] = None    # the embedding feature name of each of an int/string feature's values


@dataclasses.dataclass
class DataConfig(SyntheticConfig):
    """Where the examples come from: data.format and its files; the synthetic generator's shape
    (the fields of SyntheticConfig) when data.format is synthetic."""
    format: str = "synthetic"            # synthetic | criteo | movielens | tfrecord | movielens_sequences (mtgr)
    path: Optional[str] = None           # criteo: file, glob or directory; movielens: directory; tfrecord: dir or glob
    eval_path: Optional[str] = None      # criteo, tfrecord: the eval files (movielens splits by time itself)
    skip_bad_rows: bool = False          # text formats: drop malformed rows (counted in the JSON's bad_rows)
    eval_fraction: float = 0.2           # movielens: each user's latest share of ratings that is evaluation
    validation: bool = False             # movielens(_sequences): leave out that share (the test set, never read)
                                         # and evaluate on the latest eval_fraction of the rest (for tuning)
    features: List[FeatureSpec] = dataclasses.field(default_factory=list)   # tfrecord (or DIR/tfps_features.yaml)
    label: str = "label"                 # tfrecord: the float label feature
    user: Optional[str] = None           # tfrecord: the int user-id feature (GAUC); not a model input
    window: int = 8                      # movielens_sequences: candidates per sample (one user, one request)
    history_len: int = 64                # movielens_sequences: history tokens before the real-time ones
    realtime_len: int = 16               # movielens_sequences: real-time tokens before the window
    max_tokens: Optional[int] = None     # movielens_sequences: token-budget batches (balance_by_tokens) of at
                                         # most this many tokens instead of train.batch_size samples


@dataclasses.dataclass
class ModelConfig:
    name: str = "deepfm"                 # deepfm | wdl | dcn_v2 | mtgr (data.format movielens_sequences)
    embedding_dim: int = 8
    hidden_units: List[int] = dataclasses.field(default_factory=lambda: [400, 400, 400])
    num_shards: int = 1                  # tables per feature (a placement choice: checkpoints restore into any)
    merge_tables: bool = True            # features share one physical table (one fused lookup)
    initializer_stddev: float = 0.02
    admit_min_count: int = 1             # a new id gets a row after this many sightings
    admit_sketch_width: int = 2**20      # counters per row of the admission sketch (EmbeddingOptions)
    eviction: EvictionConfig = dataclasses.field(default_factory=EvictionConfig)
    cross_layers: int = 3                # dcn_v2: cross layers
    dcn_structure: str = "stacked"       # dcn_v2: stacked (cross, then MLP) | parallel (side by side)
    d_model: int = 32                    # mtgr: token width
    heads: int = 2                       # mtgr: attention heads (divide d_model)
    blocks: int = 2                      # mtgr: HSTU blocks
    gln: bool = True                     # mtgr: Group-Layer Norm (false: one LayerNorm for every token group)
    dynamic_mask: bool = True            # mtgr: candidates see real-time tokens up to their own request time
    cross_features: bool = True          # mtgr: candidate tokens carry the DLRM cross features
    hashing_trick: bool = False          # the hashing-trick baseline, stock TensorFlow's way (benchmarks): each
                                         # feature a tf.Variable of hashing_buckets rows in num_shards partitions,
                                         # tf.nn.embedding_lookup of id mod hashing_buckets, train.optimizer from
                                         # tf.compat.v1.train; no table (was model.stock_tf, still read)
    hashing_buckets: int = 2**18         # hashing_trick: rows per feature (was model.stock_buckets, still read)


@dataclasses.dataclass
class AdagradConfig:
    initial_accumulator_value: float = 0.1


@dataclasses.dataclass
class AdamConfig:
    beta1: float = 0.9
    beta2: float = 0.999
    epsilon: float = 1e-8


@dataclasses.dataclass
class FtrlConfig:
    learning_rate_power: float = -0.5
    initial_accumulator_value: float = 0.1
    l1_regularization_strength: float = 0.0
    l2_regularization_strength: float = 0.0
    beta: float = 0.0


OPTIMIZERS = ("sgd", "adagrad", "adam", "ftrl")
CPU_ALLOCATORS = ("bfc", "malloc")


@dataclasses.dataclass
class TrainConfig:
    steps: int = 2000
    batch_size: int = 1024
    optimizer: str = "adagrad"           # sgd | adagrad | adam | ftrl, with train.<name> hyper-parameters
    learning_rate: float = 0.5
    adagrad: AdagradConfig = dataclasses.field(default_factory=AdagradConfig)
    adam: AdamConfig = dataclasses.field(default_factory=AdamConfig)
    ftrl: FtrlConfig = dataclasses.field(default_factory=FtrlConfig)
    log_every_steps: int = 100
    save_checkpoints_steps: int = 1000
    save_checkpoints_secs: Optional[int] = None   # set: checkpoint by time instead of by steps
    keep_checkpoint_max: int = 3
    delta_every_secs: Optional[float] = None   # incremental table checkpoints between full ones
    evict_every_steps: Optional[int] = None    # run the tables' eviction rules this often
    seed: Optional[int] = 1              # graph-level seed of the dense variables' initializers (null: random)
    cpu_allocator: str = "bfc"           # bfc | malloc: TensorFlow's allocator of CPU tensors in every tfps process
                                         # of the job (TF_CPU_ALLOCATOR_USE_BFC); malloc cost TF 2.21 ~1,800 page
                                         # faults and 5-8 ms of the chief's CPU a step (docs/cluster.md)


@dataclasses.dataclass
class EvalConfig:
    examples: Optional[int] = 100_000    # synthetic: the eval sample; files: the first this many (null: all)
    batch_size: int = 4096
    throttle_secs: int = 10              # cluster evaluator: at most one evaluation this often


@dataclasses.dataclass
class MemoryCapsSection:
    """tfps launch: each task's memory cap in MiB, by job (null: no cap), enforced by a memory cgroup
    of the task's own (root; cgroup v2 or v1's memory controller). A task over its cap is killed by
    the kernel and restarted by the launcher (docs/cluster.md)."""
    ps: Optional[int] = None
    chief: Optional[int] = None
    worker: Optional[int] = None
    evaluator: Optional[int] = None

    def by_job(self):
        """{job: MiB} of the jobs with a cap."""
        return {job: mib for job, mib in dataclasses.asdict(self).items() if mib is not None}


@dataclasses.dataclass
class ClusterSection:
    protocol: str = "grpc"               # TF server protocol; grpc+verbs only where TF has that plugin
    host: str = "127.0.0.1"              # tfps launch's cluster addresses (TF's server still listens on all
                                         # interfaces; it has no bind-address option and no authentication)
    peer_timeout_secs: float = 120.0     # a trainer whose PS has not answered this long exits (code 75)
    emulated_latency_ms: float = 0.0     # tfps launch: relays delaying trainer <-> PS traffic each way (benchmarks)
    fork_tasks: bool = True              # tfps launch: each task a fork of the launcher (TF imported once: starts
                                         # and restarts ~3 CPU-s cheaper; docs/cluster.md); false: a new interpreter
    netns: bool = False                  # tfps launch: each task an emulated host, a network namespace of its own
                                         # with its own address on one bridge (root and iproute2; docs/cluster.md)
    emulated_bandwidth_gbit: Optional[float] = None   # with netns: each task's link shaped (tbf) to this many
                                                      # Gbit/s each way (null: not shaped)
    memory_cap_mib: MemoryCapsSection = dataclasses.field(default_factory=MemoryCapsSection)   # tfps launch:
                                         # {ps: 512, chief: 2048, ...}: each task in a memory cgroup of its own


@dataclasses.dataclass
class PipelineSection:
    enabled: bool = False                # embedding lookups run `depth` batches ahead of the step (tfps.pipeline)
    depth: int = 1                       # 1 .. 8; rows are at most this many steps stale
    fuse_dense: bool = True              # with enabled: one dense read and one gradient message per PS and step
    defer_push: Optional[bool] = None    # with fuse_dense: push a step's gradients during the next step (null:
                                         # on at depth 1 when dense variables live on a PS; deeper it needs a smaller step)


@dataclasses.dataclass
class ExportSection:
    format: str = "stock"                # tfps export's default --format: stock (stock TensorFlow ops only: the
                                         # unmodified tensorflow_model_server loads it; docs/serving.md) | tfps
                                         # (tfps's table ops, with the optimizer slots: needs tfps to load)


@dataclasses.dataclass
class JobConfig:
    model_dir: Optional[str] = None      # None: a fresh temporary directory
    data: DataConfig = dataclasses.field(default_factory=DataConfig)
    model: ModelConfig = dataclasses.field(default_factory=ModelConfig)
    train: TrainConfig = dataclasses.field(default_factory=TrainConfig)
    eval: EvalConfig = dataclasses.field(default_factory=EvalConfig)
    cluster: ClusterSection = dataclasses.field(default_factory=ClusterSection)
    pipeline: PipelineSection = dataclasses.field(default_factory=PipelineSection)
    export: ExportSection = dataclasses.field(default_factory=ExportSection)


def numeric_fields(cls=None, prefix=""):
    """(dotted name, type) of every int and float field of JobConfig (or of cls)."""
    return _numeric_fields(cls or JobConfig, prefix)


def check_bounds(cfg):
    """ConfigError naming the first numeric field of cfg outside its range (BOUNDS)."""
    for dotted, _ in numeric_fields():
        allowed = BOUNDS[dotted]
        for name, value in _values(cfg, dotted):
            if value not in allowed:
                raise ConfigError(f"{name} must be in {allowed}, got {value!r}")
    if len(cfg.model.hidden_units) > MAX_HIDDEN_LAYERS:
        raise ConfigError(f"model.hidden_units: at most {MAX_HIDDEN_LAYERS} layers, got {len(cfg.model.hidden_units)}")


def load_config(path=None, overrides=()):
    """JobConfig from a YAML file (or defaults) plus 'a.b=value' overrides (values parsed as YAML)."""
    raw = {}
    if path:
        try:
            with open(path) as f:
                raw = yaml.safe_load(f) or {}
        except OSError as e:
            raise ConfigError(f"cannot read config {path}: {e.strerror}") from None
        except yaml.YAMLError as e:
            raise ConfigError(f"config {path} is not valid YAML: {e}") from None
        except UnicodeDecodeError:
            raise ConfigError(f"config {path} is not text (UTF-8): give the job's YAML config") from None
        if not isinstance(raw, dict):
            raise ConfigError(f"config {path} must be a mapping at the top level")
        _resolve_data_paths(raw, os.path.dirname(os.path.abspath(path)))
        _rename_old_keys(raw, f"config {path}")
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"--set expects key.sub=value, got {item!r}")
        key, text = item.split("=", 1)
        try:
            value = yaml.safe_load(text)
        except yaml.YAMLError as e:
            raise ConfigError(f"--set {key.strip()}: {text!r} is not a YAML value "
                              f"({str(e).splitlines()[0]})") from None
        key = key.strip()
        if key in RENAMED:
            warnings.warn(f"config: --set {key} is now {RENAMED[key]} (read as such)", FutureWarning, stacklevel=2)
            key = RENAMED[key]
        set_dotted(raw, key, value)
    cfg = build(JobConfig, raw)
    validate(cfg)
    return cfg


# Keys renamed, still read: {old dotted key: new}. model.stock_tf named the hashing-trick baseline
# like the stock-ops export (--format stock), which it is not.
RENAMED = {"model.stock_tf": "model.hashing_trick", "model.stock_buckets": "model.hashing_buckets"}


def _rename_old_keys(raw, where):
    """Moves each old key of RENAMED in `raw` (the mapping of a config file, `where`) to its new
    name, with a FutureWarning naming both; a file giving both is a ConfigError. (A `--set` of
    either name comes after, and wins.)"""
    for old, new in RENAMED.items():
        section, old_leaf = old.split(".")
        new_leaf = new.split(".")[1]
        part = raw.get(section)
        if not isinstance(part, dict) or old_leaf not in part:
            continue
        if new_leaf in part:
            raise ConfigError(f"{where} gives both {old} and {new}, its new name: keep {new} only")
        part[new_leaf] = part.pop(old_leaf)
        warnings.warn(f"{where}: {old} is now {new} (read as such)", FutureWarning, stacklevel=3)


def _resolve_data_paths(raw, directory):
    """A config file's relative data.path and data.eval_path name files beside it: they are made
    absolute from the config's directory (a --set value stays relative to the working directory,
    as any command-line path). URLs (gs://, hdfs://, ...) are left as they are."""
    data = raw.get("data")
    if not isinstance(data, dict):
        return
    for key in ("path", "eval_path"):
        value = data.get(key)
        if isinstance(value, str) and value and not os.path.isabs(value) and "://" not in value:
            data[key] = os.path.normpath(os.path.join(directory, value))


def validate(cfg):
    """The ranges of every numeric field (check_bounds), then what ranges cannot express."""
    check_bounds(cfg)
    w = cfg.model.admit_sketch_width
    checks = [
        (cfg.model.name in ("deepfm", "wdl", "dcn_v2", "mtgr"), f"model.name must be deepfm, wdl, dcn_v2 or mtgr, "
                                                                f"got {cfg.model.name!r}"),
        ((cfg.model.name == "mtgr") == (cfg.data.format == "movielens_sequences"),
         "model.name mtgr reads data.format movielens_sequences, and only it does"),
        (cfg.model.d_model % cfg.model.heads == 0,
         f"model.heads ({cfg.model.heads}) must divide model.d_model ({cfg.model.d_model})"),
        (cfg.data.vocab_min <= cfg.data.vocab_max,
         f"data.vocab_min ({cfg.data.vocab_min}) must be <= data.vocab_max ({cfg.data.vocab_max})"),
        (cfg.data.num_interacting <= cfg.data.num_categorical,
         f"data.num_interacting ({cfg.data.num_interacting}) must be <= data.num_categorical "
         f"({cfg.data.num_categorical})"),
        (cfg.model.dcn_structure in ("stacked", "parallel"), "model.dcn_structure must be stacked or parallel"),
        (cfg.export.format in ("tfps", "stock"), f"export.format must be stock or tfps, got {cfg.export.format!r}"),
        (cfg.data.format in FORMATS, f"data.format must be one of {', '.join(FORMATS)}, got {cfg.data.format!r}"),
        (cfg.data.format == "synthetic" or cfg.data.path, f"data.path must name the {cfg.data.format} data"),
        (cfg.data.format != "criteo" or cfg.data.eval_path, "data.eval_path must name the criteo eval files"),
        (cfg.data.format != "synthetic" or cfg.eval.examples is not None, "eval.examples must be set for synthetic data"),
        (cfg.data.format != "synthetic" or (cfg.eval.examples or 0) <= MAX_SYNTHETIC_EVAL,
         f"eval.examples must be at most {MAX_SYNTHETIC_EVAL} for synthetic data (its eval set is made in memory), "
         f"got {cfg.eval.examples}"),
        (cfg.data.format != "tfrecord" or not cfg.data.skip_bad_rows,
         "data.skip_bad_rows applies to the text formats (criteo, movielens); TFRecord parse errors always stop"),
        (not (cfg.data.skip_bad_rows and cfg.data.format == "movielens_sequences"),
         "data.skip_bad_rows is not supported with movielens_sequences: a user's sequence with a line left out "
         "would be another sequence; fix the line the error names"),
        (not cfg.data.validation or cfg.data.format in ("movielens", "movielens_sequences"),
         "data.validation applies to the movielens and movielens_sequences formats (they split by time themselves)"),
        (all(f.type in FEATURE_TYPES for f in cfg.data.features),
         f"data.features: each type must be one of {', '.join(FEATURE_TYPES)}"),
        (all(f.names is None or len(f.names) == f.length for f in cfg.data.features),
         "data.features: length must be > 0 and names, if given, one per value"),
        (cfg.train.optimizer in OPTIMIZERS, f"train.optimizer must be one of {', '.join(OPTIMIZERS)}, "
                                            f"got {cfg.train.optimizer!r}"),
        (cfg.train.cpu_allocator in CPU_ALLOCATORS, f"train.cpu_allocator must be one of "
                                                    f"{', '.join(CPU_ALLOCATORS)}, got {cfg.train.cpu_allocator!r}"),
        (not w & (w - 1), f"model.admit_sketch_width must be a power of two in [2^12, 2^26], got {w}"),
        (cfg.model.eviction.cap_policy in ("lfu", "lru"), "model.eviction.cap_policy must be lfu or lru"),
        (not cfg.train.evict_every_steps or cfg.model.eviction.any,
         "train.evict_every_steps is set but model.eviction has no rule (after_steps, min_freq, l2_below, "
         "max_rows): nothing would be evicted"),
        (not cfg.model.eviction.any or cfg.train.evict_every_steps,
         "model.eviction has rules but train.evict_every_steps is not set: they would never run"),
        (cfg.data.format not in ("movielens", "synthetic") or cfg.data.eval_path is None,
         f"data.eval_path does not apply to {cfg.data.format} data (its eval set is "
         f"{'each user’s latest ratings' if cfg.data.format == 'movielens' else 'generated'})"),
        (cfg.pipeline.fuse_dense or not cfg.pipeline.defer_push,
         "pipeline.defer_push needs pipeline.fuse_dense: true (the deferred push is part of the fused one)"),
        (cfg.cluster.protocol in ("grpc", "grpc+verbs", "grpc+mpi", "grpc+gdr"),
         f"cluster.protocol must be grpc, grpc+verbs, grpc+mpi or grpc+gdr, got {cfg.cluster.protocol!r}"),
        (cfg.model.hashing_trick or cfg.model.hashing_buckets == ModelConfig.hashing_buckets,
         "model.hashing_buckets applies with model.hashing_trick: true (the hashing-trick baseline) only"),
        (not cfg.model.hashing_trick or cfg.model.hashing_buckets * (cfg.model.embedding_dim + 1) <= MAX_STOCK_VALUES,
         f"model.hashing_buckets ({cfg.model.hashing_buckets}) x (model.embedding_dim + 1) must be at most "
         f"{MAX_STOCK_VALUES} values per feature's variable: lower model.hashing_buckets"),
        (not cfg.model.hashing_trick or cfg.model.name in ("deepfm", "wdl", "dcn_v2"),
         f"model.hashing_trick is a baseline of deepfm, wdl and dcn_v2, not {cfg.model.name}"),
        (not cfg.model.hashing_trick or not (cfg.pipeline.enabled or cfg.model.eviction.any
                                             or cfg.train.delta_every_secs or cfg.model.admit_min_count > 1),
         "model.hashing_trick has no tfps table: pipeline.enabled, model.eviction, train.delta_every_secs and "
         "model.admit_min_count do not apply to it"),
        (cfg.cluster.emulated_bandwidth_gbit is None or cfg.cluster.netns,
         "cluster.emulated_bandwidth_gbit needs cluster.netns: true (tbf shapes each task's own link, which only "
         "emulated hosts have)"),
        (not cfg.cluster.netns or cfg.cluster.host == ClusterSection.host,
         f"cluster.host does not apply with cluster.netns (each task gets an address of its own inside its "
         f"namespace), got {cfg.cluster.host!r}"),
    ]
    for ok, msg in checks:
        if not ok:
            raise ConfigError(msg)


def check_model_dir(path):
    """Checks that model_dir can be written: files in it, or (when it does not exist yet: it is
    made when the run starts, so that a refused command leaves nothing) its nearest existing parent
    (ConfigError)."""
    if path is None:
        return
    where = os.path.abspath(path)
    while not os.path.exists(where) and os.path.dirname(where) != where:
        where = os.path.dirname(where)
    try:
        if not os.path.isdir(where):
            raise NotADirectoryError(20, f"{where} is not a directory")
        with tempfile.NamedTemporaryFile(dir=where, prefix=".tfps_write_check_"):
            pass
    except OSError as e:
        raise ConfigError(f"model_dir {path!r} is not writable: {e.strerror or e}") from None

