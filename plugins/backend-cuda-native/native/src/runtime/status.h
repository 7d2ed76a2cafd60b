// Status: how native code reports failure. Nothing in native/ throws across the N-API boundary;
// every fallible call returns a Status and binding.cc turns a failed one into a JS error whose
// `code` is one of Loom's registered error codes.
#pragma once

#include <string>
#include <utility>

namespace loom {

struct Status {
  // Empty code means success. Codes match core/src/errors/registry.ts (model_invalid,
  // native_error, adapter_slots_full, validation_error ...).
  std::string code;
  std::string message;

  bool ok() const { return code.empty(); }
  static Status Ok() { return Status{}; }
  static Status Error(std::string code, std::string message) { return Status{std::move(code), std::move(message)}; }
};

// Early return helper: evaluate a Status-returning expression and bail out on failure.
#define LOOM_RETURN_IF_ERROR(expr)      \
  do {                                  \
    ::loom::Status _st = (expr);        \
    if (!_st.ok()) return _st;          \
  } while (0)

}  // namespace loom
