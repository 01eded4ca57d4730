#include "kernels/core/feature_tag.h"

#include "kernels/core/hash.h"

namespace tfps {
namespace core {

int64_t TaggedKey(int64_t tag, int64_t id) {
  const int64_t low =
      (id >= 0 && id <= kIdMask) ? id : static_cast<int64_t>(Mix64(static_cast<uint64_t>(id)) & kIdMask);
  return (tag << kTagShift) | low;
}

void TagKeys(const int64_t* ids, int64_t n, const int64_t* tags, int64_t width, int64_t* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = TaggedKey(tags[i % width], ids[i]);
}

}  // namespace core
}  // namespace tfps
