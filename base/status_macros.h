// The one piece of code every module shares: early-return helpers for
// absl::Status, which the Abseil in Debian 12 (20220623) does not ship yet.
#ifndef PVEMU_BASE_STATUS_MACROS_H_
#define PVEMU_BASE_STATUS_MACROS_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

// Returns from the current function if `expr` (an absl::Status) is not OK.
#define RETURN_IF_ERROR(expr)                          \
  do {                                                 \
    ::absl::Status pvemu_status_ = (expr);             \
    if (!pvemu_status_.ok()) return pvemu_status_;     \
  } while (0)

#define PVEMU_STATUS_CONCAT_INNER_(a, b) a##b
#define PVEMU_STATUS_CONCAT_(a, b) PVEMU_STATUS_CONCAT_INNER_(a, b)

// `lhs` = the value of `expr` (an absl::StatusOr<T>), or returns its status.
#define ASSIGN_OR_RETURN(lhs, expr) \
  ASSIGN_OR_RETURN_IMPL_(PVEMU_STATUS_CONCAT_(pvemu_statusor_, __LINE__), lhs, expr)

#define ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                           \
  if (!tmp.ok()) return std::move(tmp).status(); \
  lhs = std::move(tmp).value()

#endif  // PVEMU_BASE_STATUS_MACROS_H_
