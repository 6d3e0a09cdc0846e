// libFuzzer target: a GPT-2 model file in ggml's legacy format, read as `npuflow gpt2 --model` and
// `npuflow compile --model` read it (models/gpt2/ggml_file.h). The input is the whole file. A file
// the reader accepts has every token looked up and a tensor read back as f32 from the offset the
// reader recorded.
#include <cstddef>
#include <cstdint>

#include "models/gpt2/ggml_file.h"
#include "tests/fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace npuflow;
  static const std::string path = (fuzz::ScratchDir("ggml") / "model.bin").string();
  fuzz::WriteInput(path, data, size);
  (void)gpt2::IsGgmlFile(path);  // how `npuflow compile` tells a ggml file from a graph text
  StatusOr<gpt2::Gpt2File> file = gpt2::ReadGpt2File(path);
  if (!file.ok()) return 0;
  std::size_t token_bytes = 0;
  for (std::size_t id = 0; id < file->vocab.size(); ++id) token_bytes += file->vocab[id].size();
  if (token_bytes != file->vocab.total_bytes()) __builtin_trap();  // the offsets table disagrees with the bytes
  (void)gpt2::ReadGpt2TensorF32(*file, "model/ln_f/b");
  (void)file->head();
  (void)file->weight_bytes();
  return 0;
}
