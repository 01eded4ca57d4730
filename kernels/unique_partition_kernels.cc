// Kernels of TfpsUniquePartition(WithCounts): adapters to core::UniquePartition.
#include <cstring>
#include <new>
#include <vector>

#include "kernels/core/config.h"
#include "kernels/core/feature_tag.h"
#include "kernels/core/hash.h"
#include "kernels/core/unique.h"
#include "kernels/session_threads.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"

namespace tfps {
namespace {

using tensorflow::OpKernel;
using tensorflow::OpKernelConstruction;
using tensorflow::OpKernelContext;
using tensorflow::Tensor;
using tensorflow::TensorShape;
namespace errors = tensorflow::errors;

template <typename Index, bool kWithCounts>
class UniquePartitionOp : public OpKernel {
 public:
  explicit UniquePartitionOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("num_partitions", &num_partitions_));
    OP_REQUIRES(ctx, num_partitions_ >= 1 && num_partitions_ <= core::kMaxPartitions,
                errors::InvalidArgument(type_string(), ": num_partitions must be in [1, ", core::kMaxPartitions,
                                        "], got ", num_partitions_));
    std::string strategy;
    OP_REQUIRES_OK(ctx, ctx->GetAttr("strategy", &strategy));
    strategy_ = strategy == "hash" ? core::PartitionStrategy::kHash : core::PartitionStrategy::kMod;
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& ids = ctx->input(0);
    OP_REQUIRES(ctx, tensorflow::TensorShapeUtils::IsVector(ids.shape()),
                errors::InvalidArgument(type_string(), ": ids must be a vector, got ", ids.shape().DebugString()));
    const int64_t n = ids.dim_size(0);
    OP_REQUIRES(ctx, sizeof(Index) == 8 || n < (int64_t{1} << 31),
                errors::InvalidArgument(type_string(), ": ", n, " ids need out_idx=int64"));
    Tensor* inverse = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, TensorShape({n}), &inverse));
    std::vector<int64_t> uniq, offsets;
    std::vector<int32_t> counts;
    try {
      WithSessionThreads(ctx, [&] {
        core::UniquePartition(ids.flat<int64_t>().data(), n, num_partitions_, strategy_,
                              inverse->flat<Index>().data(), &uniq, &counts, &offsets);
      });
    } catch (const std::bad_alloc&) {
      ctx->SetStatus(errors::ResourceExhausted(type_string(), ": out of memory for ", n, " ids"));
      return;
    }
    const int64_t u = static_cast<int64_t>(uniq.size());
    Tensor *uniq_t = nullptr, *offsets_t = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({u}), &uniq_t));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(2, TensorShape({num_partitions_ + 1}), &offsets_t));
    if (u > 0) std::memcpy(uniq_t->flat<int64_t>().data(), uniq.data(), sizeof(int64_t) * u);
    std::memcpy(offsets_t->flat<int64_t>().data(), offsets.data(), sizeof(int64_t) * (num_partitions_ + 1));
    if (kWithCounts) {
      Tensor* counts_t = nullptr;
      OP_REQUIRES_OK(ctx, ctx->allocate_output(3, TensorShape({u}), &counts_t));
      if (u > 0) std::memcpy(counts_t->flat<int32_t>().data(), counts.data(), sizeof(int32_t) * u);
    }
  }

 private:
  int64_t num_partitions_ = 1;
  core::PartitionStrategy strategy_ = core::PartitionStrategy::kMod;
};

class FeatureTagOp : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    const Tensor& ids = ctx->input(0);
    const Tensor& tags = ctx->input(1);
    const int64_t width = tags.dims() == 0 ? 1 : tags.NumElements();
    OP_REQUIRES(ctx, tags.dims() == 0 || (tags.dims() == 1 && ids.dims() >= 1 && ids.dim_size(ids.dims() - 1) == width),
                errors::InvalidArgument("TfpsFeatureTag: tags must be a scalar or match the last dim of ids ",
                                        ids.shape().DebugString(), ", got ", tags.shape().DebugString()));
    const int64_t* tag = tags.flat<int64_t>().data();
    for (int64_t f = 0; f < width; ++f) {
      OP_REQUIRES(ctx, core::ValidTag(tag[f]),
                  errors::InvalidArgument("TfpsFeatureTag: tag must be in [1, ", core::kMaxTag, "], got ", tag[f]));
    }
    Tensor* keys = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, ids.shape(), &keys));
    core::TagKeys(ids.flat<int64_t>().data(), ids.NumElements(), tag, width, keys->flat<int64_t>().data());
  }
};

REGISTER_KERNEL_BUILDER(Name("TfpsFeatureTag").Device(tensorflow::DEVICE_CPU), FeatureTagOp);

#define TFPS_REGISTER(Index)                                                                    \
  REGISTER_KERNEL_BUILDER(Name("TfpsUniquePartition")                                           \
                              .Device(tensorflow::DEVICE_CPU)                                   \
                              .TypeConstraint<Index>("out_idx"),                                \
                          UniquePartitionOp<Index, false>);                                     \
  REGISTER_KERNEL_BUILDER(Name("TfpsUniquePartitionWithCounts")                                 \
                              .Device(tensorflow::DEVICE_CPU)                                   \
                              .TypeConstraint<Index>("out_idx"),                                \
                          UniquePartitionOp<Index, true>);
TFPS_REGISTER(int32_t)
TFPS_REGISTER(int64_t)
#undef TFPS_REGISTER

}  // namespace
}  // namespace tfps
