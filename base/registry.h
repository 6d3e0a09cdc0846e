// NamedRegistry<Def, Key>: definitions looked up by name (Def::*Key), filled at start-up and read
// concurrently afterwards. Registering a name again replaces the definition in place, so pointers
// handed out stay valid: the last registration wins.
#pragma once

#include <algorithm>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace npuflow {

template <typename Def, std::string Def::*Key>
class NamedRegistry {
 public:
  void Register(Def def) {
    for (auto& d : defs_) {
      if ((*d).*Key == def.*Key) {
        *d = std::move(def);
        return;
      }
    }
    defs_.push_back(std::make_unique<Def>(std::move(def)));
  }

  // Null when no definition has that name.
  const Def* Find(std::string_view name) const {
    for (const auto& d : defs_)
      if ((*d).*Key == name) return d.get();
    return nullptr;
  }

  std::vector<std::string> Names() const {
    std::vector<std::string> out;
    for (const auto& d : defs_) out.push_back((*d).*Key);
    std::sort(out.begin(), out.end());
    return out;
  }

 private:
  std::vector<std::unique_ptr<Def>> defs_;
};

}  // namespace npuflow
