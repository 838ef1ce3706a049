// Counting the global heap: tests/heap_counter.cc replaces the global
// operator new/delete of a test or benchmark binary it is linked into, so a
// test can assert that a path does not allocate. Link it into a binary at
// most once, and into no binary that defines its own operator new.
#ifndef PVEMU_TESTS_HEAP_COUNTER_H_
#define PVEMU_TESTS_HEAP_COUNTER_H_

#include <cstdint>

namespace pvemu::testing {

// Calls of the global operator new since the process started.
uint64_t HeapAllocations();

}  // namespace pvemu::testing

#endif  // PVEMU_TESTS_HEAP_COUNTER_H_
