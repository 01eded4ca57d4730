// Whether the machine can give a table more memory: a table that grows past what the machine
// has would otherwise be killed by the kernel's OOM killer (the arena's mapping is only reserved
// address space until its rows are written), taking the process and its unsaved work with it.
// With the guard, the growth that would leave less than kMemoryReserveFraction of the machine's
// memory available is refused (std::bad_alloc: the kernels turn it into ResourceExhausted and
// the table is as it was).
//
// Thread-safe. The machine's available memory (/proc/meminfo's MemAvailable) is read again once
// kMemoryRecheckBytes have been granted since the last reading, so a call costs an atomic add.
#ifndef TFPS_KERNELS_CORE_MEMORY_GUARD_H_
#define TFPS_KERNELS_CORE_MEMORY_GUARD_H_

#include <cstdint>

namespace tfps {
namespace core {

// True when `bytes` more can be used and kMemoryReserveFraction of the machine's memory still be
// available (counted as granted when true). True when /proc/meminfo cannot be read.
bool MemoryAvailableFor(int64_t bytes);

}  // namespace core
}  // namespace tfps

#endif  // TFPS_KERNELS_CORE_MEMORY_GUARD_H_
