#include "kernels/core/tagged_index.h"

namespace tfps {
namespace core {

size_t TaggedIndex::CapacityFor(int64_t more) const {
  size_t capacity = slots_.size();
  while (static_cast<double>(size_ + more) > kMaxLoadFactor * static_cast<double>(capacity)) {
    capacity = static_cast<size_t>(static_cast<double>(capacity) * kIndexGrowth) + 1;
  }
  return capacity;
}

}  // namespace core
}  // namespace tfps
