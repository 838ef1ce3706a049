#include "client/hex.h"

#include "absl/strings/ascii.h"
#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "client/flags.h"

namespace pvemu::client {

absl::StatusOr<std::string> ParseHexBytes(absl::string_view text) {
  std::string bytes;
  int pending = -1;  // high nibble waiting for its low nibble
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (absl::ascii_isspace(static_cast<unsigned char>(c))) continue;
    if (c == '0' && i + 1 < text.size() && (text[i + 1] == 'x' || text[i + 1] == 'X') &&
        pending < 0) {
      ++i;  // an optional 0x before a group of digits
      continue;
    }
    int nibble;
    if (c >= '0' && c <= '9') {
      nibble = c - '0';
    } else if (c >= 'a' && c <= 'f') {
      nibble = c - 'a' + 10;
    } else if (c >= 'A' && c <= 'F') {
      nibble = c - 'A' + 10;
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "'", text, "': character ", i + 1, " ('", absl::string_view(&c, 1),
          "') is not a hex digit; write bytes like '0f 32'"));
    }
    if (pending < 0) {
      pending = nibble;
    } else {
      bytes.push_back(static_cast<char>(pending << 4 | nibble));
      pending = -1;
    }
  }
  if (pending >= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", text, "': odd number of hex digits; each byte is two digits"));
  }
  if (bytes.empty()) {
    return absl::InvalidArgumentError("no instruction bytes given");
  }
  // More than 15 is allowed here: the decoder reports the #GP an over-long
  // instruction raises. Far more is a mistake.
  if (bytes.size() > 64) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", text.substr(0, 40), "...': ", bytes.size(),
        " bytes; an x86 instruction is at most 15 bytes"));
  }
  return bytes;
}

absl::StatusOr<emulator::Mode> ParseModeFlag() {
  std::string mode = absl::AsciiStrToLower(absl::GetFlag(FLAGS_mode));
  if (mode == "64") return emulator::Mode::k64;
  if (mode == "32") return emulator::Mode::k32;
  if (mode == "16") return emulator::Mode::k16;
  if (mode == "real") return emulator::Mode::kReal;
  return absl::InvalidArgumentError(
      absl::StrCat("--mode=", mode, ": use 64, 32, 16 or real"));
}


}  // namespace pvemu::client
