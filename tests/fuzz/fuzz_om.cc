// libFuzzer target: a plain .om model file, read as `npuflow run --om` and `npuflow info` read it
// (graph/model_file/model_file.h: ReadModelFile), then described as `npuflow info` does.
//
// Each input is read twice. First as it is: the header's checks (magic, version, flags, payload
// size, SHA-256). Then with the header's payload size and SHA-256 set to match the bytes after
// the 56-byte header, so that a mutated payload gets past the checksum to the protobuf parser
// and the model's consistency checks; without this, almost every mutation of the payload would
// stop at the checksum.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "base/sha256.h"
#include "graph/model_file/model_file.h"
#include "tests/fuzz/describe_model.h"
#include "tests/fuzz/fuzz_input.h"

namespace {

using namespace npuflow;

void ReadAndDescribe(const std::string& path) {
  StatusOr<graph::CompiledModel> model = graph::ReadModelFile(path);
  if (model.ok()) (void)fuzz::DescribeLikeInfo(*model);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const std::string path = (fuzz::ScratchDir("om") / "model.om").string();
  fuzz::WriteInput(path, data, size);
  ReadAndDescribe(path);

  if (size < graph::kModelFileHeaderBytes) return 0;
  std::string sealed(reinterpret_cast<const char*>(data), size);
  const std::uint64_t payload = size - graph::kModelFileHeaderBytes;
  for (int i = 0; i < 8; ++i) sealed[16 + i] = static_cast<char>((payload >> (8 * i)) & 0xff);
  const Sha256Digest digest = Sha256(std::string_view(sealed).substr(graph::kModelFileHeaderBytes));
  std::memcpy(sealed.data() + 24, digest.data(), digest.size());
  if (sealed.compare(0, graph::kModelFileHeaderBytes, reinterpret_cast<const char*>(data),
                     graph::kModelFileHeaderBytes) == 0)
    return 0;  // the header was already right: the first read saw this file
  fuzz::WriteInput(path, sealed);
  ReadAndDescribe(path);
  return 0;
}
