#include "kernels/core/removed_log.h"

namespace tfps {
namespace core {

bool RemovedLog::Take(int64_t since_step, std::vector<int64_t>* keys) {
  for (const auto& [key, stamp] : entries_) {
    if (stamp >= since_step) keys->push_back(key);
  }
  const bool overflowed = overflowed_;
  Clear();
  return overflowed;
}

void RemovedLog::Clear() {
  std::vector<std::pair<int64_t, int64_t>>().swap(entries_);
  overflowed_ = false;
}

}  // namespace core
}  // namespace tfps
