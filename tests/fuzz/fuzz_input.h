// The fuzz targets' input as a stream of little-endian fields: a field past
// the end reads as zeros, so every input is a whole program of operations.
#ifndef PVEMU_TESTS_FUZZ_FUZZ_INPUT_H_
#define PVEMU_TESTS_FUZZ_FUZZ_INPUT_H_

#include <cstddef>
#include <cstdint>

namespace pvemu::fuzz {

class FuzzInput {
 public:
  FuzzInput(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  bool empty() const { return pos_ >= size_; }
  uint8_t U8() { return pos_ < size_ ? data_[pos_++] : 0; }
  uint16_t U16() { return static_cast<uint16_t>(Little(2)); }
  uint32_t U32() { return static_cast<uint32_t>(Little(4)); }
  uint64_t U64() { return Little(8); }
  // The next `n` bytes into `out`.
  void Bytes(void* out, size_t n) {
    auto* p = static_cast<uint8_t*>(out);
    for (size_t i = 0; i < n; ++i) p[i] = U8();
  }

 private:
  uint64_t Little(int n) {
    uint64_t v = 0;
    for (int i = 0; i < n; ++i) v |= uint64_t{U8()} << (8 * i);
    return v;
  }

  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

}  // namespace pvemu::fuzz

#endif  // PVEMU_TESTS_FUZZ_FUZZ_INPUT_H_
