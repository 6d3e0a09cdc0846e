// Chain: one value slot of an execute graph (GE's Chain / AsyncAnyValue).
//
// A chain holds either an 8-byte word (an int, a double, a device address, a pointer it does not
// own) or one owned heap object with its deleter. Kernels read their inputs' chains and write
// their outputs' chains; the executor only hands chains around. A word costs no allocation, so a
// kernel that passes a shape id, an address or a flag keeps the executor loop allocation-free.
#pragma once

#include <cstdint>
#include <cstring>
#include <new>
#include <type_traits>
#include <utility>

namespace npuflow::exe {

class Chain {
 public:
  Chain() = default;
  Chain(const Chain&) = delete;
  Chain& operator=(const Chain&) = delete;
  Chain(Chain&& other) noexcept : word_(other.word_), deleter_(std::exchange(other.deleter_, nullptr)) {}
  Chain& operator=(Chain&& other) noexcept {
    if (this != &other) {
      Reset();
      word_ = other.word_;
      deleter_ = std::exchange(other.deleter_, nullptr);
    }
    return *this;
  }
  ~Chain() { Reset(); }

  // The word. For a trivially copyable T of at most 8 bytes (int64, double, a pointer).
  template <typename T>
  T Get() const {
    static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= sizeof(std::uint64_t));
    T v;
    std::memcpy(&v, &word_, sizeof(T));
    return v;
  }
  template <typename T>
  void Set(T v) {
    static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= sizeof(std::uint64_t));
    Reset();
    word_ = 0;
    std::memcpy(&word_, &v, sizeof(T));
  }
  std::uint64_t word() const { return word_; }

  // An owned object, replacing whatever the chain held. The executor never looks inside; the
  // kernels that produce and consume the chain agree on its type.
  template <typename T, typename... Args>
  T& Emplace(Args&&... args) {
    Reset();
    T* object = new T(std::forward<Args>(args)...);
    word_ = reinterpret_cast<std::uint64_t>(object);
    deleter_ = &DeleteAs<T>;
    return *object;
  }
  // Whether the chain owns an object made by Emplace<T> (one deleter per type).
  template <typename T>
  bool Holds() const {
    return deleter_ == &DeleteAs<T>;
  }
  // The owned object, or null when the chain holds a word or nothing.
  template <typename T>
  T* Object() const {
    return deleter_ ? reinterpret_cast<T*>(word_) : nullptr;
  }
  bool owns_object() const { return deleter_ != nullptr; }

  void Reset() {
    if (deleter_) std::exchange(deleter_, nullptr)(word_);
    word_ = 0;
  }

 private:
  template <typename T>
  static void DeleteAs(std::uint64_t w) {
    delete reinterpret_cast<T*>(w);
  }

  std::uint64_t word_ = 0;
  void (*deleter_)(std::uint64_t) = nullptr;
};

}  // namespace npuflow::exe
