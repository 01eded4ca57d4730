#include <chrono>

#include "tests/cc/test_main.h"

// Runs every registered test in order, printing each one's wall time (the sanitizer runs are
// part of `make test`'s budget, so where their time goes is shown as pytest's --durations does).
int main() {
  int n = 0, asan_only = 0;
  for (auto& t : tfps_test::Registry::Get()) {
    if (tfps_test::kUnderTsan && t.asan_only != nullptr) {
      std::printf("[ ASAN ] %s: run under ASan+UBSan only (%s)\n", t.name.c_str(), t.asan_only);
      ++asan_only;
      continue;
    }
    std::printf("[ RUN  ] %s\n", t.name.c_str());
    std::fflush(stdout);
    const auto start = std::chrono::steady_clock::now();
    t.fn();
    const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
    std::printf("[  OK  ] %s %.2fs\n", t.name.c_str(), took.count());
    ++n;
  }
  std::printf("%d passed, 0 failed", n);
  if (asan_only > 0) std::printf(", %d run under ASan+UBSan only", asan_only);
  std::printf("\n");
  return 0;
}
