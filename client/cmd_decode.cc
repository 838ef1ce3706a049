// pvemuctl decode: instruction bytes → the decoded privileged instruction.
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/cli.h"
#include "client/commands.h"
#include "client/flags.h"
#include "client/hex.h"
#include "emulator/decoder.h"
#include "pvemu/v1/trap.pb.h"

namespace pvemu::client {
namespace {

// Decodes one instruction and prints its line. Returns false if the bytes are
// not one privileged instruction.
bool DecodeOne(absl::string_view text, emulator::Mode mode) {
  absl::StatusOr<std::string> bytes = ParseHexBytes(text);
  std::string shown = bytes.ok() ? absl::BytesToHexString(*bytes)
                                 : std::string(absl::StripAsciiWhitespace(text));
  if (!bytes.ok()) {
    if (JsonOutput()) {
      JsonLine().Str("bytes", shown).Str("error", bytes.status().message())
          .Null("exception").Bool("privileged", false).Print();
    } else {
      std::printf("%s\terror: %s\n", shown.c_str(),
                  std::string(bytes.status().message()).c_str());
    }
    return false;
  }
  emulator::DecodeResult result = emulator::Decode(
      reinterpret_cast<const uint8_t*>(bytes->data()), bytes->size(), mode);
  if (!result.ok()) {
    emulator::Vector vector;
    bool has_vector = emulator::DecodeErrorVector(result.error, &vector);
    std::string error(emulator::DecodeStatus(result).message());
    std::string exception =
        has_vector ? v1::Vector_Name(static_cast<v1::Vector>(vector)) : "";
    if (JsonOutput()) {
      JsonLine line;
      line.Str("bytes", shown).Str("error", error);
      if (has_vector) {
        line.Str("exception", exception);
      } else {
        line.Null("exception");
      }
      line.Num("offset", result.error_offset).Bool("privileged", false).Print();
    } else {
      std::printf("%s\terror: %s%s\n", shown.c_str(), error.c_str(),
                  has_vector ? absl::StrCat(" (#", exception, ")").c_str() : "");
    }
    return false;
  }
  v1::Instruction insn;
  emulator::InstructionToProto(result.insn, &insn);
  std::string used = shown.substr(0, 2 * result.insn.length);
  if (JsonOutput()) {
    JsonLine line;
    line.Str("bytes", used)
        .Str("mnemonic", insn.mnemonic())
        .Num("length", insn.length())
        .Bool("privileged", true)
        .Num("operand_size", insn.operand_size())
        .Num("address_size", insn.address_size());
    if (insn.rep()) line.Bool("rep", true);
    if (insn.has_port()) line.Hex("port", insn.port());
    if (insn.has_control_register()) line.Num("cr", insn.control_register());
    if (insn.has_debug_register()) line.Num("dr", insn.debug_register());
    if (insn.has_gpr()) line.Num("gpr", insn.gpr());
    if (insn.memory_operand()) line.Bool("memory_operand", true);
    line.Print();
  } else {
    std::printf("%s\t%s\t(%u bytes, %u-bit operand, %u-bit address)\n", used.c_str(),
                insn.mnemonic().c_str(), insn.length(), insn.operand_size(),
                insn.address_size());
  }
  return true;
}

}  // namespace

int RunDecode(const Args& args) {
  absl::StatusOr<emulator::Mode> mode = ParseModeFlag();
  if (!mode.ok()) return UsageError(mode.status().message());
  if (args.empty()) return UsageError("decode needs HEX... or - (stdin)");
  if (args.size() == 1 && args[0] == "-") {
    // Batch: a bad line is a line of output, not a failure of the command.
    std::string line;
    while (std::getline(std::cin, line)) {
      if (absl::StripAsciiWhitespace(line).empty()) continue;
      DecodeOne(line, *mode);
    }
    return kExitOk;
  }
  bool all_ok = true;
  for (const std::string& arg : args) all_ok &= DecodeOne(arg, *mode);
  return all_ok ? kExitOk : kExitInvalid;
}

}  // namespace pvemu::client
