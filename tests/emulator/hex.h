// Test helper: "0f 32" -> bytes. Spaces are ignored; anything else that is
// not a hex digit pair is a bug in the test and aborts.
#ifndef PVEMU_TESTS_EMULATOR_HEX_H_
#define PVEMU_TESTS_EMULATOR_HEX_H_

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

namespace pvemu::emulator::testing {

inline int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  std::abort();
}

inline std::vector<uint8_t> Hex(const std::string& text) {
  std::vector<uint8_t> out;
  std::string digits;
  for (char c : text) {
    if (c != ' ') digits.push_back(c);
  }
  if (digits.size() % 2 != 0) std::abort();
  for (size_t i = 0; i < digits.size(); i += 2) {
    out.push_back(static_cast<uint8_t>(HexDigit(digits[i]) * 16 +
                                       HexDigit(digits[i + 1])));
  }
  return out;
}

inline std::string ToHex(const uint8_t* bytes, size_t len) {
  static const char kDigits[] = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < len; ++i) {
    out.push_back(kDigits[bytes[i] >> 4]);
    out.push_back(kDigits[bytes[i] & 15]);
  }
  return out;
}

}  // namespace pvemu::emulator::testing

#endif  // PVEMU_TESTS_EMULATOR_HEX_H_
