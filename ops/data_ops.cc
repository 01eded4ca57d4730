// REGISTER_OP, shape function and docs of the input-checking op of the data readers.
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace tfps {

REGISTER_OP("TfpsCheckRows")
    .Input("ok: bool")
    .Input("files: string")
    .Input("lines: int64")
    .Input("reasons: string")
    .Output("all_ok: bool")
    .Attr("reader: string")
    .Attr("hint: string = ''")
    .SetIsStateful()  // it raises: never pruned or folded away
    .SetShapeFn(tensorflow::shape_inference::ScalarShape)
    .Doc(R"doc(
A reader's rows of one batch: ok [B] whether each parsed, and for each its file [B], line
number [B] and what is wrong with it [B]. Fails with InvalidArgument "READER: FILE line N:
REASON (HINT)" for the first row that is not ok (the whole path and reason, untruncated; the
hint only when not empty, e.g. how to skip such rows); all_ok is true otherwise.
)doc");

}  // namespace tfps
