#include "tests/heap_counter.h"

#include <atomic>
#include <cstdlib>
#include <new>

// Counting replacements of the global allocation functions. The sized
// variants forward here. GCC inlines them into callers and then mistakes the
// malloc/free pairing inside for a new/free mismatch; the pairing is correct
// by construction.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif
namespace {
std::atomic<uint64_t> g_heap_allocations{0};
}  // namespace

void* operator new(std::size_t size) {
  g_heap_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t size) { return operator new(size); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }

namespace pvemu::testing {

uint64_t HeapAllocations() { return g_heap_allocations.load(std::memory_order_relaxed); }

}  // namespace pvemu::testing
