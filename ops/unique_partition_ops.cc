// REGISTER_OP, shape functions and docs of the fused unique + partition ops.
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace tfps {
namespace {

using tensorflow::Status;
using tensorflow::shape_inference::InferenceContext;
using tensorflow::shape_inference::ShapeHandle;

Status UniquePartitionShape(InferenceContext* c) {
  ShapeHandle ids;
  TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 1, &ids));
  int64_t p = 0;
  TF_RETURN_IF_ERROR(c->GetAttr("num_partitions", &p));
  c->set_output(0, c->Vector(InferenceContext::kUnknownDim));
  c->set_output(1, c->Vector(c->Dim(ids, 0)));
  c->set_output(2, c->Vector(p >= 1 ? p + 1 : InferenceContext::kUnknownDim));
  if (c->num_outputs() > 3) c->set_output(3, c->Vector(InferenceContext::kUnknownDim));
  return tensorflow::OkStatus();
}

}  // namespace

constexpr char kDoc[] = R"doc(
Deduplicates ids and groups the distinct ids by partition, in one pass.

ids: int64 [N].
unique_ids: int64 [U], grouped by partition: partition p owns
  unique_ids[offsets[p]:offsets[p+1]]; within a partition, ids in order of first occurrence.
inverse: out_idx [N], unique_ids[inverse] == ids.
offsets: int64 [num_partitions + 1].
strategy: mod: partition = floormod(id, num_partitions); hash: partition =
  ((splitmix64(id ^ 0xD6E8FEB86659FD93) >> 32) * num_partitions) >> 32, which spreads ids
  sharing a stride evenly.
)doc";

REGISTER_OP("TfpsUniquePartition")
    .Input("ids: int64")
    .Output("unique_ids: int64")
    .Output("inverse: out_idx")
    .Output("offsets: int64")
    .Attr("num_partitions: int")
    .Attr("strategy: {'mod', 'hash'} = 'mod'")
    .Attr("out_idx: {int32, int64} = DT_INT32")
    .SetShapeFn(UniquePartitionShape)
    .Doc(kDoc);

constexpr char kDocWithCounts[] = R"doc(
TfpsUniquePartition plus counts: int32 [U], the occurrences of each unique id in ids
(for admission by frequency). Other inputs, outputs and attrs as TfpsUniquePartition.
)doc";

REGISTER_OP("TfpsUniquePartitionWithCounts")
    .Input("ids: int64")
    .Output("unique_ids: int64")
    .Output("inverse: out_idx")
    .Output("offsets: int64")
    .Output("counts: int32")
    .Attr("num_partitions: int")
    .Attr("strategy: {'mod', 'hash'} = 'mod'")
    .Attr("out_idx: {int32, int64} = DT_INT32")
    .SetShapeFn(UniquePartitionShape)
    .Doc(kDocWithCounts);

}  // namespace tfps

namespace tfps {

REGISTER_OP("TfpsFeatureTag")
    .Input("ids: int64")
    .Input("tags: int64")
    .Output("keys: int64")
    .SetShapeFn(tensorflow::shape_inference::UnchangedShape)
    .Doc(R"doc(
Keys of features in a table shared by several features (table merging).

tags: a scalar (every id has that tag) or a vector [F] matching the last dim of ids
  (ids[..., f] gets tags[f]); each tag in 1 .. 32767.
keys = (tag << 48) | id            for 0 <= id < 2^48 (exact: no collision, id recoverable);
keys = (tag << 48) | (splitmix64(id) & (2^48 - 1))   for other ids (negative, or >= 2^48):
  such a key collides with another key of the same feature with probability 2^-48 per
  pair, and never with another feature's keys (a different tag).
)doc");

}  // namespace tfps
