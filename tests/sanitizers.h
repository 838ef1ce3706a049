// Whether this test binary runs under AddressSanitizer. ASan keeps freed
// memory in quarantine, so resident-memory assertions (flat memory over a
// long log, no growth under load) are meaningless there and are skipped;
// the functional assertions of the same tests still run.
#ifndef PVEMU_TESTS_SANITIZERS_H_
#define PVEMU_TESTS_SANITIZERS_H_

namespace pvemu::testing {

#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kUnderAddressSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
inline constexpr bool kUnderAddressSanitizer = true;
#else
inline constexpr bool kUnderAddressSanitizer = false;
#endif
#else
inline constexpr bool kUnderAddressSanitizer = false;
#endif

}  // namespace pvemu::testing

#endif  // PVEMU_TESTS_SANITIZERS_H_
