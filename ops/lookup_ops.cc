// REGISTER_OP, shape functions and docs of the lookup ops (kernels/lookup_kernels.cc).
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

Status RowsOutput(InferenceContext* c) {
  DimensionHandle n;
  TF_RETURN_IF_ERROR(KeysVector(c, 1, &n));
  c->set_output(0, c->Matrix(n, InferenceContext::kUnknownDim));
  return tensorflow::OkStatus();
}

}  // namespace

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

REGISTER_OP("TfpsSetPrefetchMode")
    .Input("table: resource")
    .Attr("mode: {'off', 'group', 'rolling'}")
    .Output("previous: string")
    .SetIsStateful()
    .SetShapeFn([](InferenceContext* c) {
      c->set_output(0, c->Scalar());
      return tensorflow::OkStatus();
    })
    .Doc(R"doc(
Sets how this table shard prefetches on its batch paths (lookup, find-or-insert,
sparse apply, assign, remove) once a shard's rows pass 512 KiB: 'rolling' (the default),
'group', or 'off'. Results never depend on it; benchmarks compare the modes. previous: the
mode it replaced.
)doc");

}  // namespace tfps
