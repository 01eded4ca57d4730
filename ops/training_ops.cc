// REGISTER_OP, shape functions and docs of the fused sparse-apply ops on tables.
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace tfps {
namespace {

using tensorflow::Status;
using tensorflow::shape_inference::InferenceContext;
using tensorflow::shape_inference::ShapeHandle;

Status ApplyShape(InferenceContext* c) {
  ShapeHandle keys, grads, unused;
  TF_RETURN_IF_ERROR(c->WithRank(c->input(1), 1, &keys));
  TF_RETURN_IF_ERROR(c->WithRank(c->input(2), 2, &grads));
  TF_RETURN_IF_ERROR(c->Merge(c->Vector(c->Dim(keys, 0)), c->Vector(c->Dim(grads, 0)), &unused));
  for (int i = 3; i < c->num_inputs(); ++i) TF_RETURN_IF_ERROR(c->WithRank(c->input(i), 0, &unused));
  return tensorflow::OkStatus();
}

}  // namespace

REGISTER_OP("TfpsTableApplyGradientDescent")
    .Input("table: resource")
    .Input("keys: int64")
    .Input("grads: float")
    .Input("lr: float")
    .Input("step: int64")
    .SetShapeFn(ApplyShape)
    .Doc(R"doc(
value -= lr * grad for each row of keys [N] (grads [N, dim]), in place under the
row's lock; sets last_step = step. Keys absent from the table are skipped.
Duplicate keys are applied one after another.
)doc");

REGISTER_OP("TfpsTableApplyAdagrad")
    .Input("table: resource")
    .Input("keys: int64")
    .Input("grads: float")
    .Input("lr: float")
    .Input("step: int64")
    .Attr("initial_accumulator_value: float = 0.1")
    .SetShapeFn(ApplyShape)
    .Doc(R"doc(
Adagrad as tf.compat.v1.train.AdagradOptimizer: accum += grad^2;
value -= lr * grad / sqrt(accum). accum is slot 0 of the row (created at
initial_accumulator_value on first use). Sets last_step = step.
)doc");

REGISTER_OP("TfpsTableApplyAdam")
    .Input("table: resource")
    .Input("keys: int64")
    .Input("grads: float")
    .Input("lr: float")
    .Input("step: int64")
    .Input("beta1: float")
    .Input("beta2: float")
    .Input("epsilon: float")
    .SetShapeFn(ApplyShape)
    .Doc(R"doc(
Lazy Adam on the rows of keys [N]: only these rows move, and each row's bias correction
uses its own step count t = its number of updates so far + 1 (the row's freq + 1):
m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;
value -= lr sqrt(1 - b2^t) / (1 - b1^t) m / (sqrt(v) + epsilon).
For a row updated at every step this is tf.compat.v1.train.AdamOptimizer's update.
m and v are slots 0 and 1 of the row (starting at 0). Sets last_step = step.
)doc");

REGISTER_OP("TfpsTableApplyFtrl")
    .Input("table: resource")
    .Input("keys: int64")
    .Input("grads: float")
    .Input("lr: float")
    .Input("step: int64")
    .Input("l1: float")
    .Input("l2: float")
    .Input("lr_power: float")
    .Attr("initial_accumulator_value: float = 0.1")
    .SetShapeFn(ApplyShape)
    .Doc(R"doc(
FTRL-proximal as tf.compat.v1.train.FtrlOptimizer (ApplyFtrl): accum (slot 0, starting at
initial_accumulator_value) and linear (slot 1) live in the row. Sets last_step = step.
)doc");

}  // namespace tfps
