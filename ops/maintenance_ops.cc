// REGISTER_OP, shape functions and docs of the table maintenance ops
// (kernels/maintenance_kernels.cc).
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
