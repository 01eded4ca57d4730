// REGISTER_OP, shape function and docs of the checkpoint check op.
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace tfps {

REGISTER_OP("TfpsCheckTables")
    .Input("prefix: string")
    .Output("ok: bool")
    .Attr("names: list(string) >= 1")
    .Attr("dims: list(int) >= 1")
    .SetIsStateful()
    .SetShapeFn(tensorflow::shape_inference::ScalarShape)
    .Doc(R"doc(
Checks, from the index of the checkpoint `prefix` alone, that it can restore every table
names[i] exactly: all parts NAME-{keys,values,slots,freq,last_step,slot_init} present, values
of width dims[i], parts of one table of one length. Fails with InvalidArgument naming every table
that does not fit; ok is true otherwise. A Saver's table restores wait for it, so that a restore
that fails on one table has changed none.
)doc");

}  // namespace tfps
