#include "graph/ops/tiling_context.h"

#include <fmt/format.h>

#include <cstring>

#include "graph/ir/text_format.h"
#include "proto/graph.pb.h"

namespace npuflow::graph {

namespace {
constexpr std::uint32_t kOldTilingContextMagic = 0x4B4E5354;  // "TSNK": 32 bytes, no block costs
}  // namespace

StatusOr<std::vector<std::uint8_t>> EncodeTilingContext(const OpDesc& op, const std::vector<TensorDesc>& inputs,
                                                        std::uint64_t workspace_bytes, const TileTarget& target) {
  proto::GraphDef g;
  g.set_name("tiling_context");
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    proto::NodeDef* in = g.add_node();
    in->set_name(fmt::format("in{}", i));
    in->set_op("Data");
    proto::TensorDescDef* d = in->add_output();
    d->set_dtype(DataTypeToProto(inputs[i].dtype));
    *d->mutable_shape() = ShapeToProto(inputs[i].shape);
  }
  proto::NodeDef* nd = g.add_node();
  nd->set_name(op.name());
  nd->set_op(op.type());
  for (std::size_t i = 0; i < inputs.size(); ++i) nd->add_input(fmt::format("in{}", i));
  for (const auto& [key, value] : op.attrs())
    if (!key.starts_with('_')) (*nd->mutable_attr())[key] = AttrValueToProto(value);
  std::string info;
  if (!g.SerializeToString(&info))
    return Status::Internal("node '{}': the tiling context's compute-node info did not serialize", op.name());
  TilingContextHeader h;
  h.workspace_bytes = workspace_bytes;
  h.core_count = static_cast<std::uint32_t>(target.core_count);
  h.block_dispatch_ns = static_cast<float>(target.costs.dispatch_ns);
  h.block_host_gbps = static_cast<float>(target.costs.bytes_per_ns);
  h.block_host_gflops = static_cast<float>(target.costs.flops_per_ns);
  h.info_bytes = static_cast<std::uint32_t>(info.size());
  std::vector<std::uint8_t> out(sizeof(h) + info.size());
  std::memcpy(out.data(), &h, sizeof(h));
  std::memcpy(out.data() + sizeof(h), info.data(), info.size());
  return out;
}

Status CheckTilingContextMagic(std::uint32_t magic, std::string_view what) {
  if (magic == kTilingContextMagic) return Status::Ok();
  if (magic == kOldTilingContextMagic)
    return Status::DataCorrupted("{}: a tiling context of an older npuflow's layout (magic 0x{:08x}, before the "
                                 "block-split costs): recompile the model",
                                 what, magic);
  return Status::DataCorrupted("{}: magic 0x{:08x}, expected 0x{:08x}", what, magic, kTilingContextMagic);
}

TileTarget TileTargetOf(const TilingContextHeader& h) {
  return {static_cast<int>(h.core_count), {h.block_dispatch_ns, h.block_host_gbps, h.block_host_gflops}};
}

StatusOr<TilingContextInfo> DecodeTilingContext(std::span<const std::uint8_t> bytes) {
  TilingContextInfo out;
  if (bytes.size() < sizeof(TilingContextHeader))
    return Status::DataCorrupted("tiling context: {} bytes, shorter than its {}-byte header", bytes.size(),
                                 sizeof(TilingContextHeader));
  std::memcpy(&out.header, bytes.data(), sizeof(TilingContextHeader));
  NPUFLOW_RETURN_IF_ERROR(CheckTilingContextMagic(out.header.magic, "tiling context"));
  if (out.header.info_bytes > bytes.size() - sizeof(TilingContextHeader))
    return Status::DataCorrupted("tiling context: its compute-node info ({} bytes) runs past its {} bytes",
                                 out.header.info_bytes, bytes.size());
  proto::GraphDef g;
  if (!g.ParseFromArray(bytes.data() + sizeof(TilingContextHeader), static_cast<int>(out.header.info_bytes)) ||
      g.node_size() < 1)
    return Status::DataCorrupted("tiling context: its compute-node info does not parse");
  const proto::NodeDef& nd = g.node(g.node_size() - 1);
  const std::string where = fmt::format("tiling context of node '{}'", nd.name());
  out.op = OpDesc(nd.name(), nd.op());
  for (const auto& [key, value] : nd.attr()) {
    NPUFLOW_ASSIGN_OR_RETURN(AttrValue v, AttrValueFromProto(value, where));
    out.op.SetAttr(key, std::move(v));
  }
  if (nd.input_size() != g.node_size() - 1)
    return Status::DataCorrupted("{}: {} inputs but {} input descriptors", where, nd.input_size(), g.node_size() - 1);
  for (int i = 0; i + 1 < g.node_size(); ++i) {
    const proto::NodeDef& in = g.node(i);
    if (in.output_size() != 1) return Status::DataCorrupted("{}: input {} has no descriptor", where, i);
    TensorDesc d;
    NPUFLOW_ASSIGN_OR_RETURN(d.dtype, DataTypeFromProto(in.output(0).dtype(), where));
    NPUFLOW_ASSIGN_OR_RETURN(d.shape, ShapeFromProto(in.output(0).shape(), where));
    out.inputs.push_back(std::move(d));
  }
  return out;
}

}  // namespace npuflow::graph
