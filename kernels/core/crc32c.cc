#include "kernels/core/crc32c.h"

#include <cstring>

namespace tfps {
namespace core {
namespace crc32c {
namespace {

struct Table {
  uint32_t t[256];
  Table() {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82f63b78u : c >> 1;
      t[i] = c;
    }
  }
};

uint32_t ExtendTable(uint32_t crc, const char* data, size_t n) {
  static const Table table;
  const unsigned char* p = reinterpret_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) crc = table.t[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
  return crc;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) uint32_t ExtendHardware(uint32_t crc, const char* data, size_t n) {
  uint64_t c = crc;
  while (n >= 8) {
    uint64_t word;
    std::memcpy(&word, data, 8);
    c = __builtin_ia32_crc32di(c, word);
    data += 8;
    n -= 8;
  }
  uint32_t c32 = static_cast<uint32_t>(c);
  while (n > 0) {
    c32 = __builtin_ia32_crc32qi(c32, static_cast<unsigned char>(*data));
    ++data;
    --n;
  }
  return c32;
}
#endif

}  // namespace

uint32_t Extend(uint32_t crc, const char* data, size_t n) {
  crc = ~crc;
#if defined(__x86_64__)
  static const bool hardware = __builtin_cpu_supports("sse4.2");
  crc = hardware ? ExtendHardware(crc, data, n) : ExtendTable(crc, data, n);
#else
  crc = ExtendTable(crc, data, n);
#endif
  return ~crc;
}

}  // namespace crc32c
}  // namespace core
}  // namespace tfps
