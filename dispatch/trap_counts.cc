#include "dispatch/trap_counts.h"

#include "emulator/decoder.h"

namespace pvemu::dispatch {

absl::string_view MsrActionName(MsrAction action) {
  switch (action) {
    case MsrAction::kPassthrough: return "PASSTHROUGH";
    case MsrAction::kConst: return "CONST";
    case MsrAction::kShadow: return "SHADOW";
    case MsrAction::kZero: return "ZERO";
    case MsrAction::kGp: return "GP";
    case MsrAction::kIgnore: return "IGNORE";
    case MsrAction::kUnknownGp: return "UNKNOWN_GP";
    case MsrAction::kUnknownRelaxed: return "UNKNOWN_RELAXED";
    case MsrAction::kLearnRelaxed: return "LEARN_RELAXED";
  }
  return "GP";
}

MsrAction TrapCountTables::DecodeMsrAction(uint32_t code, bool* write) {
  *write = (code >> 4) & 1;
  const bool unknown = (code >> 3) & 1;
  const uint32_t raw = code & 7;
  if (raw == kRelaxedCode) return MsrAction::kLearnRelaxed;
  if (unknown) {
    // The unknown-MSR mode: GP, or RELAXED (reads 0, writes dropped).
    const bool gp = *write ? raw == static_cast<uint32_t>(emulator::MsrWrite::kGp)
                           : raw == static_cast<uint32_t>(emulator::MsrRead::kGp);
    return gp ? MsrAction::kUnknownGp : MsrAction::kUnknownRelaxed;
  }
  // emulator::MsrRead/MsrWrite numbers (pvemu.v1 ReadAction/WriteAction);
  // anything else reads as #GP, as the emulator treats it.
  if (*write) {
    switch (static_cast<emulator::MsrWrite>(raw)) {
      case emulator::MsrWrite::kPassthrough: return MsrAction::kPassthrough;
      case emulator::MsrWrite::kShadow: return MsrAction::kShadow;
      case emulator::MsrWrite::kIgnore: return MsrAction::kIgnore;
      default: return MsrAction::kGp;
    }
  }
  switch (static_cast<emulator::MsrRead>(raw)) {
    case emulator::MsrRead::kPassthrough: return MsrAction::kPassthrough;
    case emulator::MsrRead::kConst: return MsrAction::kConst;
    case emulator::MsrRead::kShadow: return MsrAction::kShadow;
    case emulator::MsrRead::kZero: return MsrAction::kZero;
    default: return MsrAction::kGp;
  }
}

void TrapCountTables::FoldSlots() {
  if (slots_used == 0 && region_refused == 0) return;
  // Seqlock writer: readers that overlap see an odd or changed sequence and
  // read again, so a count is never seen in both places or in neither.
  const uint32_t seq = layout_seq.load(std::memory_order_relaxed);
  layout_seq.store(seq + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  ForEachSlot([&](uint32_t block, uint32_t domain, uint32_t msr, uint32_t code,
                  emulator::OutcomeKind outcome, uint64_t n) {
    if (domain < kMsrKeyDomains) {
      msrs.Add(MsrKey(domain, msr, code), n, code);
    } else {
      msrs.AddOverflow(code, n);
    }
    // The traps' count by kind was the slot's (kCountersPerSlot): it moves too.
    std::atomic<uint64_t>& kind = domain_kinds[block].counts[KindIndex(SlotInsn(code), outcome)];
    kind.store(kind.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
  });
  for (uint32_t c = 0; c < slots_used; ++c) slot_counts[c].store(0, std::memory_order_relaxed);
  for (uint32_t c = 0; c < slots_used / kCountersPerSlot; ++c) {
    slot_meta[c].store(0, std::memory_order_relaxed);
  }
  for (uint32_t b = 0; b < kMaxDomains; ++b) {
    region_end[b].store(0, std::memory_order_relaxed);
    region_begin[b].store(0, std::memory_order_relaxed);
  }
  slots_used = 0;
  region_refused = 0;
  layout_seq.store(seq + 2, std::memory_order_release);
}

absl::string_view InstructionLabel(int insn) {
  if (insn < 0 || insn >= emulator::kNumInsnKinds) return "undecodable";
  // The MOV CR/DR kinds all print "mov"; a label keeps them apart.
  switch (static_cast<emulator::InsnKind>(insn)) {
    case emulator::InsnKind::kMovFromCr: return "mov_from_cr";
    case emulator::InsnKind::kMovToCr: return "mov_to_cr";
    case emulator::InsnKind::kMovFromDr: return "mov_from_dr";
    case emulator::InsnKind::kMovToDr: return "mov_to_dr";
    default: return emulator::KindMnemonic(static_cast<emulator::InsnKind>(insn));
  }
}

absl::string_view OutcomeLabel(emulator::OutcomeKind kind) {
  switch (kind) {
    case emulator::OutcomeKind::kCompleted: return "completed";
    case emulator::OutcomeKind::kException: return "exception";
    case emulator::OutcomeKind::kUnhandled: return "unhandled";
    case emulator::OutcomeKind::kDeviceIo: return "device_io";
  }
  return "unknown";
}

std::optional<int> InstructionFromLabel(absl::string_view label) {
  for (int insn = 0; insn <= TrapCountTables::kUndecodable; ++insn) {
    if (InstructionLabel(insn) == label) return insn;
  }
  return std::nullopt;
}

std::optional<emulator::OutcomeKind> OutcomeFromLabel(absl::string_view label) {
  for (int kind = 1; kind <= TrapCountTables::kOutcomes; ++kind) {
    if (OutcomeLabel(static_cast<emulator::OutcomeKind>(kind)) == label) {
      return static_cast<emulator::OutcomeKind>(kind);
    }
  }
  return std::nullopt;
}

std::optional<MsrAction> MsrActionFromName(absl::string_view name) {
  for (int a = 0; a <= static_cast<int>(MsrAction::kLearnRelaxed); ++a) {
    if (MsrActionName(static_cast<MsrAction>(a)) == name) return static_cast<MsrAction>(a);
  }
  return std::nullopt;
}

}  // namespace pvemu::dispatch
