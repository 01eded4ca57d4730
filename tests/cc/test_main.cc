#include <chrono>

#include "tests/cc/test_main.h"

// Runs every registered test in order, printing each one's wall time (the sanitizer runs are
// part of `make test`'s budget, so where their time goes is shown as pytest's --durations does).
int main() {
  int n = 0;
  for (auto& t : tfps_test::Registry::Get()) {
    std::printf("[ RUN  ] %s\n", t.first.c_str());
    std::fflush(stdout);
    const auto start = std::chrono::steady_clock::now();
    t.second();
    const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
    std::printf("[  OK  ] %s %.2fs\n", t.first.c_str(), took.count());
    ++n;
  }
  std::printf("%d passed, 0 failed\n", n);
  return 0;
}
