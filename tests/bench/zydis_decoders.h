// The reference decoder of the ratio targets: Zydis in minimal mode
// (instruction only), one decoder per emulator::Mode.
#ifndef PVEMU_TESTS_BENCH_ZYDIS_DECODERS_H_
#define PVEMU_TESTS_BENCH_ZYDIS_DECODERS_H_

#include <Zydis/Zydis.h>

#include "emulator/trap.h"

namespace pvemu::bench {

// decoders[static_cast<int>(mode)] decodes in `mode`.
inline void InitZydisDecoders(ZydisDecoder (&decoders)[4]) {
  using emulator::Mode;
  ZydisDecoderInit(&decoders[static_cast<int>(Mode::kReal)], ZYDIS_MACHINE_MODE_REAL_16,
                   ZYDIS_STACK_WIDTH_16);
  ZydisDecoderInit(&decoders[static_cast<int>(Mode::k16)], ZYDIS_MACHINE_MODE_LEGACY_16,
                   ZYDIS_STACK_WIDTH_16);
  ZydisDecoderInit(&decoders[static_cast<int>(Mode::k32)], ZYDIS_MACHINE_MODE_LEGACY_32,
                   ZYDIS_STACK_WIDTH_32);
  ZydisDecoderInit(&decoders[static_cast<int>(Mode::k64)], ZYDIS_MACHINE_MODE_LONG_64,
                   ZYDIS_STACK_WIDTH_64);
  for (ZydisDecoder& d : decoders) ZydisDecoderEnableMode(&d, ZYDIS_DECODER_MODE_MINIMAL, ZYAN_TRUE);
}

}  // namespace pvemu::bench

#endif  // PVEMU_TESTS_BENCH_ZYDIS_DECODERS_H_
