// A merged table's keys: the id of a feature tagged `tag` becomes (tag << 48) | its low 48 bits,
// so that the features sharing one physical table never share a key (tfps.ops.feature_tag; the
// Python side reads a key back with feature_untag).
#ifndef TFPS_KERNELS_CORE_FEATURE_TAG_H_
#define TFPS_KERNELS_CORE_FEATURE_TAG_H_

#include <cstdint>

namespace tfps {
namespace core {

constexpr int kTagShift = 48;
constexpr int64_t kIdMask = (int64_t{1} << kTagShift) - 1;
constexpr int64_t kMaxTag = (int64_t{1} << 15) - 1;   // tags 1 .. 32767: a key stays positive

// Whether `tag` can tag a feature (1 .. kMaxTag).
inline bool ValidTag(int64_t tag) { return tag >= 1 && tag <= kMaxTag; }

// The key of `id` in the feature tagged `tag` (ValidTag): an id in [0, 2^48) is kept exactly (no
// two ids of a feature share a key); any other id is mixed (Mix64) into 48 bits.
int64_t TaggedKey(int64_t tag, int64_t id);

// out[i] = TaggedKey(tags[i % width], ids[i]) for i < n: tags holds one tag per feature, the
// features the last dim of ids (width 1: one tag for all).
void TagKeys(const int64_t* ids, int64_t n, const int64_t* tags, int64_t width, int64_t* out);

}  // namespace core
}  // namespace tfps

#endif  // TFPS_KERNELS_CORE_FEATURE_TAG_H_
