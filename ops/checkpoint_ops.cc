// REGISTER_OP, shape functions and docs of the checkpoint ops (kernels/checkpoint_kernels.cc).
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace tfps {
namespace {

using tensorflow::shape_inference::DimensionHandle;
using tensorflow::shape_inference::InferenceContext;

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

}  // namespace

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

REGISTER_OP("TfpsTableRestoreStage")
    .Input("table: resource")
    .Input("prefix: string")
    .Output("rows: int64")
    .Attr("table_name: string")
    .Attr("slice_bytes: int = 8388608")
    .SetIsStateful()
    .SetShapeFn(tensorflow::shape_inference::ScalarShape)
    .Doc(R"doc(
Builds this shard's contents from table `table_name` of the checkpoint `prefix`, saved by any
shard count (kernels/checkpoint_parts.h): only the parts that can hold its keys are read, in
slices of about slice_bytes, and their checksums checked; its rows are built aside, and the table is unchanged until
TfpsTableRestoreCommit. rows: the rows staged.
)doc");

REGISTER_OP("TfpsTableRestoreCommit")
    .Input("table: resource")
    .Input("staged: int64")
    .SetIsStateful()
    .SetShapeFn([](InferenceContext*) { return tensorflow::OkStatus(); })
    .Doc(R"doc(
Replaces the table's contents (and admission sketch) with what TfpsTableRestoreStage staged;
`staged` orders it after the stages of every shard. FailedPrecondition when nothing is staged.
)doc");

REGISTER_OP("TfpsTableApplyDelta")
    .Input("table: resource")
    .Input("prefix: string")
    .Attr("table_name: string")
    .SetIsStateful()
    .SetShapeFn([](InferenceContext*) { return tensorflow::OkStatus(); })
    .Doc(R"doc(
Applies this shard's share of table `table_name` in the delta at `prefix`, written by any shard
count (NAME-delta-part{p}-{keys, values, slots, freq, last_step, removed, complete, admission},
NAME-delta-parts, NAME-delta-slot_init): removals and rows of its own keys, or -- when a part
is complete -- its rows in place of the shard's contents; and the admission sketch.
)doc");

REGISTER_OP("TfpsReadColumn")
    .Input("prefix: string")
    .Output("out: dtype")
    .Attr("table_name: string")
    .Attr("column: string")
    .Attr("dtype: type")
    .SetIsStateful()
    .SetShapeFn(tensorflow::shape_inference::UnknownShape)
    .Doc(R"doc(
Column `column` (keys, values, slots, freq, last_step, removed, ...) of table `table_name`
(NAME, or NAME-delta for a delta) of the checkpoint `prefix`, its parts concatenated.
)doc");

REGISTER_OP("TfpsTableRows")
    .Input("checkpoint: string")
    .Input("deltas: string")
    .Output("keys: int64")
    .Output("values: float")
    .Output("slots: float")
    .Output("freq: int64")
    .Output("last_step: int64")
    .Output("admission: int32")
    .Output("slot_init: float")
    .Attr("table_name: string")
    .Attr("dim: int")
    .Attr("pad_rows: int = 0")
    .Attr("with_state: bool = true")
    .Attr("slice_bytes: int = 8388608")
    .SetIsStateful()
    .SetShapeFn([](InferenceContext* c) {
      int64_t dim = 0;
      TF_RETURN_IF_ERROR(c->GetAttr("dim", &dim));
      c->set_output(0, c->Vector(InferenceContext::kUnknownDim));
      c->set_output(1, c->Matrix(InferenceContext::kUnknownDim, dim));
      c->set_output(2, c->Matrix(InferenceContext::kUnknownDim, InferenceContext::kUnknownDim));
      for (int i = 3; i < 7; ++i) c->set_output(i, c->Vector(InferenceContext::kUnknownDim));
      return tensorflow::OkStatus();
    })
    .Doc(R"doc(
Every row of table `table_name` (values of width `dim`) at the cut made of the checkpoint
`checkpoint` and the chain of deltas `deltas` (in order, each NAME-delta-part{p}-*): the
checkpoint's parts (or those of the last complete delta), read in slices of about slice_bytes,
with each later delta's removals and rows. Only the outputs and the deltas' rows are held whole.
values has `pad_rows` zero rows first. Without with_state, slots [0, 0], freq, last_step and
admission are empty. slot_init: the optimizer slots' initial value.
)doc");

REGISTER_OP("TfpsCheckTables")
    .Input("prefix: string")
    .Output("ok: bool")
    .Attr("names: list(string) >= 1")
    .Attr("dims: list(int) >= 1")
    .SetIsStateful()
    .SetShapeFn(tensorflow::shape_inference::ScalarShape)
    .Doc(R"doc(
Checks, from the index of the checkpoint `prefix` (and each table's part count and slot_init),
that it can restore every table names[i] exactly: every part of it there
(kernels/checkpoint_parts.h), values of width dims[i], the columns of a part of one length. Fails with InvalidArgument naming every table
that does not fit; ok is true otherwise. A Saver's table restores wait for it, so that a restore
that fails on one table has changed none.
)doc");

}  // namespace tfps
