// Which kinds of input a fuzz target's corpus reaches. With PVEMU_FUZZ_TALLY
// set, a target counts each (what it was given, what pvemu answered) it
// checked and prints the table to stderr when the process exits; run it over
// a corpus (libFuzzer: `-runs=0 DIR`) to see which exit kinds and verdicts
// the corpus covers, which edges alone do not say. Unset, Add returns at once.
#ifndef PVEMU_TESTS_FUZZ_FUZZ_TALLY_H_
#define PVEMU_TESTS_FUZZ_FUZZ_TALLY_H_

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <string>

namespace pvemu::fuzz {

class Tally {
 public:
  Tally() : on_(std::getenv("PVEMU_FUZZ_TALLY") != nullptr) {}
  ~Tally() {
    if (!on_) return;
    if (at_exit_) at_exit_(*this);
    std::fprintf(stderr, "tally: %zu kinds reached\n", counts_.size());
    for (const auto& [key, n] : counts_) {
      std::fprintf(stderr, "tally: %10llu  %s\n", static_cast<unsigned long long>(n), key.c_str());
    }
  }
  void Add(const std::string& key, uint64_t n = 1) {
    if (on_) counts_[key] += n;
  }
  // Runs `f` just before the table prints: for what the target reads from
  // pvemu's own counts once, rather than per input.
  void AtExit(std::function<void(Tally&)> f) { at_exit_ = std::move(f); }
  bool on() const { return on_; }

 private:
  const bool on_;
  std::function<void(Tally&)> at_exit_;
  std::map<std::string, uint64_t> counts_;
};

// The process's tally (a function-local static, so it prints after every
// input, at exit).
inline Tally& TheTally() {
  static Tally tally;
  return tally;
}

}  // namespace pvemu::fuzz

#endif  // PVEMU_TESTS_FUZZ_FUZZ_TALLY_H_
