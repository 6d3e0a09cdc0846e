// The .om model file: a CompiledModel on disk.
//
// Layout (all integers little-endian):
//
//   offset  size  field
//        0     8  magic "NPUFLWOM"
//        8     4  u32 format version (kModelFileVersion = 1)
//       12     4  u32 flags: bit 0 = weights embedded; every other bit must be 0
//       16     8  u64 payload size in bytes
//       24    32  SHA-256 of the payload
//       56     *  payload: a serialized proto/model.proto ModelDef, exactly `payload size` bytes
//
// The payload holds everything in CompiledModel: the graph (graph.proto's GraphDef), compile
// options, chip, memory plan, per-stream tasks, event count, input/output IoDefs and the initial
// bytes of the weights, variables and tiling-data segments. The writer sets "weights embedded"
// whenever the weights segment is non-empty; a file without the flag has an empty weights segment.
// External weights are not in the file: FileConstant nodes (the file_constant segment) name their
// weight files (weights/), which live beside the model in "<model dir>/weight/" or elsewhere.
//
// Encrypted model files (`npuflow compile --encrypt-key`): the whole file above (header + payload)
// wrapped in an AES-256-GCM envelope (base/aes_gcm.h), which starts with the magic "NPFWENC1"
// instead of "NPUFLWOM". WriteModelFile encrypts when given a key; ReadModelFile decrypts when the
// file is encrypted and a key is given (a wrong key or a tampered byte fails the authentication),
// and without a key it fails with ParamInvalid "<path>: the model file is encrypted ...: give its
// key". A key given for a plain file is ignored.
//
// Reading checks, in order: the file can be read; the magic; the header is complete; the version;
// the flags; the payload size against the file size (truncated, or trailing bytes); the checksum;
// the protobuf parses; and the model is consistent (known enum values, every MemRef offset within
// its segment, placements and memcpys within their segments, events below the event count, the
// weights / variables / tiling-data bytes equal to their segments' sizes). Every error names the
// file (or `source`) and what was wrong: DataCorrupted for damaged or inconsistent content,
// Unsupported for a version or flags this reader does not know, NotFound for a missing file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "base/aes_gcm.h"
#include "base/status.h"
#include "graph/model_file/compiled_model.h"

namespace npuflow::graph {

inline constexpr std::string_view kModelFileMagic = "NPUFLWOM";
inline constexpr std::uint32_t kModelFileVersion = 1;
inline constexpr std::uint32_t kModelFileFlagWeightsEmbedded = 1u << 0;
inline constexpr std::size_t kModelFileHeaderBytes = 56;

// The whole file (header + payload) in memory. The model is checked as ReadModelFile checks it,
// so a model the reader would reject is never written; errors name "compiled model".
StatusOr<std::string> SerializeModel(const CompiledModel& model);
// A model from the bytes of a whole (plain) file; errors name `source`. Encrypted bytes are a
// ParamInvalid saying so (decrypt them first, or use ReadModelFile with the key).
StatusOr<CompiledModel> ParseModel(std::string_view bytes, std::string_view source);

// Writes atomically: to "<path>.tmp", then renames it over `path`. I/O errors name the path. With
// `key`, the file's bytes are written encrypted (EncryptBytes).
Status WriteModelFile(const CompiledModel& model, const std::string& path, const AesKey* key = nullptr);
// Reads a plain or (with `key`) an encrypted model file; see the top of this file.
StatusOr<CompiledModel> ReadModelFile(const std::string& path, const AesKey* key = nullptr);

}  // namespace npuflow::graph
