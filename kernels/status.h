// Errors are values: library code returns Status / Expected<T>; the CLI prints the message.
#pragma once

#include <cassert>
#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace zenmoe {

// The error side of a result: one human-readable line, no trailing newline.
struct Error {
  std::string message;
};

// Success or an Error.
class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Error e) : error_(std::move(e.message)) {}  // NOLINT: implicit on purpose
  static Status ok() { return Status(); }
  bool is_ok() const { return !error_.has_value(); }
  explicit operator bool() const { return is_ok(); }
  const std::string& message() const { return *error_; }

 private:
  std::optional<std::string> error_;
};

// A value of type T or an Error.
template <class T>
class [[nodiscard]] Expected {
 public:
  Expected(T value) : v_(std::move(value)) {}  // NOLINT: implicit on purpose
  Expected(Error e) : v_(std::move(e)) {}      // NOLINT: implicit on purpose
  bool has_value() const { return v_.index() == 0; }
  explicit operator bool() const { return has_value(); }
  T& value() & { assert(has_value()); return std::get<0>(v_); }
  const T& value() const& { assert(has_value()); return std::get<0>(v_); }
  T&& value() && { assert(has_value()); return std::get<0>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  const std::string& error() const { assert(!has_value()); return std::get<1>(v_).message; }
  Status status() const { return has_value() ? Status() : Status(Error{error()}); }

 private:
  std::variant<T, Error> v_;
};

}  // namespace zenmoe

// Propagate an error from a Status-returning expression.
#define ZENMOE_RETURN_IF_ERROR(expr)                              \
  do {                                                            \
    ::zenmoe::Status zenmoe_status_ = (expr);                     \
    if (!zenmoe_status_.is_ok()) return ::zenmoe::Error{zenmoe_status_.message()}; \
  } while (0)
