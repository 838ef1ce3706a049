// Judging memory by its trend, not by two samples: a test samples memory
// (x, KiB) while its workload runs (x = edits done so far, say), fits a
// least-squares line through the samples and fails when the line rises
// faster than a bound per unit of x. One noisy sample (a page cache fill, an
// arena that grows once) moves a line through dozens of samples little; a
// leak of so much per edit makes the line rise by that much per edit.
#ifndef PVEMU_TESTS_MEMORY_TREND_H_
#define PVEMU_TESTS_MEMORY_TREND_H_

#include <malloc.h>

#include <cstdint>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "gtest/gtest.h"

namespace pvemu::testing {

// Resident memory (VmRSS) in KiB, after returning freed heap pages to the
// system, so that the figure follows live memory rather than what malloc
// keeps cached. 0 if /proc/self/status has no VmRSS line.
inline double ResidentKiB() {
  malloc_trim(0);
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    absl::string_view rest = line;
    if (!absl::ConsumePrefix(&rest, "VmRSS:")) continue;
    rest = absl::StripAsciiWhitespace(rest);
    absl::ConsumeSuffix(&rest, "kB");
    uint64_t kib = 0;
    (void)absl::SimpleAtoi(absl::StripAsciiWhitespace(rest), &kib);
    return static_cast<double>(kib);
  }
  return 0;
}

// Bytes malloc has handed out and not had back (all arenas), in KiB: live
// heap, without the freed memory malloc keeps or the pages it has touched.
inline double LiveHeapKiB() { return static_cast<double>(mallinfo2().uordblks) / 1024.0; }

// Samples of one memory figure against a measure of work done.
class MemoryTrend {
 public:
  // `what`: the figure ("resident memory"); `unit`: what x counts ("edit").
  MemoryTrend(std::string what, std::string unit)
      : what_(std::move(what)), unit_(std::move(unit)) {}

  void Add(double x, double kib) { samples_.emplace_back(x, kib); }
  size_t size() const { return samples_.size(); }
  // The x of the first and the last sample. REQUIRES: size() > 0.
  double first_x() const { return samples_.front().first; }
  double last_x() const { return samples_.back().first; }

  // The least-squares slope through the samples, KiB per unit of x (0 with
  // fewer than two distinct x).
  double Slope() const {
    if (samples_.size() < 2) return 0;
    const double n = static_cast<double>(samples_.size());
    double sx = 0, sy = 0;
    for (const auto& [x, y] : samples_) {
      sx += x;
      sy += y;
    }
    const double mx = sx / n, my = sy / n;
    double sxx = 0, sxy = 0;
    for (const auto& [x, y] : samples_) {
      sxx += (x - mx) * (x - mx);
      sxy += (x - mx) * (y - my);
    }
    return sxx == 0 ? 0 : sxy / sxx;
  }

  // "resident memory: slope 0.0012 KiB per edit over 55 samples (edit, KiB):
  // 1200 23056, 1350 23100, ...".
  std::string Describe() const {
    std::string text = absl::StrFormat("%s: slope %.6f KiB per %s over %d samples (%s, KiB):",
                                       what_, Slope(), unit_, samples_.size(), unit_);
    for (const auto& [x, y] : samples_) absl::StrAppendFormat(&text, " %.0f %.1f,", x, y);
    if (!samples_.empty()) text.pop_back();
    return text;
  }

  // Success when there are at least `min_samples` samples and the slope is
  // at most `max_kib_per_unit`; the failure message gives the slope and
  // every sample.
  ::testing::AssertionResult IsFlat(double max_kib_per_unit, size_t min_samples = 5) const {
    if (samples_.size() < min_samples) {
      return ::testing::AssertionFailure()
             << "only " << samples_.size() << " samples of " << what_ << " (want "
             << min_samples << "); " << Describe();
    }
    if (Slope() > max_kib_per_unit) {
      return ::testing::AssertionFailure()
             << what_ << " grows: the fitted slope is above the bound of " << max_kib_per_unit
             << " KiB per " << unit_ << "; " << Describe();
    }
    return ::testing::AssertionSuccess();
  }

 private:
  std::string what_, unit_;
  std::vector<std::pair<double, double>> samples_;
};

}  // namespace pvemu::testing

#endif  // PVEMU_TESTS_MEMORY_TREND_H_
