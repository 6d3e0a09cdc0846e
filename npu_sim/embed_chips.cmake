# Writes ${OUT}: the chip JSON files of ${DIR} as C++ string literals, so the binary carries them.
file(GLOB chips "${DIR}/*.json")
list(SORT chips)
set(body "")
foreach(f ${chips})
  get_filename_component(name "${f}" NAME_WE)
  file(READ "${f}" text)
  string(APPEND body "      {\"${name}\", R\"npuflowchip(${text})npuflowchip\"},\n")
endforeach()
file(WRITE "${OUT}.tmp" "// Generated from npu_sim/chips/*.json. Do not edit.
#include <string>
#include <utility>
#include <vector>
namespace npuflow::npu_sim {
const std::vector<std::pair<std::string, std::string>>& EmbeddedChips() {
  static const std::vector<std::pair<std::string, std::string>> chips = {
${body}  };
  return chips;
}
}  // namespace npuflow::npu_sim
")
execute_process(COMMAND ${CMAKE_COMMAND} -E copy_if_different "${OUT}.tmp" "${OUT}")
