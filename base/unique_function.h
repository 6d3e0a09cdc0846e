// UniqueFunction<R(Args...)>: a move-only std::function (C++23's std::move_only_function, which
// C++20 lacks), so callables that own a Promise or a unique_ptr can be stored.
#pragma once

#include <memory>
#include <type_traits>
#include <utility>

namespace npuflow {

template <typename Signature>
class UniqueFunction;

template <typename R, typename... Args>
class UniqueFunction<R(Args...)> {
 public:
  UniqueFunction() = default;
  template <typename F, typename = std::enable_if_t<!std::is_same_v<std::decay_t<F>, UniqueFunction> &&
                                                    std::is_invocable_r_v<R, F&, Args...>>>
  UniqueFunction(F&& fn)  // NOLINT: implicit, like std::function
      : impl_(std::make_unique<Impl<std::decay_t<F>>>(std::forward<F>(fn))) {}

  UniqueFunction(UniqueFunction&&) noexcept = default;
  UniqueFunction& operator=(UniqueFunction&&) noexcept = default;

  explicit operator bool() const { return impl_ != nullptr; }
  R operator()(Args... args) { return impl_->Call(std::forward<Args>(args)...); }

 private:
  struct Base {
    virtual ~Base() = default;
    virtual R Call(Args... args) = 0;
  };
  template <typename F>
  struct Impl final : Base {
    template <typename G>
    explicit Impl(G&& g) : fn(std::forward<G>(g)) {}
    R Call(Args... args) override { return fn(std::forward<Args>(args)...); }
    F fn;
  };
  std::unique_ptr<Base> impl_;
};

}  // namespace npuflow
