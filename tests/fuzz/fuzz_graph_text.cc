// libFuzzer target: a graph in the text format, read as `npuflow compile --model g.pbtxt` reads it
// (graph/ir/text_format.h: ReadGraphTextFile), then printed as `--dump-after` prints it. A graph
// the reader accepts must print, and its printed text must read back to the same text: what
// `--dump-after ... --dump-format pbtxt` writes is itself a valid input.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "graph/ir/text_format.h"
#include "tests/fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace npuflow;
  static const std::string path = (fuzz::ScratchDir("graph-text") / "graph.pbtxt").string();
  fuzz::WriteInput(path, data, size);
  auto graph = graph::ReadGraphTextFile(path);
  if (!graph.ok()) return 0;
  (void)graph::PrintGraphSummary(**graph);
  const std::string text = graph::PrintGraphText(**graph);
  auto again = graph::ParseGraphText(text, "printed graph");
  if (!again.ok() || graph::PrintGraphText(**again) != text) {
    std::fprintf(stderr, "the printed graph does not read back the same: %s\n--- printed:\n%s\n",
                 again.ok() ? "it prints differently" : std::string(again.status().message()).c_str(), text.c_str());
    std::abort();
  }
  return 0;
}
