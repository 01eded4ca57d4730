// A minimal test harness: TEST(name) registers a function, CHECK* fail loudly.
#ifndef TFPS_TESTS_CC_TEST_MAIN_H_
#define TFPS_TESTS_CC_TEST_MAIN_H_

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace tfps_test {
// Under ThreadSanitizer (10x slower) the longest tests run fewer rounds: races need the threads
// to overlap, not many rounds. The ASan+UBSan run keeps every test at full size.
#if defined(__SANITIZE_THREAD__)
inline constexpr bool kUnderTsan = true;
#else
inline constexpr bool kUnderTsan = false;
#endif

struct Test {
  std::string name;
  std::function<void()> fn;
  const char* asan_only;   // why the test runs in the ASan+UBSan binary only (nullptr: in both)
};
struct Registry {
  static std::vector<Test>& Get() {
    static std::vector<Test> tests;
    return tests;
  }
};
struct Register {
  Register(const char* name, std::function<void()> fn, const char* asan_only = nullptr) {
    Registry::Get().push_back({name, std::move(fn), asan_only});
  }
};
}  // namespace tfps_test

#define TEST(name)                                                  \
  static void name();                                               \
  static ::tfps_test::Register register_##name(#name, name);        \
  static void name()

// A test with no concurrency of its own to race-check, too slow under TSan to repeat there: the
// TSan binary lists it as run under ASan+UBSan only, with `why`.
#define TEST_ASAN_ONLY(name, why)                                   \
  static void name();                                               \
  static ::tfps_test::Register register_##name(#name, name, why);   \
  static void name()

#define CHECK(cond)                                                              \
  do {                                                                           \
    if (!(cond)) {                                                               \
      std::fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                              \
    }                                                                            \
  } while (0)

#define CHECK_EQ(a, b) CHECK((a) == (b))

#endif  // TFPS_TESTS_CC_TEST_MAIN_H_
