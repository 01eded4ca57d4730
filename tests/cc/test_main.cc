#include "tests/cc/test_main.h"

int main() {
  int n = 0;
  for (auto& t : tfps_test::Registry::Get()) {
    std::printf("[ RUN  ] %s\n", t.first.c_str());
    t.second();
    ++n;
  }
  std::printf("%d passed, 0 failed\n", n);
  return 0;
}
