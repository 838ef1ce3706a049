// The C ABI (kvm/pvemu_kvm.h) over kvm::DataPlane: argument checks, errno
// results, a per-thread error message, and a wall that stops every C++
// exception (a VMM in C or Rust cannot unwind through us).
#include "kvm/pvemu_kvm.h"

#include <errno.h>

#include <cstring>
#include <exception>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "dispatch/trap_counts.h"
#include "kvm/data_plane.h"

struct pvemu_kvm {
  std::unique_ptr<pvemu::kvm::DataPlane> plane;
};

struct pvemu_kvm_vcpu {
  std::unique_ptr<pvemu::kvm::Vcpu> vcpu;
};

namespace {

thread_local std::string last_error;

int Fail(int err, std::string message) {
  last_error = std::move(message);
  return -err;
}

// The errno closest to an absl::Status code (absl::ErrnoToStatus's inverse
// for the codes our errors use).
int ErrnoOf(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument: return EINVAL;
    case absl::StatusCode::kNotFound: return ENOENT;
    case absl::StatusCode::kPermissionDenied: return EACCES;
    case absl::StatusCode::kUnimplemented: return EOPNOTSUPP;
    case absl::StatusCode::kDeadlineExceeded: return ETIMEDOUT;
    case absl::StatusCode::kUnavailable: return ECONNREFUSED;
    case absl::StatusCode::kResourceExhausted: return ENOMEM;
    case absl::StatusCode::kAlreadyExists: return EEXIST;
    case absl::StatusCode::kFailedPrecondition: return EBUSY;
    case absl::StatusCode::kOutOfRange: return ERANGE;
    default: return EIO;
  }
}

int Fail(const absl::Status& status) { return Fail(ErrnoOf(status), std::string(status.message())); }

// Runs `body` behind the exception wall.
template <typename Body>
int Guard(const char* function, Body body) noexcept {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return Fail(ENOMEM, std::string(function) + ": out of memory");
  } catch (const std::exception& e) {
    return Fail(EIO, std::string(function) + ": internal error: " + e.what());
  } catch (...) {
    return Fail(EIO, std::string(function) + ": internal error");
  }
}

const char* OrEmpty(const char* s) { return s == nullptr ? "" : s; }

// No version of a struct of the ABI is larger: a caller's `size` above it
// was never set (pvemu_kvm.h, "How the ABI grows").
constexpr uint32_t kMaxStructSize = 4096;

// A struct the caller fills, from a newer header: the `size - known` bytes
// past the fields this library knows must be 0 (a field it does not know,
// set, asks for what it cannot do). Returns 0 or -E2BIG.
int CheckUnknownFieldsZero(const char* function, const char* name, const void* s, uint32_t size,
                           size_t known) {
  const auto* bytes = static_cast<const unsigned char*>(s);
  for (size_t i = known; i < size; ++i) {
    if (bytes[i] == 0) continue;
    return Fail(E2BIG, std::string(function) + ": struct " + name + " sets byte " +
                           std::to_string(i) + ", past the " + std::to_string(known) +
                           " bytes this libpvemu-kvm knows (the caller's header has " +
                           std::to_string(size) +
                           "): leave the newer fields 0, or use a newer libpvemu-kvm");
  }
  return 0;
}

// The fields of struct pvemu_kvm_stats in order, as WriteStats copies them.
struct Field {
  size_t offset;
  size_t size;
};
#define PVEMU_STATS_FIELD(name) \
  Field { offsetof(pvemu_kvm_stats, name), sizeof(pvemu_kvm_stats::name) }
constexpr Field kStatsFields[] = {
    PVEMU_STATS_FIELD(size),       PVEMU_STATS_FIELD(reserved),   PVEMU_STATS_FIELD(rdmsr),
    PVEMU_STATS_FIELD(wrmsr),      PVEMU_STATS_FIELD(io),         PVEMU_STATS_FIELD(completed),
    PVEMU_STATS_FIELD(exceptions), PVEMU_STATS_FIELD(device),     PVEMU_STATS_FIELD(pvemu_ns),
};
#undef PVEMU_STATS_FIELD
// The header the library never writes: `size` and `reserved`.
constexpr size_t kStatsHeaderBytes = offsetof(pvemu_kvm_stats, rdmsr);

// The table lists every field, back to back: a field appended to the struct
// and not here fails the build.
constexpr bool StatsFieldsCoverTheStruct() {
  size_t end = 0;
  for (const Field& f : kStatsFields) {
    if (f.offset != end) return false;
    end = f.offset + f.size;
  }
  return end == sizeof(pvemu_kvm_stats);
}
static_assert(StatsFieldsCoverTheStruct());

// Writes `counts` into the caller's struct at `out`, as large as out->size
// says (pvemu_kvm.h, "How the ABI grows"): each count that lies wholly
// within that size and this library's struct, nothing at or past out->size,
// never the header. `out` may point to an older header's smaller struct, so
// it is reached as bytes only. Returns the bytes accounted for, or -EINVAL.
int WriteStats(const char* function, const pvemu_kvm_stats& counts, pvemu_kvm_stats* out) {
  if (out == nullptr) return Fail(EINVAL, std::string(function) + ": out must not be NULL");
  uint32_t size = 0;
  std::memcpy(&size, out, sizeof size);  // the one field every version has
  if (size < sizeof size || size > kMaxStructSize) {
    return Fail(EINVAL, std::string(function) + ": out->size is " + std::to_string(size) +
                            "; set it to sizeof(struct pvemu_kvm_stats)");
  }
  auto* to = reinterpret_cast<unsigned char*>(out);
  const auto* from = reinterpret_cast<const unsigned char*>(&counts);
  size_t end = 0;
  for (const Field& f : kStatsFields) {
    if (f.offset + f.size > size) break;
    if (f.offset >= kStatsHeaderBytes) std::memcpy(to + f.offset, from + f.offset, f.size);
    end = f.offset + f.size;
  }
  return static_cast<int>(end);
}

}  // namespace

extern "C" {

int pvemu_kvm_open(const struct pvemu_kvm_options* options, pvemu_kvm** out) {
  return Guard("pvemu_kvm_open", [&]() -> int {
    if (options == nullptr || out == nullptr) {
      return Fail(EINVAL, "pvemu_kvm_open: options and out must not be NULL");
    }
    *out = nullptr;
    // The struct as small as its first version, or larger from a newer
    // header whose fields past ours are 0 (pvemu_kvm.h, "How the ABI
    // grows"). A field appended later is read only when options->size
    // holds it, and counts as 0 otherwise.
    constexpr uint32_t kFirstSize = offsetof(pvemu_kvm_options, host_profile) + sizeof(char*);
    if (options->size < kFirstSize || options->size > kMaxStructSize) {
      return Fail(EINVAL, "pvemu_kvm_open: options->size is " + std::to_string(options->size) +
                              "; set it to sizeof(struct pvemu_kvm_options)");
    }
    if (const int rc = CheckUnknownFieldsZero("pvemu_kvm_open", "pvemu_kvm_options", options,
                                              options->size, sizeof(pvemu_kvm_options));
        rc < 0) {
      return rc;
    }
    pvemu::kvm::DataPlaneOptions o;
    o.domain = options->domain;
    o.policy = OrEmpty(options->policy);
    o.server = OrEmpty(options->server);
    if (options->connect_timeout_ms != 0) {
      o.connect_timeout = absl::Milliseconds(options->connect_timeout_ms);
    }
    if (options->host != nullptr && *options->host != 0) o.host = options->host;
    o.host_profile = OrEmpty(options->host_profile);
    // Appended fields: read only when the caller's struct holds them.
    if (options->size >= offsetof(pvemu_kvm_options, capture) + sizeof(char*)) {
      o.capture = OrEmpty(options->capture);
    }
    if (options->size >= offsetof(pvemu_kvm_options, count_msrs) + sizeof(uint32_t)) {
      o.count_msrs = options->count_msrs != 0;
    }
    if (options->size >= offsetof(pvemu_kvm_options, time_exits) + sizeof(uint32_t)) {
      o.time_exits = options->time_exits != 0;
    }
    absl::StatusOr<std::unique_ptr<pvemu::kvm::DataPlane>> plane =
        pvemu::kvm::DataPlane::Open(o);
    if (!plane.ok()) return Fail(plane.status());
    *out = new pvemu_kvm{std::move(*plane)};
    return 0;
  });
}

void pvemu_kvm_close(pvemu_kvm* kvm) {
  Guard("pvemu_kvm_close", [&] {
    delete kvm;
    return 0;
  });
}

int pvemu_kvm_setup_vm(pvemu_kvm* kvm, int vm_fd) {
  return Guard("pvemu_kvm_setup_vm", [&]() -> int {
    if (kvm == nullptr || vm_fd < 0) {
      return Fail(EINVAL, "pvemu_kvm_setup_vm: needs a handle and the KVM_CREATE_VM descriptor");
    }
    absl::Status status = kvm->plane->SetupVm(vm_fd);
    return status.ok() ? 0 : Fail(status);
  });
}

int pvemu_kvm_vcpu_open(pvemu_kvm* kvm, int kvm_fd, int vcpu_fd, uint32_t index,
                        pvemu_kvm_vcpu** out) {
  return Guard("pvemu_kvm_vcpu_open", [&]() -> int {
    if (kvm == nullptr || out == nullptr || kvm_fd < 0 || vcpu_fd < 0) {
      return Fail(EINVAL,
                  "pvemu_kvm_vcpu_open: needs a handle, the /dev/kvm and KVM_CREATE_VCPU "
                  "descriptors, and out");
    }
    *out = nullptr;
    absl::StatusOr<std::unique_ptr<pvemu::kvm::Vcpu>> vcpu =
        kvm->plane->OpenVcpu(kvm_fd, vcpu_fd, index);
    if (!vcpu.ok()) return Fail(vcpu.status());
    *out = new pvemu_kvm_vcpu{std::move(*vcpu)};
    return 0;
  });
}

void pvemu_kvm_vcpu_close(pvemu_kvm_vcpu* vcpu) {
  Guard("pvemu_kvm_vcpu_close", [&] {
    delete vcpu;
    return 0;
  });
}

int pvemu_kvm_handle_exit(pvemu_kvm_vcpu* vcpu, struct kvm_run* run) {
  // The exit path: no Guard (nothing below throws: the trap path allocates
  // nothing), and the error text is set only on the rare failure.
  if (vcpu == nullptr || run == nullptr) {
    return Fail(EINVAL, "pvemu_kvm_handle_exit: needs a vCPU and its kvm_run");
  }
  const int result = vcpu->vcpu->HandleExit(run);
  if (result < 0) {
    return Fail(-result,
                "pvemu_kvm_handle_exit: malformed KVM_EXIT_IO (size not 1, 2 or 4, or data "
                "outside the kvm_run mapping)");
  }
  return result;
}

int pvemu_kvm_vcpu_stats(const pvemu_kvm_vcpu* vcpu, struct pvemu_kvm_stats* out) {
  return Guard("pvemu_kvm_vcpu_stats", [&]() -> int {
    const pvemu_kvm_stats counts = vcpu == nullptr ? pvemu_kvm_stats{} : vcpu->vcpu->stats();
    return WriteStats("pvemu_kvm_vcpu_stats", counts, out);
  });
}

int pvemu_kvm_totals(const pvemu_kvm* kvm, struct pvemu_kvm_stats* out) {
  return Guard("pvemu_kvm_totals", [&]() -> int {
    const pvemu_kvm_stats counts = kvm == nullptr ? pvemu_kvm_stats{} : kvm->plane->totals().stats;
    return WriteStats("pvemu_kvm_totals", counts, out);
  });
}

int pvemu_kvm_msr_counts(const pvemu_kvm* kvm, pvemu_kvm_msr_count* out, uint32_t max) {
  return Guard("pvemu_kvm_msr_counts", [&]() -> int {
    if (kvm == nullptr || (out == nullptr && max > 0)) {
      return Fail(EINVAL, "pvemu_kvm_msr_counts: needs a handle, and out when max > 0");
    }
    uint32_t stride = sizeof(pvemu_kvm_msr_count);
    if (max > 0) {
      std::memcpy(&stride, out, sizeof stride);
      if (stride < 2 * sizeof(uint32_t) || stride > kMaxStructSize) {
        return Fail(EINVAL, "pvemu_kvm_msr_counts: out[0].size is " + std::to_string(stride) +
                                "; set it to sizeof(struct pvemu_kvm_msr_count)");
      }
    }
    absl::StatusOr<std::vector<pvemu::dispatch::MsrCount>> counts = kvm->plane->MsrCounts();
    if (!counts.ok()) return Fail(counts.status());
    const uint32_t n = static_cast<uint32_t>(counts->size());
    for (uint32_t i = 0; i < n && i < max; ++i) {
      const pvemu::dispatch::MsrCount& c = (*counts)[i];
      pvemu_kvm_msr_count row{};
      row.size = stride;
      row.msr = c.msr.value_or(0);
      row.write = c.write ? 1 : 0;
      row.action = static_cast<uint32_t>(c.action);
      row.other = c.msr.has_value() ? 0 : 1;
      row.count = c.count;
      // Whole fields within the caller's size only; never its size field.
      auto* to = reinterpret_cast<unsigned char*>(out) + size_t{i} * stride;
      const auto* from = reinterpret_cast<const unsigned char*>(&row);
      for (const auto& [offset, bytes] :
           {std::pair{offsetof(pvemu_kvm_msr_count, msr), sizeof row.msr},
            std::pair{offsetof(pvemu_kvm_msr_count, write), sizeof row.write},
            std::pair{offsetof(pvemu_kvm_msr_count, action), sizeof row.action},
            std::pair{offsetof(pvemu_kvm_msr_count, other), sizeof row.other},
            std::pair{offsetof(pvemu_kvm_msr_count, count), sizeof row.count}}) {
        if (offset + bytes <= stride) std::memcpy(to + offset, from + offset, bytes);
      }
    }
    return static_cast<int>(n);
  });
}

const char* pvemu_kvm_msr_action_name(uint32_t action) {
  static_assert(PVEMU_KVM_MSR_GP == static_cast<int>(pvemu::dispatch::MsrAction::kGp) &&
                    PVEMU_KVM_MSR_UNKNOWN_GP ==
                        static_cast<int>(pvemu::dispatch::MsrAction::kUnknownGp) &&
                    PVEMU_KVM_MSR_LEARN_RELAXED ==
                        static_cast<int>(pvemu::dispatch::MsrAction::kLearnRelaxed),
                "enum pvemu_kvm_msr_action must equal dispatch::MsrAction");
  if (action > PVEMU_KVM_MSR_LEARN_RELAXED) return "?";
  static const std::string* names = [] {
    auto* n = new std::string[PVEMU_KVM_MSR_LEARN_RELAXED + 1];
    for (int a = 0; a <= PVEMU_KVM_MSR_LEARN_RELAXED; ++a) {
      n[a] = std::string(pvemu::dispatch::MsrActionName(static_cast<pvemu::dispatch::MsrAction>(a)));
    }
    return n;
  }();
  return names[action].c_str();
}

uint64_t pvemu_kvm_generation(const pvemu_kvm* kvm) {
  return kvm == nullptr ? 0 : kvm->plane->generation();
}

int pvemu_kvm_filter_text(const pvemu_kvm* kvm, char* buf, size_t len) {
  return Guard("pvemu_kvm_filter_text", [&]() -> int {
    if (kvm == nullptr || (buf == nullptr && len != 0)) {
      return Fail(EINVAL, "pvemu_kvm_filter_text: needs a handle, and a buffer when len > 0");
    }
    const std::string text = pvemu::enforce::FilterToText(kvm->plane->filter());
    if (len > 0) {
      const size_t n = std::min(len - 1, text.size());
      std::memcpy(buf, text.data(), n);
      buf[n] = 0;
    }
    return static_cast<int>(text.size());
  });
}

const char* pvemu_kvm_last_error(void) { return last_error.c_str(); }

}  // extern "C"
