// The fixed weights around the fuzzed bytes of the weights targets, and what the seed generator
// writes from them, so that the seeds are files these targets would meet.
//
// kWeightsGraph holds two Consts, a (f32[4, 4], 64 bytes) and b (f32[8], 32 bytes). Converted in
// mode 2 (ConvertConstToFileConstant, model name "fuzz") they make the combined file
// "fuzz_weight_combined": a at offset 0, b at offset 512, each zero padded to the next 512-byte
// boundary: 1024 bytes. That file is the value bin of fuzz_value_bin: the FileConstants of
// ValueBinGraphText read it through each way a FileConstant names its file (file_id through the
// value bins, location, file_path), at offsets inside a, inside the padding and at b.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <fmt/format.h>

namespace npuflow::fuzz {

inline constexpr std::string_view kWeightsGraph = R"pb(
name: "fuzz"
node { name: "x" op: "Data" attr { key: "dtype" value { type: DT_FLOAT } }
       attr { key: "shape" value { shape { dim { size: 1 } dim { size: 4 } } } } }
node { name: "a" op: "Const" attr { key: "value" value { tensor { dtype: DT_FLOAT
       shape { dim { size: 4 } dim { size: 4 } }
       float_val: 1 float_val: 2 float_val: 3 float_val: 4 float_val: 5 float_val: 6 float_val: 7 float_val: 8
       float_val: 9 float_val: 10 float_val: 11 float_val: 12 float_val: 13 float_val: 14 float_val: 15
       float_val: 16 } } } }
node { name: "b" op: "Const" attr { key: "value" value { tensor { dtype: DT_FLOAT shape { dim { size: 8 } }
       float_val: -1 float_val: -2 float_val: -3 float_val: -4 float_val: 0.5 float_val: 0.25 float_val: 0.125
       float_val: 0 } } } }
node { name: "y" op: "MatMul" input: "x" input: "a" }
node { name: "out" op: "NetOutput" input: "y" input: "b" }
)pb";

inline constexpr std::string_view kWeightsModelName = "fuzz";
inline constexpr std::string_view kCombinedFileName = "fuzz_weight_combined";
inline constexpr std::string_view kValueBinId = "bin";

// One FileConstant of ValueBinGraphText: where it reads the value bin, and how it names it.
struct ValueBinRegion {
  const char* node;
  const char* names_file_by;  // "file_id", "location" or "file_path"
  const char* dtype;          // the text format's name
  const char* dims;           // the shape's dims in the text format
  std::uint64_t offset;
  std::uint64_t bytes;
};

inline constexpr ValueBinRegion kValueBinRegions[] = {
    {"a", "file_id", "DT_FLOAT", "dim { size: 4 } dim { size: 4 }", 0, 64},   // a, through the value bins
    {"b", "location", "DT_FLOAT", "dim { size: 8 }", 512, 32},                // b
    {"pad", "file_path", "DT_UINT8", "dim { size: 3 }", 100, 3},              // a's zero padding (length 0)
    {"odd", "location", "DT_FLOAT16", "dim { size: 2 }", 7, 4},               // inside a, unaligned
};

// file_path's node gives length 0: the tensor's size.
inline bool FileFromName(const ValueBinRegion& r) { return std::string_view(r.names_file_by) == "file_path"; }

// The graph whose FileConstants read `path` as kValueBinRegions says (file_id kValueBinId).
inline std::string ValueBinGraphText(const std::string& path) {
  std::string text = "name: \"value_bin\"\n";
  std::string outputs;
  for (const ValueBinRegion& r : kValueBinRegions) {
    const std::string file = std::string_view(r.names_file_by) == "file_id" ? std::string(kValueBinId) : path;
    text += fmt::format(
        "node {{ name: \"{}\" op: \"FileConstant\"\n"
        "  attr {{ key: \"{}\" value {{ s: \"{}\" }} }}\n"
        "  attr {{ key: \"offset\" value {{ i: {} }} }} attr {{ key: \"length\" value {{ i: {} }} }}\n"
        "  attr {{ key: \"dtype\" value {{ type: {} }} }} attr {{ key: \"shape\" value {{ shape {{ {} }} }} }} }}\n",
        r.node, r.names_file_by, file, r.offset, FileFromName(r) ? 0 : r.bytes, r.dtype, r.dims);
    outputs += fmt::format(" input: \"{}\"", r.node);
  }
  return text + "node { name: \"out\" op: \"NetOutput\"" + outputs + " }\n";
}

}  // namespace npuflow::fuzz
