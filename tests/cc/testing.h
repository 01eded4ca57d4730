// The C++ tests on GoogleTest (Debian's libgtest-dev, gtest_main): each file's tests are a suite
// named after the file. CHECK and CHECK_EQ are GoogleTest expectations (EXPECT_*), so that the
// helpers that return values can check too; a failed one fails its test.
#ifndef TFPS_TESTS_CC_TESTING_H_
#define TFPS_TESTS_CC_TESTING_H_

#include <gtest/gtest.h>

namespace tfps_test {
// Under ThreadSanitizer (10x slower) the longest tests run fewer rounds: races need the threads
// to overlap, not many rounds. The ASan+UBSan run keeps every test at full size.
#if defined(__SANITIZE_THREAD__)
inline constexpr bool kUnderTsan = true;
#else
inline constexpr bool kUnderTsan = false;
#endif
}  // namespace tfps_test

#define CHECK(cond) \
  do {                \
    EXPECT_TRUE(cond); \
  } while (0)
#define CHECK_EQ(a, b) \
  do {                 \
    EXPECT_EQ(a, b);   \
  } while (0)

// A test with no concurrency of its own to race-check, too slow under TSan to repeat there: the
// TSan binary skips it, saying why (the ASan+UBSan binary runs it).
#define TEST_ASAN_ONLY(suite, name, why)                                            \
  static void name##Body();                                                         \
  TEST(suite, name) {                                                               \
    if (::tfps_test::kUnderTsan) GTEST_SKIP() << "run under ASan+UBSan only: " << why; \
    name##Body();                                                                   \
  }                                                                                 \
  static void name##Body()

#endif  // TFPS_TESTS_CC_TESTING_H_
