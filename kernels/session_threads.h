// The thread budget of an op's table work: the session's intra-op pool (TensorFlow sizes it from
// intra_op_parallelism_threads, else from the CPUs the process may run on), bounded by the
// process's cgroup CPU quota (cgroup v1 cpu.cfs_quota_us / cfs_period_us, or v2 cpu.max), which
// TensorFlow does not read. The kernels run their core calls inside core::WithThreads of it, so
// the table's TBB threads never outnumber the threads the session was given.
#ifndef TFPS_KERNELS_SESSION_THREADS_H_
#define TFPS_KERNELS_SESSION_THREADS_H_

#include <functional>

#include "tensorflow/core/framework/op_kernel.h"

namespace tfps {

// The CPUs the process's cgroup quota allows, rounded up (0: no quota, or none found). Read once.
int CpuQuotaThreads();

// min(the op's device worker threads, CpuQuotaThreads()); 0 when neither is known.
int SessionThreads(tensorflow::OpKernelContext* ctx);

// Runs fn() within SessionThreads(ctx) threads (core::WithThreads).
void WithSessionThreads(tensorflow::OpKernelContext* ctx, const std::function<void()>& fn);

}  // namespace tfps

#endif  // TFPS_KERNELS_SESSION_THREADS_H_
