// Kernel of TfpsCheckRows: names the first malformed row of a batch (file, line, reason).
#include <string>

#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"

namespace tfps {
namespace {

using tensorflow::OpKernel;
using tensorflow::OpKernelConstruction;
using tensorflow::OpKernelContext;
using tensorflow::Tensor;
namespace errors = tensorflow::errors;

class CheckRowsOp : public OpKernel {
 public:
  explicit CheckRowsOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("reader", &reader_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("hint", &hint_));
    if (!hint_.empty()) hint_ = " (" + hint_ + ")";
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& ok = ctx->input(0);
    const Tensor& files = ctx->input(1);
    const Tensor& lines = ctx->input(2);
    const Tensor& reasons = ctx->input(3);
    const int64_t n = ok.NumElements();
    OP_REQUIRES(ctx, ok.dims() == 1 && files.NumElements() == n && lines.NumElements() == n &&
                         reasons.NumElements() == n,
                errors::InvalidArgument("TfpsCheckRows: ok, files, lines and reasons must be [B] vectors"));
    const auto good = ok.flat<bool>();
    for (int64_t i = 0; i < n; ++i) {
      OP_REQUIRES(ctx, good(i),
                  errors::InvalidArgument(reader_, ": ", std::string(files.flat<tensorflow::tstring>()(i)), " line ",
                                          lines.flat<int64_t>()(i), ": ",
                                          std::string(reasons.flat<tensorflow::tstring>()(i)), hint_));
    }
    Tensor* all_ok = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, tensorflow::TensorShape({}), &all_ok));
    all_ok->scalar<bool>()() = true;
  }

 private:
  std::string reader_;
  std::string hint_;
};

REGISTER_KERNEL_BUILDER(Name("TfpsCheckRows").Device(tensorflow::DEVICE_CPU), CheckRowsOp);

}  // namespace
}  // namespace tfps
