#pragma once
// Error helpers: every rejected input throws std::invalid_argument or std::out_of_range whose
// message names the parameter, the bad value and what was expected, e.g.
//   "inferkit: top_p = 1.5 is invalid: must be in (0, 1]".

#include <cmath>
#include <concepts>
#include <cstddef>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

namespace inferkit {

namespace detail {

template <class T>
std::string describe_value(const T& value) {
  std::ostringstream out;
  if constexpr (std::is_floating_point_v<T>) {
    out.precision(std::numeric_limits<T>::max_digits10);
    out << value;
  } else if constexpr (std::is_same_v<T, bool>) {
    out << (value ? "true" : "false");
  } else if constexpr (std::is_same_v<T, char> || std::is_same_v<T, signed char> || std::is_same_v<T, unsigned char>) {
    out << static_cast<int>(value);
  } else if constexpr (std::is_pointer_v<T> && !std::is_convertible_v<T, const char*>) {
    out << (value == nullptr ? "nullptr" : "non-null pointer");
  } else {
    out << value;
  }
  return out.str();
}

template <class T>
std::string error_message(std::string_view parameter, const T& value, std::string_view requirement) {
  std::string message = "inferkit: ";
  message += parameter;
  message += " = ";
  message += describe_value(value);
  message += " is invalid: ";
  message += requirement;
  return message;
}

}  // namespace detail

/// Throws std::invalid_argument naming `parameter`, its `value` and the `requirement` it broke.
template <class T>
[[noreturn]] void throw_invalid_argument(std::string_view parameter, const T& value, std::string_view requirement) {
  throw std::invalid_argument(detail::error_message(parameter, value, requirement));
}

/// Throws std::out_of_range naming `parameter`, its `value` and the valid range.
template <class T>
[[noreturn]] void throw_out_of_range(std::string_view parameter, const T& value, std::string_view requirement) {
  throw std::out_of_range(detail::error_message(parameter, value, requirement));
}

/// Checks `condition`; on failure throws std::invalid_argument (message built only then).
template <class T>
inline void require(bool condition, std::string_view parameter, const T& value, std::string_view requirement) {
  if (!condition) [[unlikely]]
    throw_invalid_argument(parameter, value, requirement);
}

/// Checks 0 <= index < size; on failure throws std::out_of_range.
/// Returns a count after checking it is > 0: for constructors whose first members are sized
/// from it, so bad input reports its name before any allocation.
template <std::integral I>
inline I require_positive(I value, std::string_view parameter) {
  require(value > 0, parameter, value, "must be > 0");
  return value;
}

template <std::integral I, std::integral S>
inline void require_index(I index, S size, std::string_view parameter) {
  if (std::cmp_less(index, 0) || !std::cmp_less(index, size)) [[unlikely]] {
    throw_out_of_range(parameter, index, "must be in [0, " + std::to_string(size) + ")");
  }
}

/// Checks that a floating-point value is finite.
template <std::floating_point F>
inline void require_finite(F value, std::string_view parameter) {
  require(std::isfinite(value), parameter, value, "must be finite");
}

}  // namespace inferkit
