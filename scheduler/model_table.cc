// ModelManagerActor: the handlers. Plain maps, one handler at a time; nothing here blocks.
#include "scheduler/model_table.h"

#include <deque>
#include <map>
#include <utility>

#include "scheduler/davinci_model.h"
#include "scheduler/model_manager.h"

namespace npuflow::scheduler {
namespace {

using namespace table_msg;

class ModelManagerActor {
 public:
  using Message = TableMsg;
  using Ctx = actors::Context<Message>;

  void Receive(Message& msg, Ctx& ctx) {
    std::visit([&](auto& m) { On(m, ctx); }, msg);
  }

 private:
  struct Shared {
    npu_sim::DevicePtr ptr;
    std::set<std::uint32_t> users;
  };
  struct WaitingLoad {
    BeginLoad req;
    actors::Replier<LoadTicket> reply;
  };

  // ---- the load lease --------------------------------------------------------------------------
  void On(BeginLoad& m, Ctx& ctx) {
    if (finalizing_) {
      ctx.ReplyError(Status::Failed("ModelManager is finalizing: no more loads"));
      return;
    }
    if (load_active_) {
      waiting_.push_back(WaitingLoad{m, ctx.TakeReply<LoadTicket>()});
      return;
    }
    load_active_ = true;
    ctx.Reply(Grant(m));
  }

  LoadTicket Grant(const BeginLoad& m) {
    LoadTicket t;
    t.id = next_id_++;
    // Weight sharing: the new model becomes a user of already loaded weights before anything is
    // unloaded to make room, so recycling their last other user cannot free them under it.
    if (m.share) {
      auto it = shared_.find({m.model, m.device});
      if (it != shared_.end()) {
        t.shared_weights = it->second.ptr;
        it->second.users.insert(t.id);
      } else {
        t.create_shared = true;
      }
    }
    return t;
  }

  void On(EndLoad& m, Ctx& ctx) {
    npu_sim::DevicePtr to_free;
    if (m.model) {
      models_[m.id] = m.model;
      sessions_[m.session].devices.insert(m.device);
      sessions_[m.session].models.insert(m.id);
      if (m.new_shared) {
        Shared& sw = shared_[{m.key, m.device}];
        sw.ptr = m.new_shared;
        sw.users.insert(m.id);
      }
    } else {
      to_free = m.new_shared ? m.new_shared : ReleaseShared(m.id);
    }
    ctx.Reply(to_free);
    NextLoad();
  }

  void NextLoad() {
    load_active_ = false;
    while (!waiting_.empty() && !load_active_) {
      WaitingLoad w = std::move(waiting_.front());
      waiting_.pop_front();
      if (finalizing_) {
        w.reply.Fail(Status::Failed("ModelManager is finalizing: no more loads"));
        continue;
      }
      load_active_ = true;
      w.reply.Reply(Grant(w.req));
    }
    if (!load_active_) {
      for (auto& d : drains_) d.Reply();
      drains_.clear();
    }
  }

  void On(DrainLoads&, Ctx& ctx) {
    finalizing_ = true;
    if (!load_active_) {
      ctx.Reply();
      return;
    }
    drains_.push_back(ctx.TakeReply());
  }

  // ---- recycling -----------------------------------------------------------------------------
  void On(PickVictim& m, Ctx& ctx) {
    Victim v;
    for (const auto& [id, model] : models_) {
      if (model->device() != m.device) continue;
      if (model->has_communication_tasks()) {
        ++v.kept_comm;
        continue;
      }
      if (model->busy()) {
        ++v.kept_busy;
        continue;
      }
      if (!v.model || model->last_used() < v.model->last_used()) v.model = model;
    }
    ctx.Reply(std::move(v));
  }

  // ---- the table -------------------------------------------------------------------------------
  void On(Take& m, Ctx& ctx) {
    Taken t;
    if (auto it = models_.find(m.id); it != models_.end()) {
      t.model = std::move(it->second);
      models_.erase(it);
      for (auto& [sid, s] : sessions_) s.models.erase(m.id);
      t.free_weights = ReleaseShared(m.id);
    } else if (auto h = hybrids_.find(m.id); h != hybrids_.end()) {
      t.hybrid = std::move(h->second);
      hybrids_.erase(h);
    } else {
      ctx.ReplyError(Status::NotFound("no loaded model {}", m.id));
      return;
    }
    ctx.Reply(std::move(t));
  }

  // Drops `id` from the users of shared weights; returns them when it was the last user.
  npu_sim::DevicePtr ReleaseShared(std::uint32_t id) {
    for (auto sw = shared_.begin(); sw != shared_.end(); ++sw) {
      if (sw->second.users.erase(id) == 0) continue;
      if (!sw->second.users.empty()) return {};
      const npu_sim::DevicePtr ptr = sw->second.ptr;
      shared_.erase(sw);
      return ptr;
    }
    return {};
  }

  void On(Get& m, Ctx& ctx) {
    auto it = models_.find(m.id);
    if (it == models_.end()) return ctx.ReplyError(Status::NotFound("no loaded model {}", m.id));
    ctx.Reply(it->second);
  }
  void On(GetHybrid& m, Ctx& ctx) {
    auto it = hybrids_.find(m.id);
    if (it == hybrids_.end()) return ctx.ReplyError(Status::NotFound("no loaded dynamic-shape model {}", m.id));
    ctx.Reply(it->second);
  }
  void On(RegisterHybrid& m, Ctx& ctx) {
    const std::uint32_t id = next_id_++;
    hybrids_[id] = std::move(m.model);
    ctx.Reply(id);
  }
  void On(List&, Ctx& ctx) {
    std::vector<std::uint32_t> ids;
    for (const auto& [id, m] : models_) ids.push_back(id);
    for (const auto& [id, m] : hybrids_) ids.push_back(id);
    ctx.Reply(std::move(ids));
  }

  // ---- sessions ------------------------------------------------------------------------------
  void On(BindSession& m, Ctx& ctx) {
    sessions_[m.session].devices.insert(m.device);
    ctx.Reply();
  }
  void On(SessionDevices& m, Ctx& ctx) {
    auto it = sessions_.find(m.session);
    ctx.Reply(it == sessions_.end() ? std::set<int>{} : it->second.devices);
  }
  void On(TakeSession& m, Ctx& ctx) {
    std::set<std::uint32_t> ids;
    if (auto it = sessions_.find(m.session); it != sessions_.end()) {
      ids = std::move(it->second.models);
      sessions_.erase(it);
    }
    ctx.Reply(std::move(ids));
  }

  struct SessionEntry {
    std::set<int> devices;
    std::set<std::uint32_t> models;
  };
  std::uint32_t next_id_ = 1;
  std::map<std::uint32_t, std::shared_ptr<DavinciModel>> models_;
  std::map<std::uint32_t, std::shared_ptr<HybridModel>> hybrids_;
  std::map<std::uint64_t, SessionEntry> sessions_;
  std::map<std::pair<const graph::CompiledModel*, int>, Shared> shared_;
  bool load_active_ = false;
  bool finalizing_ = false;
  std::deque<WaitingLoad> waiting_;
  std::vector<actors::Replier<void>> drains_;
};

}  // namespace

actors::Address<TableMsg> SpawnModelTable(actors::System& system) {
  return system.Spawn<ModelManagerActor>("model manager");
}

}  // namespace npuflow::scheduler
