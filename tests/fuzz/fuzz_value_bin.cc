// libFuzzer target: a value bin, the weight file FileConstant nodes read (docs/external_weights.md),
// through both of its readers. The input is the file; the graph and regions around it are fixed
// (weights_fixture.h).
//
//   compile: ConvertFileConstantToConst (`--external_weight 0`, and the first step of modes 1 and
//     2), the file named by file_id through ge.exec.value_bins, by location and by file_path. A
//     node it turns into a Const must hold the file's bytes at its offset.
//   load: the WeightLoaderActor (weights/weight_loader.h) on a simulated device started once per
//     process (deterministic mode: reads run inline). A plain file loads with --verify_weights,
//     each region checked against the SHA-256 of the seed's bytes there. An AES-256-GCM envelope
//     loads with the fixed key, once as it is (its header and tag checked) and once retagged
//     (RetagEnvelope) so that the decrypted bytes reach the chunking and the verification.
//     Chunks are 100 bytes, so the 1024-byte seed crosses chunk boundaries inside and between
//     regions.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "base/sha256.h"
#include "graph/ir/text_format.h"
#include "npu_sim/runtime.h"
#include "tests/fuzz/fuzz_input.h"
#include "tests/fuzz/retag_envelope.h"
#include "tests/fuzz/weights_fixture.h"
#include "weights/convert.h"
#include "weights/weight_loader.h"

namespace {

using namespace npuflow;
namespace fs = std::filesystem;

[[noreturn]] void Fail(const char* what, const Status& s) {
  std::fprintf(stderr, "fuzz_value_bin: %s: %s\n", what, std::string(s.message()).c_str());
  std::abort();
}

struct Device {
  std::unique_ptr<npu_sim::Runtime> rt;        // declared first: destroyed after the loader
  std::unique_ptr<weights::WeightLoader> loader;
  npu_sim::DevicePtr base;                     // region i lands at base + 128 i
  std::vector<std::string> sha256;             // of the seed's bytes in region i
};

// The seed: the combined file the fixture's Consts convert to (weights_fixture.h).
std::string PristineValueBin(const fs::path& dir) {
  auto g = graph::ParseGraphText(fuzz::kWeightsGraph, "fixture");
  if (!g.ok()) Fail("the fixture graph", g.status());
  auto converted = weights::ConvertConstToFileConstant(
      **g, {.mode = weights::ExternalWeightMode::kCombined, .dir = (dir / "pristine").string(),
            .model_name = std::string(fuzz::kWeightsModelName), .writers = 1});
  if (!converted.ok()) Fail("converting the fixture", converted.status());
  std::ifstream in(dir / "pristine" / fuzz::kCombinedFileName, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

Device& TheDevice() {
  static Device device = [] {
    Device d;
    const std::string seed = PristineValueBin(fuzz::ScratchDir("value-bin"));
    for (const fuzz::ValueBinRegion& r : fuzz::kValueBinRegions) {
      if (r.offset + r.bytes > seed.size()) std::abort();
      d.sha256.push_back(Sha256Hex(seed.data() + r.offset, r.bytes));
    }
    auto rt = npu_sim::Runtime::Create({.chips = {"910B"}, .workers = 1, .deterministic = true});
    if (!rt.ok()) Fail("starting the simulated device", rt.status());
    d.rt = std::move(*rt);
    auto loader = weights::WeightLoader::Create(d.rt.get(), {.chunk_bytes = 100, .staging_chunks = 2});
    if (!loader.ok()) Fail("creating the weight loader", loader.status());
    d.loader = std::move(*loader);
    auto base = d.rt->Malloc(0, 128 * std::size(fuzz::kValueBinRegions));
    if (!base.ok()) Fail("device memory", base.status());
    d.base = *base;
    return d;
  }();
  return device;
}

void ConvertToConsts(const std::string& path, const std::uint8_t* data, std::size_t size) {
  auto g = graph::ParseGraphText(fuzz::ValueBinGraphText(path), "value_bin.pbtxt");
  if (!g.ok()) Fail("the value bin graph", g.status());
  const weights::ValueBins bins = {{std::string(fuzz::kValueBinId), path}};
  if (!weights::ConvertFileConstantToConst(**g, bins).ok()) return;
  for (const fuzz::ValueBinRegion& r : fuzz::kValueBinRegions) {
    const graph::Node* node = (*g)->FindNode(r.node);
    auto value = node->op().Attr<graph::Tensor>("value");
    if (!value.ok() || r.offset + r.bytes > size || value->data.size() != r.bytes ||
        std::memcmp(value->data.data(), data + r.offset, r.bytes) != 0) {
      std::fprintf(stderr, "node '%s' did not get the file's %llu bytes at offset %llu\n", r.node,
                   static_cast<unsigned long long>(r.bytes), static_cast<unsigned long long>(r.offset));
      std::abort();
    }
  }
}

void Load(const std::string& path, const AesKey* key) {
  Device& d = TheDevice();
  weights::WeightLoadRequest request{.device = 0, .path = path, .verify = true};
  if (key != nullptr) request.key = *key;
  for (std::size_t i = 0; i < std::size(fuzz::kValueBinRegions); ++i) {
    const fuzz::ValueBinRegion& r = fuzz::kValueBinRegions[i];
    request.regions.push_back({.file_offset = r.offset, .length = r.bytes, .dst = d.base + 128 * i,
                               .sha256 = d.sha256[i], .name = r.node});
  }
  (void)d.loader->Load(std::move(request)).Get();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const std::string path = (fuzz::ScratchDir("value-bin") / "value.bin").string();
  static const AesKey key = fuzz::FuzzKey();
  (void)TheDevice();
  fuzz::WriteInput(path, data, size);
  ConvertToConsts(path, data, size);

  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  if (!IsEncrypted(bytes)) {
    Load(path, nullptr);
    return 0;
  }
  Load(path, &key);
  std::string retagged(bytes);
  if (!fuzz::RetagEnvelope(retagged, key) || retagged == bytes) return 0;
  fuzz::WriteInput(path, retagged);
  Load(path, &key);
  return 0;
}
