#include "scheduler/session_actor.h"

#include <map>

#include <fmt/format.h>

namespace npuflow::scheduler {
namespace {

using namespace session_msg;

class SessionActor {
 public:
  using Message = SessionMsg;
  using Ctx = actors::Context<Message>;

  explicit SessionActor(std::uint64_t id) : id_(id) {}

  void Receive(Message& msg, Ctx& ctx) {
    std::visit([&](auto& m) { On(m, ctx); }, msg);
  }

 private:
  Status Finalized() const { return Status::Failed("session {} is finalized", id_); }

  void On(Insert& m, Ctx& ctx) {
    if (finalized_) return ctx.ReplyError(Finalized());
    if (!graphs_.emplace(m.id, std::move(m.node)).second) {
      if (m.use.empty()) return ctx.ReplyError(Status::ParamInvalid("session {}: graph id {} is already in use", id_, m.id));
      return ctx.ReplyError(Status::ParamInvalid("session {}: {}: the id is in use", id_, m.use));
    }
    ctx.Reply();
  }

  void On(Use& m, Ctx& ctx) {
    if (finalized_) return ctx.ReplyError(Finalized());
    auto it = graphs_.find(m.id);
    if (it == graphs_.end()) return ctx.ReplyError(Status::NotFound("session {}: graph {} does not exist", id_, m.id));
    const NodePtr& node = it->second;
    // No holder, so nobody writes the node: a loaded model may be used without the lease.
    if (m.run && !node->leased && node->model != nullptr && !node->model->unloaded())
      return ctx.Reply(Used{node, node->model, nullptr});
    if (m.run && !node->leased && node->v2 != nullptr) return ctx.Reply(Used{node, nullptr, node->v2});
    if (m.run && !node->leased && node->pipeline != nullptr)
      return ctx.Reply(Used{node, nullptr, nullptr, node->pipeline});
    Grant(node, ctx, Used{node, nullptr});
  }

  void On(Lease& m, Ctx& ctx) { Grant(m.node, ctx, Used{m.node, nullptr}); }

  // Answers now if the node is free, else when the holders before this caller are done.
  void Grant(const NodePtr& node, Ctx& ctx, Used used) {
    if (!node->leased) {
      node->leased = true;
      return ctx.Reply(std::move(used));
    }
    node->waiting.push_back(ctx.TakeReply<Used>());
  }

  void On(Release& m, Ctx&) {
    Session::GraphNode& node = *m.node;
    if (node.waiting.empty()) {
      node.leased = false;
      return;
    }
    actors::Replier<Used> next = std::move(node.waiting.front());
    node.waiting.pop_front();
    next.Reply(Used{std::move(m.node), nullptr});  // the lease passes on
  }

  void On(Remove& m, Ctx& ctx) {
    if (finalized_) return ctx.ReplyError(Finalized());
    auto it = graphs_.find(m.id);
    if (it == graphs_.end()) return ctx.ReplyError(Status::NotFound("session {}: graph {} does not exist", id_, m.id));
    NodePtr node = std::move(it->second);
    graphs_.erase(it);
    ctx.Reply(std::move(node));
  }

  void On(session_msg::Finalize&, Ctx& ctx) {
    session_msg::Finalized out;
    out.first = !finalized_;
    finalized_ = true;
    for (auto& [id, node] : graphs_) out.nodes.push_back(std::move(node));
    graphs_.clear();
    ctx.Reply(std::move(out));
  }

  const std::uint64_t id_;
  std::map<std::uint32_t, NodePtr> graphs_;
  bool finalized_ = false;
};

}  // namespace

actors::Address<SessionMsg> SpawnSessionActor(actors::System& system, std::uint64_t session_id) {
  return system.Spawn<SessionActor>(fmt::format("session{}", session_id), session_id);
}

}  // namespace npuflow::scheduler
