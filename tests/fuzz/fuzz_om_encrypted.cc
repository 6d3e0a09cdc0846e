// libFuzzer target: an encrypted .om model file (`npuflow compile --encrypt-key`), read with its
// key as `npuflow run --om m.om --key K` reads it (graph/model_file/model_file.h: ReadModelFile
// with a key), then described as `npuflow info --key` does. The key is fixed (FuzzKey); the
// input is the file.
//
// Each input is read twice. First as it is: the envelope's checks (magic, header, size against
// the file, the tag; a changed byte must fail the authentication, never reach the parser). Then
// retagged (RetagEnvelope: the size and tag made to match under the key), so that the
// decryption succeeds and the plaintext, a mutated model file, goes to the model reader.
#include <cstddef>
#include <cstdint>
#include <string>

#include "graph/model_file/model_file.h"
#include "tests/fuzz/describe_model.h"
#include "tests/fuzz/fuzz_input.h"
#include "tests/fuzz/retag_envelope.h"

namespace {

using namespace npuflow;

void ReadAndDescribe(const std::string& path, const AesKey& key) {
  StatusOr<graph::CompiledModel> model = graph::ReadModelFile(path, &key);
  if (model.ok()) (void)fuzz::DescribeLikeInfo(*model);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const std::string path = (fuzz::ScratchDir("om-encrypted") / "model.om").string();
  static const AesKey key = fuzz::FuzzKey();
  fuzz::WriteInput(path, data, size);
  ReadAndDescribe(path, key);

  std::string retagged(reinterpret_cast<const char*>(data), size);
  if (!fuzz::RetagEnvelope(retagged, key) || retagged == std::string_view(reinterpret_cast<const char*>(data), size))
    return 0;
  fuzz::WriteInput(path, retagged);
  ReadAndDescribe(path, key);
  return 0;
}
