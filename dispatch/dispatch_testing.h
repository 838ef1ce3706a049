// Test-only access to the trap path (benchmarks and tests; never production).
#ifndef PVEMU_DISPATCH_DISPATCH_TESTING_H_
#define PVEMU_DISPATCH_DISPATCH_TESTING_H_

#include "dispatch/dispatch.h"

namespace pvemu::dispatch {

struct DispatchTesting {
  // Session::Handle compiled without the observer test (audit, capture; the
  // trap counters are GetStats and stay on): the baseline of the benchmark
  // that proves switched-off features cost nothing (BM_DispatchHooksOverhead).
  static emulator::Outcome HandleWithoutObservers(Dispatcher::Session& session,
                                                  const emulator::Trap& trap);
};

}  // namespace pvemu::dispatch

#endif  // PVEMU_DISPATCH_DISPATCH_TESTING_H_
