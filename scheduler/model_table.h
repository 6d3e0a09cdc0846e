// The ModelManager's state as an actor (ModelManagerActor, private to scheduler/): the table of
// loaded models, the dynamic-shape registry, the sessions' devices and models, the shared
// weights and the load lease (one load at a time). ModelManager's methods are host-side calls that
// ask it; the blocking work of a load (recycling, Init, freeing) runs on the caller while it holds
// the lease, so a fiber waiting for the lease yields instead of blocking its thread on a mutex.
#pragma once

#include <cstdint>
#include <memory>
#include <set>
#include <string_view>
#include <variant>
#include <vector>

#include "actors/system.h"
#include "graph/model_file/compiled_model.h"
#include "npu_sim/runtime.h"

namespace npuflow::scheduler {

class DavinciModel;
class HybridModel;

namespace table_msg {
// Ask<LoadTicket>: answered when no other load holds the lease (Failed once finalizing).
struct BeginLoad {
  static constexpr std::string_view kKind = "BeginLoad";
  const graph::CompiledModel* model = nullptr;  // the weight-sharing key, with the device
  int device = 0;
  bool share = false;
};
struct LoadTicket {
  std::uint32_t id = 0;
  npu_sim::DevicePtr shared_weights;  // already loaded: use these (this load is now a user)
  bool create_shared = false;         // sharing asked and none loaded: the load creates them
};
// Ask<Victim>: the least recently used model of the device that may be unloaded.
struct PickVictim {
  static constexpr std::string_view kKind = "PickVictim";
  int device = 0;
};
struct Victim {
  std::shared_ptr<DavinciModel> model;  // null: none
  std::size_t kept_comm = 0, kept_busy = 0;
};
// Ask<DevicePtr>: the load's outcome; releases the lease. On failure (no model) the load's use of
// shared weights ends: the reply is weights to free (null if other users remain).
struct EndLoad {
  static constexpr std::string_view kKind = "EndLoad";
  std::uint32_t id = 0;
  std::shared_ptr<DavinciModel> model;
  npu_sim::DevicePtr new_shared;  // the shared weights this load created (registered on success)
  int device = 0;
  std::uint64_t session = 0;
  bool share = false;
  const graph::CompiledModel* key = nullptr;
};
// Ask<Taken>: removes a model from the table (NotFound if absent).
struct Take {
  static constexpr std::string_view kKind = "Take";
  std::uint32_t id = 0;
};
struct Taken {
  std::shared_ptr<DavinciModel> model;
  std::shared_ptr<HybridModel> hybrid;
  npu_sim::DevicePtr free_weights;  // the last user of shared weights went: free them
};
struct Get {  // Ask<std::shared_ptr<DavinciModel>>
  static constexpr std::string_view kKind = "Get";
  std::uint32_t id = 0;
};
struct GetHybrid {  // Ask<std::shared_ptr<HybridModel>>
  static constexpr std::string_view kKind = "GetHybrid";
  std::uint32_t id = 0;
};
struct RegisterHybrid {  // Ask<std::uint32_t>
  static constexpr std::string_view kKind = "RegisterHybrid";
  std::shared_ptr<HybridModel> model;
};
struct List {  // Ask<std::vector<std::uint32_t>>; with hybrids
  static constexpr std::string_view kKind = "List";
};
struct BindSession {  // Ask<void>
  static constexpr std::string_view kKind = "BindSession";
  std::uint64_t session = 0;
  int device = 0;
};
struct SessionDevices {  // Ask<std::set<int>>
  static constexpr std::string_view kKind = "SessionDevices";
  std::uint64_t session = 0;
};
struct TakeSession {  // Ask<std::set<std::uint32_t>>: forgets the session, returns its models
  static constexpr std::string_view kKind = "TakeSession";
  std::uint64_t session = 0;
};
struct DrainLoads {  // Ask<void>: answered once no load holds the lease; later loads fail
  static constexpr std::string_view kKind = "DrainLoads";
};
}  // namespace table_msg

using TableMsg = std::variant<table_msg::BeginLoad, table_msg::PickVictim, table_msg::EndLoad, table_msg::Take,
                              table_msg::Get, table_msg::GetHybrid, table_msg::RegisterHybrid, table_msg::List,
                              table_msg::BindSession, table_msg::SessionDevices, table_msg::TakeSession,
                              table_msg::DrainLoads>;

actors::Address<TableMsg> SpawnModelTable(actors::System& system);

}  // namespace npuflow::scheduler
