#include "kernels/session_threads.h"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/core/parallel.h"
#include "tensorflow/core/framework/device_base.h"

namespace tfps {
namespace {

std::vector<std::string> Split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, sep);) out.push_back(item);
  return out;
}

// The CPUs of a quota of `quota` microseconds per `period` (rounded up); 0 when unbounded.
int Cpus(long long quota, long long period) {
  if (quota <= 0 || period <= 0) return 0;
  return static_cast<int>((quota + period - 1) / period);
}

// The mount point (and the root it shows) of the cgroup hierarchy with controller `controller`
// (v1), or of cgroup2 (controller empty); "" when not mounted.
std::string MountOf(const std::string& controller, std::string* root) {
  std::ifstream in("/proc/self/mountinfo");
  for (std::string line; std::getline(in, line);) {
    const size_t dash = line.find(" - ");
    if (dash == std::string::npos) continue;
    const std::vector<std::string> head = Split(line.substr(0, dash), ' ');
    const std::vector<std::string> tail = Split(line.substr(dash + 3), ' ');
    if (head.size() < 5 || tail.size() < 3) continue;
    if (controller.empty() ? tail[0] == "cgroup2" : tail[0] == "cgroup") {
      *root = head[3];
      if (controller.empty()) return head[4];
      for (const std::string& option : Split(tail[2], ',')) {
        if (option == controller) return head[4];
      }
    }
  }
  return "";
}

// The directory of cgroup `path` (as /proc/self/cgroup names it) in the hierarchy with
// controller `controller` (v1), or in cgroup2 (controller empty); "" when not mounted.
std::string DirectoryOf(const std::string& controller, const std::string& path) {
  std::string root;
  std::string mount = MountOf(controller, &root);
  if (mount.empty()) return "";
  // A mount of a subtree (a container's): its root is the path's prefix.
  if (root != "/" && path.compare(0, root.size(), root) == 0) return mount + path.substr(root.size());
  return mount + path;
}

int ReadQuota() {
  std::ifstream groups("/proc/self/cgroup");
  for (std::string line; std::getline(groups, line);) {
    const size_t a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    if (controllers.empty()) {   // v2: cpu.max is "max PERIOD" or "QUOTA PERIOD"
      const std::string dir = DirectoryOf("", path);
      std::ifstream max(dir + "/cpu.max");
      std::string quota;
      long long period = 0;
      if (!dir.empty() && max >> quota >> period && quota != "max") return Cpus(std::stoll(quota), period);
      continue;
    }
    for (const std::string& c : Split(controllers, ',')) {
      if (c != "cpu") continue;
      const std::string dir = DirectoryOf("cpu", path);
      if (dir.empty()) return 0;
      long long quota = -1, period = 0;
      std::ifstream q(dir + "/cpu.cfs_quota_us"), p(dir + "/cpu.cfs_period_us");
      if (q >> quota && p >> period) return Cpus(quota, period);
      return 0;
    }
  }
  return 0;
}

}  // namespace

int CpuQuotaThreads() {
  static const int threads = [] {
    try {
      return ReadQuota();
    } catch (const std::exception&) {   // an unparsable quota file: no bound from it
      return 0;
    }
  }();
  return threads;
}

int SessionThreads(tensorflow::OpKernelContext* ctx) {
  const tensorflow::DeviceBase::CpuWorkerThreads* workers = ctx->device()->tensorflow_cpu_worker_threads();
  int threads = workers != nullptr ? workers->num_threads : 0;
  const int quota = CpuQuotaThreads();
  if (quota > 0 && (threads <= 0 || quota < threads)) threads = quota;
  return threads;
}

void WithSessionThreads(tensorflow::OpKernelContext* ctx, const std::function<void()>& fn) {
  core::WithThreads(SessionThreads(ctx), fn);
}

}  // namespace tfps
