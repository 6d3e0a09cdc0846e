// The delivery tap: one hook that sees every delivery and may delay it.
#pragma once

#include <chrono>
#include <cstdint>
#include <string_view>

namespace npuflow::actors {

using ActorId = std::uint32_t;
inline constexpr ActorId kExternal = 0;  // a sender that is not an actor (a user thread, a fiber)

struct Delivery {
  ActorId sender;
  ActorId receiver;
  std::string_view receiver_name;
  std::string_view kind;
};

// Installed with System::SetTap. OnDelivery runs on the worker about to deliver, concurrently for
// different receivers, so it must be thread-safe. Returning a positive duration postpones the
// delivery: the receiver parks with the message at the head of its mailbox (per-sender FIFO and
// one-at-a-time still hold) and resumes after that much wall time (in deterministic mode: after
// every delivery already queued, with no wall time). A postponed message is delivered then and is
// not offered to the tap a second time.
// With no tap installed, a delivery costs one relaxed load of the tap pointer.
class DeliveryTap {
 public:
  virtual ~DeliveryTap() = default;
  virtual std::chrono::nanoseconds OnDelivery(const Delivery& delivery) = 0;
};

}  // namespace npuflow::actors
