// REGISTER_OP, shape functions and docs of the hash-table embedding ops.
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace tfps {
namespace {

using tensorflow::Status;
using tensorflow::shape_inference::DimensionHandle;
using tensorflow::shape_inference::InferenceContext;
using tensorflow::shape_inference::ShapeHandle;

Status KeysVector(InferenceContext* c, int input, DimensionHandle* n) {
  ShapeHandle keys;
  TF_RETURN_IF_ERROR(c->WithRank(c->input(input), 1, &keys));
  *n = c->Dim(keys, 0);
  return tensorflow::OkStatus();
}

// Outputs 0..5 of an export: keys [N], values [N, ?], slots [N, ?], freq [N], last_step [N],
// slot_init [?].
void SnapshotOutputs(InferenceContext* c) {
  DimensionHandle n = c->UnknownDim();
  c->set_output(0, c->Vector(n));
  c->set_output(1, c->Matrix(n, InferenceContext::kUnknownDim));
  c->set_output(2, c->Matrix(n, InferenceContext::kUnknownDim));
  c->set_output(3, c->Vector(n));
  c->set_output(4, c->Vector(n));
  c->set_output(5, c->Vector(InferenceContext::kUnknownDim));
}

Status RowsOutput(InferenceContext* c) {
  DimensionHandle n;
  TF_RETURN_IF_ERROR(KeysVector(c, 1, &n));
  c->set_output(0, c->Matrix(n, InferenceContext::kUnknownDim));
  return tensorflow::OkStatus();
}

}  // namespace

REGISTER_OP("TfpsTableHandle")
    .Output("table: resource")
    .Attr("container: string = ''")
    .Attr("shared_name: string = ''")
    .Attr("dim: int")
    .Attr("initializer: string = 'zeros'")
    .Attr("init_a: float = 0.0")
    .Attr("init_b: float = 0.0")
    .Attr("seed: int = 0")
    .Attr("admit_min_count: int = 1")
    .Attr("admit_sketch_width: int = 1048576")
    .Attr("shard: int = 0")
    .Attr("num_shards: int = 1")
    .SetIsStateful()
    .SetShapeFn(tensorflow::shape_inference::ScalarShape)
    .Doc(R"doc(
Handle of a hash-table embedding: int64 key -> float row of `dim` values plus
optimizer slots. The table is created on the first run (a later run finds it by
container/shared_name, like MutableHashTable) and grows with the keys it sees.

table: scalar resource handle.
dim: embedding width.
initializer: zeros | constant | uniform | normal | truncated_normal; the value of a
  new key is a pure function of (key, seed), see kernels/core/initializer.h.
init_a: constant value | minval | mean.
init_b: maxval | stddev.
admit_min_count: a key gets a row only once training lookups have seen it this many times
  (counted in a count-min sketch of fixed size, kernels/core/config.h, which never forgets
  and never under-counts); until then it reads as missing and its updates are dropped.
admit_sketch_width: counters per sketch row (a power of two, 4 rows of 16 bits: 8 MiB by
  default); false admissions stay rare while the keys pending at once are well under width/4.
shard, num_shards: this table holds the keys with floormod(key, num_shards) == shard;
  imports refuse other keys. A table that exists under shared_name with another shard
  assignment is InvalidArgument.
)doc");

REGISTER_OP("TfpsTableFind")
    .Input("table: resource")
    .Input("keys: int64")
    .Input("counts: int32")
    .Output("values: float")
    .Attr("insert: bool = true")
    .Attr("missing_zeros: bool = false")
    .SetShapeFn(RowsOutput)
    .Doc(R"doc(
Rows of `keys`: values [N, dim] for keys [N].

insert: true (training): a missing key gets a new, initialised row. false (serving): the table is unchanged and a missing key
  reads as its initializer value, or zeros with missing_zeros.
counts: empty, or [N] sightings of each key in the batch (for admission; empty: 1 each).
)doc");

REGISTER_OP("TfpsTableLookupUnique")
    .Input("table: resource")
    .Input("ids: int64")
    .Output("unique_ids: int64")
    .Output("inverse: int32")
    .Output("unique_values: float")
    .Attr("insert: bool = true")
    .Attr("missing_zeros: bool = false")
    .SetShapeFn([](InferenceContext* c) {
      DimensionHandle n;
      TF_RETURN_IF_ERROR(KeysVector(c, 1, &n));
      c->set_output(0, c->Vector(InferenceContext::kUnknownDim));
      c->set_output(1, c->Vector(n));
      c->set_output(2, c->Matrix(InferenceContext::kUnknownDim, InferenceContext::kUnknownDim));
      return tensorflow::OkStatus();
    })
    .Doc(R"doc(
Deduplicates ids [N] and probes the table once per distinct id.

unique_ids: int64 [U], distinct ids (see kernels/core/unique.h for the order).
inverse: int32 [N], unique_ids[inverse] == ids.
unique_values: float [U, dim], the row of each unique id; gather by `inverse`
  to get [N, dim]. Lookups never write existing rows (freq and last_step change
  only when an optimizer updates the row).
)doc");

REGISTER_OP("TfpsGatherRows")
    .Input("params: float")
    .Input("indices: int32")
    .Output("output: float")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle params, indices;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 2, &params));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(1), 1, &indices));
      c->set_output(0, c->Matrix(c->Dim(indices, 0), c->Dim(params, 1)));
      return tensorflow::OkStatus();
    })
    .Doc(R"doc(
output[i] = params[indices[i]]: tf.gather on axis 0 of a [U, D] float matrix, with
streaming stores for the large output. Out-of-range indices are InvalidArgument.

params: float [U, D].
indices: int32 [N].
output: float [N, D].
)doc");

REGISTER_OP("TfpsScatterAddRows")
    .Input("data: float")
    .Input("indices: int32")
    .Input("num_rows: int64")
    .Output("output: float")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle data, indices;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 2, &data));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(1), 1, &indices));
      DimensionHandle rows;
      TF_RETURN_IF_ERROR(c->MakeDimForScalarInput(2, &rows));
      c->set_output(0, c->Matrix(rows, c->Dim(data, 1)));
      return tensorflow::OkStatus();
    })
    .Doc(R"doc(
output[u] = sum of data[i] over i with indices[i] == u: the gradient of TfpsGatherRows
(tf.math.unsorted_segment_sum on rows), split over threads for large inputs.

data: float [N, D]. indices: int32 [N], each in [0, num_rows). output: float [num_rows, D].
)doc");

REGISTER_OP("TfpsTableAssign")
    .Input("table: resource")
    .Input("keys: int64")
    .Input("values: float")
    .SetShapeFn([](InferenceContext* c) {
      DimensionHandle n;
      TF_RETURN_IF_ERROR(KeysVector(c, 1, &n));
      ShapeHandle values;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(2), 2, &values));
      return tensorflow::OkStatus();
    })
    .Doc(R"doc(
Inserts or overwrites the values [N, dim] of keys [N]; slots of new rows start at
their init value, slots of existing rows are kept.
)doc");

REGISTER_OP("TfpsTableRemove")
    .Input("table: resource")
    .Input("keys: int64")
    .Output("removed: int64")
    .SetShapeFn([](InferenceContext* c) {
      DimensionHandle n;
      TF_RETURN_IF_ERROR(KeysVector(c, 1, &n));
      c->set_output(0, c->Scalar());
      return tensorflow::OkStatus();
    })
    .Doc(R"doc(
Removes keys [N] (absent keys are ignored); their rows return to the table's row arena.
removed: how many keys were present.
)doc");

REGISTER_OP("TfpsTableSize")
    .Input("table: resource")
    .Output("size: int64")
    .SetShapeFn(tensorflow::shape_inference::ScalarShape)
    .Doc("Number of keys in the table.");

REGISTER_OP("TfpsTableExport")
    .Input("table: resource")
    .Output("keys: int64")
    .Output("values: float")
    .Output("slots: float")
    .Output("freq: int64")
    .Output("last_step: int64")
    .Output("slot_init: float")
    .SetShapeFn([](InferenceContext* c) {
      SnapshotOutputs(c);
      return tensorflow::OkStatus();
    })
    .Doc(R"doc(
Every row: keys [N], values [N, dim], slots [N, k*dim], freq [N] (training updates
of the row), last_step [N] (global step of the last update),
and slot_init [k] (the value new slots start at). Each row is copied under its
shard lock, so value and slots of a key come from one moment.
)doc");

REGISTER_OP("TfpsTableImport")
    .Input("table: resource")
    .Input("keys: int64")
    .Input("values: float")
    .Input("slots: float")
    .Input("freq: int64")
    .Input("last_step: int64")
    .Input("slot_init: float")
    .SetShapeFn([](InferenceContext*) { return tensorflow::OkStatus(); })
    .Doc(R"doc(
Replaces the table's contents with what TfpsTableExport produced. Shapes are
checked against each other and against the table's dim (InvalidArgument names
the mismatch); the number of slots comes from slot_init.
)doc");

REGISTER_OP("TfpsTableInitialize")
    .Input("table: resource")
    .SetShapeFn([](InferenceContext*) { return tensorflow::OkStatus(); })
    .Doc(R"doc(
Marks a fresh table initialized (its rows come from the initializer as keys
arrive). A checkpoint import marks it too; until one of them runs,
TfpsTableIsInitialized is false, which is how a session's ready_op sees a table
that a restarted PS task re-created empty.
)doc");

REGISTER_OP("TfpsTableIsInitialized")
    .Input("table: resource")
    .Output("is_initialized: bool")
    .SetShapeFn(tensorflow::shape_inference::ScalarShape)
    .Doc("Whether TfpsTableInitialize or TfpsTableImport has run on this table.");

REGISTER_OP("TfpsTableEvict")
    .Input("table: resource")
    .Input("step: int64")
    .Output("evicted: int64")
    .Attr("evict_after_steps: int = -1")
    .Attr("evict_min_freq: int = -1")
    .Attr("evict_l2_below: float = -1.0")
    .Attr("max_rows: int = -1")
    .Attr("cap_policy: {'lfu', 'lru'} = 'lfu'")
    .SetShapeFn(tensorflow::shape_inference::ScalarShape)
    .Doc(R"doc(
Removes rows for online learning; their memory returns to the table's row arena. A rule < 0 is off;
a row goes if any rule selects it:
evict_after_steps: not updated for more than this many steps (step - last_step).
evict_min_freq: fewer training updates than this.
evict_l2_below: L2 norm of the value below this.
max_rows: then at most this many rows stay, dropping the least frequently (lfu) or least
  recently (lru) updated.
step: the current global step. evicted: rows removed.
)doc");

REGISTER_OP("TfpsTableExportDelta")
    .Input("table: resource")
    .Input("since_step: int64")
    .Output("keys: int64")
    .Output("values: float")
    .Output("slots: float")
    .Output("freq: int64")
    .Output("last_step: int64")
    .Output("slot_init: float")
    .Output("removed: int64")
    .Output("complete: bool")
    .SetShapeFn([](InferenceContext* c) {
      SnapshotOutputs(c);
      c->set_output(6, c->Vector(InferenceContext::kUnknownDim));
      c->set_output(7, c->Scalar());
      return tensorflow::OkStatus();
    })
    .Doc(R"doc(
An incremental checkpoint: the rows updated at or after since_step (as TfpsTableExport,
under the shard locks), and removed: the keys removed or evicted at or after since_step
(logged only after TfpsTableTrackRemoved); each shard's log is emptied as its rows are
copied, so no removal falls between two deltas. complete: the removed-keys log outgrew its
bound, so the delta holds every row instead and replaces the table when applied. Restore =
the full checkpoint, then each delta in order.
)doc");

REGISTER_OP("TfpsTableImportDelta")
    .Input("table: resource")
    .Input("keys: int64")
    .Input("values: float")
    .Input("slots: float")
    .Input("freq: int64")
    .Input("last_step: int64")
    .Input("slot_init: float")
    .Input("removed: int64")
    .Input("complete: bool")
    .SetShapeFn([](InferenceContext*) { return tensorflow::OkStatus(); })
    .Doc(R"doc(
Applies a TfpsTableExportDelta output: removes `removed`, then writes the rows (complete:
replaces the contents). Every key must belong to this shard (InvalidArgument otherwise).
)doc");

REGISTER_OP("TfpsTableTrackRemoved")
    .Input("table: resource")
    .Input("step: int64")
    .Attr("on: bool = true")
    .SetShapeFn([](InferenceContext*) { return tensorflow::OkStatus(); })
    .Doc(R"doc(
Starts (on) or stops logging removed and evicted keys for incremental checkpoints. Off by
default, so that a table without deltas keeps no log; stopping drops the log. step: the
current global step, the earliest stamp of a removal logged from now on (a delta carries the
removals stamped at or after its base step).
)doc");

REGISTER_OP("TfpsTableExportAdmission")
    .Input("table: resource")
    .Output("counts: int32")
    .SetShapeFn([](InferenceContext* c) {
      c->set_output(0, c->Vector(InferenceContext::kUnknownDim));
      return tensorflow::OkStatus();
    })
    .Doc(R"doc(
counts: the admission count-min sketch (sightings of keys not admitted yet), int32 [S], S = 0
when the table admits at once. Sketches of shards of one variable add up element-wise.
)doc");

REGISTER_OP("TfpsTableImportAdmission")
    .Input("table: resource")
    .Input("counts: int32")
    .SetShapeFn([](InferenceContext*) { return tensorflow::OkStatus(); })
    .Doc(R"doc(
Replaces the admission sketch with a TfpsTableExportAdmission output (counts clipped to
[0, 65535]; an empty one is accepted and changes nothing); a sketch of another size is
InvalidArgument.
)doc");

REGISTER_OP("TfpsSetPrefetchMode")
    .Attr("mode: {'off', 'group', 'rolling'}")
    .Output("previous: string")
    .SetIsStateful()
    .SetShapeFn([](InferenceContext* c) {
      c->set_output(0, c->Scalar());
      return tensorflow::OkStatus();
    })
    .Doc(R"doc(
Sets how every table of this process prefetches on its batch paths (lookup, find-or-insert,
sparse apply, assign, remove) once a shard's rows pass 512 KiB: 'rolling' (the default),
'group', or 'off'. Results never depend on it; benchmarks compare the modes. previous: the
mode it replaced.
)doc");

REGISTER_OP("TfpsTableMemorySplit")
    .Input("table: resource")
    .Output("split: int64")
    .SetShapeFn([](InferenceContext* c) {
      c->set_output(0, c->Vector(5));
      return tensorflow::OkStatus();
    })
    .Doc(R"doc(
split: int64 [5] = (index_bytes, row_bytes_in_use, meta_bytes, arena_slack_bytes, side_bytes),
where TfpsTableMemoryStats' bytes_reserved goes: the index (4-byte slots: row id and hash tag);
rows * row_bytes (key, values, optimizer slots and meta); of those, the 8 bytes of each row's
freq and last step; arena pages holding no row (freed rows, the last page's tail, live bits);
the admission sketch and removed-keys log.
)doc");

REGISTER_OP("TfpsTableMemoryStats")
    .Input("table: resource")
    .Output("stats: int64")
    .SetShapeFn([](InferenceContext* c) {
      c->set_output(0, c->Vector(6));
      return tensorflow::OkStatus();
    })
    .Doc(R"doc(
stats: int64 [6] = (rows, bytes_reserved, bytes_in_use, row_bytes, pending, removed_logged);
bytes count the row arenas (pages touched), the index, the admission sketch and the removed-keys log;
pending = keys seen but not admitted yet (estimated); removed_logged = keys in the log.
)doc");

}  // namespace tfps
