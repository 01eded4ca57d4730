"""The range of every numeric field of the job config (BOUNDS) and the limits they come from:
data only (no TensorFlow), read by tfps.config's check_bounds."""
import dataclasses


@dataclasses.dataclass(frozen=True)
class Range:
    """The values a numeric field may take: lo .. hi, each end included unless open. NaN is in
    no range."""
    lo: float
    hi: float
    lo_open: bool = False
    hi_open: bool = False

    def __contains__(self, v):
        return (self.lo < v if self.lo_open else self.lo <= v) and (v < self.hi if self.hi_open else v <= self.hi)

    def __str__(self):
        def text(x):
            return str(int(x)) if float(x).is_integer() and abs(x) < 1e16 else f"{x:g}"
        return f"{'(' if self.lo_open else '['}{text(self.lo)}, {text(self.hi)}{')' if self.hi_open else ']'}"


MAX_DIM = 1 << 24          # kernels/core/config.h kMaxDim: a table's widest row (deepfm and wdl add one column)
MIN_SKETCH_WIDTH, MAX_SKETCH_WIDTH = 1 << 12, 1 << 26   # kMinSketchWidth, kMaxSketchWidth there
MAX_STOCK_VALUES = 1 << 30  # model.hashing_trick: floats in one feature's variable (as a dense kernel's cap: 4 GiB)
MAX_SHARDS = 1024          # tables per feature: each shard adds ops (512 build in 15 s, 70000 in many minutes;
                           # the partition op's own limit is 65536), and no placement needs more
MAX_STEPS = 2**32 - 1      # a row records its last step and update count as uint32
MAX_BATCH = 1 << 20        # rows (samples) of one batch
MAX_SECS = 365 * 86400     # periods and timeouts in seconds
MAX_SEED = 2**31 - 1
MAX_FLOAT32 = 3.4028234663852886e38   # hyper-parameters become float32 attributes
MIN_FLOAT32 = 1.1754943508222875e-38  # the smallest normal float32: a positive one below it is 0 or denormal
MIN_CAP_MIB, MAX_CAP_MIB = 64, 1 << 24   # cluster.memory_cap_mib: below 64 MiB no task starts (a new interpreter
                                         # alone is ~10 MiB; a PS's gRPC server and threads ~50 more); 16 TiB
MAX_SYNTHETIC_EVAL = 10**7   # the synthetic eval set is made in memory (about 270 bytes an example)

# The range of every numeric field (list fields: of each item; data.features.length: of each
# feature's). tests/test_config.py checks that no numeric field is missing here.
BOUNDS = {
    "data.num_dense": Range(0, 4096),
    "data.num_categorical": Range(1, 1024),
    "data.vocab_min": Range(1, 1 << 24),
    "data.vocab_max": Range(1, 1 << 24),
    "data.zipf": Range(0, 10),
    "data.weight_scale": Range(0, 100),
    "data.factor_dim": Range(0, 64),
    "data.factor_scale": Range(0, 100),
    "data.num_interacting": Range(0, 1024),
    "data.rank_scale": Range(0, 1e12, lo_open=True),
    "data.bias": Range(-100, 100),
    "data.seed": Range(0, MAX_SEED),
    "data.eval_fraction": Range(0, 1, lo_open=True, hi_open=True),
    "data.window": Range(1, 1024),
    "data.history_len": Range(0, 4096),
    "data.realtime_len": Range(0, 4096),
    "data.max_tokens": Range(1, 1 << 22),
    "data.features.length": Range(1, 4096),
    "model.embedding_dim": Range(1, MAX_DIM - 1),
    "model.hidden_units": Range(1, 1 << 16),
    "model.num_shards": Range(1, MAX_SHARDS),
    "model.hashing_buckets": Range(1, 1 << 29),
    "model.initializer_stddev": Range(0, 100),
    "model.admit_min_count": Range(1, 65535),          # the admission sketch counts in 16 bits
    "model.admit_sketch_width": Range(MIN_SKETCH_WIDTH, MAX_SKETCH_WIDTH),
    "model.eviction.after_steps": Range(0, MAX_STEPS),
    "model.eviction.min_freq": Range(0, MAX_STEPS),
    "model.eviction.l2_below": Range(0, MAX_FLOAT32),
    "model.eviction.max_rows": Range(0, 1 << 40),
    "model.cross_layers": Range(0, 64),
    "model.d_model": Range(1, 4096),
    "model.heads": Range(1, 64),
    "model.blocks": Range(0, 64),
    "train.steps": Range(1, MAX_STEPS),
    "train.batch_size": Range(1, MAX_BATCH),
    "train.learning_rate": Range(MIN_FLOAT32, 1e4),
    "train.adagrad.initial_accumulator_value": Range(MIN_FLOAT32, MAX_FLOAT32),
    "train.adam.beta1": Range(0, 1, hi_open=True),
    "train.adam.beta2": Range(0, 1, hi_open=True),
    "train.adam.epsilon": Range(MIN_FLOAT32, 1),
    "train.ftrl.learning_rate_power": Range(-10, 0),
    "train.ftrl.initial_accumulator_value": Range(MIN_FLOAT32, MAX_FLOAT32),
    "train.ftrl.l1_regularization_strength": Range(0, MAX_FLOAT32),
    "train.ftrl.l2_regularization_strength": Range(0, MAX_FLOAT32),
    "train.ftrl.beta": Range(0, MAX_FLOAT32),
    "train.log_every_steps": Range(1, MAX_STEPS),
    "train.save_checkpoints_steps": Range(1, MAX_STEPS),
    "train.save_checkpoints_secs": Range(1, MAX_SECS),
    "train.keep_checkpoint_max": Range(0, 1 << 20),    # 0: keep every checkpoint (TF's Saver)
    "train.delta_every_secs": Range(0, MAX_SECS, lo_open=True),
    "train.evict_every_steps": Range(1, MAX_STEPS),
    "train.seed": Range(0, MAX_SEED),
    "eval.examples": Range(1, 1 << 40),                # synthetic data: at most MAX_SYNTHETIC_EVAL
    "eval.batch_size": Range(1, MAX_BATCH),
    "eval.throttle_secs": Range(0, MAX_SECS),
    "cluster.peer_timeout_secs": Range(0, MAX_SECS, lo_open=True),
    "cluster.emulated_latency_ms": Range(0, 1000),
    "cluster.emulated_bandwidth_gbit": Range(0.001, 1000),   # 1 Mbit/s .. 1 Tbit/s (tbf's rate)
    **{f"cluster.memory_cap_mib.{job}": Range(MIN_CAP_MIB, MAX_CAP_MIB)
       for job in ("ps", "chief", "worker", "evaluator")},
    "pipeline.depth": Range(1, 8),
}
MAX_HIDDEN_LAYERS = 64
