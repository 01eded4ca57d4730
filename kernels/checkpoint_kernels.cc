// Kernel of TfpsCheckTables: reads a checkpoint's index (tensor shapes only) with TF's own
// BundleReader and checks it against the tables a Saver is about to restore.
#include <string>
#include <vector>

#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/platform/env.h"
#include "tensorflow/core/util/tensor_bundle/tensor_bundle.h"

namespace tfps {
namespace {

using tensorflow::OpKernel;
using tensorflow::OpKernelConstruction;
using tensorflow::OpKernelContext;
using tensorflow::Tensor;
using tensorflow::TensorShape;
namespace errors = tensorflow::errors;

class CheckTablesOp : public OpKernel {
 public:
  explicit CheckTablesOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("names", &names_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("dims", &dims_));
    OP_REQUIRES(ctx, names_.size() == dims_.size(),
                errors::InvalidArgument("TfpsCheckTables: ", names_.size(), " names but ", dims_.size(), " dims"));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& prefix = ctx->input(0);
    OP_REQUIRES(ctx, tensorflow::TensorShapeUtils::IsScalar(prefix.shape()),
                errors::InvalidArgument("TfpsCheckTables: prefix must be a scalar"));
    const std::string path(prefix.scalar<tensorflow::tstring>()());
    tensorflow::BundleReader reader(tensorflow::Env::Default(), path);
    OP_REQUIRES_OK(ctx, reader.status());
    std::string problems;
    for (size_t t = 0; t < names_.size(); ++t) {
      const std::string& name = names_[t];
      std::vector<std::string> missing;
      TensorShape shape[6];
      const char* parts[6] = {"keys", "values", "slots", "freq", "last_step", "slot_init"};
      for (int p = 0; p < 6; ++p) {
        if (!reader.LookupTensorShape(name + "-" + parts[p], &shape[p]).ok()) missing.push_back(parts[p]);
      }
      std::string problem;
      if (missing.size() == 6) {
        problem = "is not in the checkpoint";
      } else if (!missing.empty()) {
        problem = "lacks " + missing[0] + (missing.size() > 1 ? " and more" : "") + " (a partly written checkpoint?)";
      } else if (shape[1].dims() != 2 || shape[1].dim_size(1) != dims_[t]) {
        problem = "has values of shape " + shape[1].DebugString() + ", the model asks for dim " + std::to_string(dims_[t]);
      } else {
        const int64_t n = shape[0].dim_size(0);
        const int64_t k = shape[5].dims() == 1 ? shape[5].dim_size(0) : -1;
        if (shape[1].dim_size(0) != n || shape[2].dims() != 2 || shape[2].dim_size(0) != n ||
            shape[2].dim_size(1) != k * dims_[t] || shape[3].dim_size(0) != n || shape[4].dim_size(0) != n) {
          problem = "has parts of inconsistent sizes";
        }
      }
      if (!problem.empty()) problems += (problems.empty() ? "" : "; ") + ("table '" + name + "' " + problem);
    }
    OP_REQUIRES(ctx, problems.empty(),
                errors::InvalidArgument("checkpoint ", path, " cannot restore these tables exactly, so none was "
                                        "restored: ", problems));
    Tensor* ok = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({}), &ok));
    ok->scalar<bool>()() = true;
  }

 private:
  std::vector<std::string> names_;
  std::vector<int64_t> dims_;
};

REGISTER_KERNEL_BUILDER(Name("TfpsCheckTables").Device(tensorflow::DEVICE_CPU), CheckTablesOp);

}  // namespace
}  // namespace tfps
