// Message kinds: the name a delivery tap, a log or an error message shows for a message.
//
// A message type names its kind with `static constexpr std::string_view kKind = "...";`; without
// one, the kind is the type's C++ name. For a std::variant message, the kind is the active
// alternative's.
#pragma once

#include <string_view>
#include <type_traits>
#include <variant>

namespace npuflow::actors {

namespace detail {

template <typename T>
constexpr std::string_view TypeName() {
  // "... [with T = npuflow::Foo; std::string_view = ...]" -> "npuflow::Foo"
  std::string_view p = __PRETTY_FUNCTION__;
  auto start = p.find("T = ");
  if (start == std::string_view::npos) return "message";
  start += 4;
  auto end = p.find_first_of(";]", start);
  return p.substr(start, end - start);
}

template <typename T, typename = void>
struct HasKind : std::false_type {};
template <typename T>
struct HasKind<T, std::void_t<decltype(T::kKind)>> : std::true_type {};

template <typename T>
struct IsVariant : std::false_type {};
template <typename... Ts>
struct IsVariant<std::variant<Ts...>> : std::true_type {};

}  // namespace detail

template <typename T>
std::string_view KindOf(const T& message) {
  if constexpr (detail::IsVariant<T>::value) {
    return std::visit([](const auto& alt) { return KindOf(alt); }, message);
  } else if constexpr (detail::HasKind<T>::value) {
    return T::kKind;
  } else {
    return detail::TypeName<T>();
  }
}

}  // namespace npuflow::actors
