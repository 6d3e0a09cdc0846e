// The standalone benchmark binary as a user runs it with a filter: it measures only what the filter
// names and leaves no file behind. Registering every area must not create anything (the GPT-2
// area's 750 MB of models are written on first use, inside a GPT-2 benchmark).
#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <sys/wait.h>

namespace {

namespace fs = std::filesystem;

struct CommandRun {
  int exit_code = -1;
  std::string output;
};

CommandRun Shell(const std::string& command) {
  CommandRun run;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return run;
  std::array<char, 4096> buf;
  while (std::size_t n = fread(buf.data(), 1, buf.size(), pipe)) run.output.append(buf.data(), n);
  const int status = pclose(pipe);
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return run;
}

// Every file and directory under `dir`, as paths relative to it.
std::vector<std::string> Contents(const fs::path& dir) {
  std::vector<std::string> found;
  for (const auto& e : fs::recursive_directory_iterator(dir)) found.push_back(fs::relative(e.path(), dir).string());
  return found;
}

TEST(BenchmarksFilterTest, FilteredRunWritesNoFile) {
  std::string pattern = (fs::temp_directory_path() / "npuflow_bench_filter_XXXXXX").string();
  ASSERT_NE(mkdtemp(pattern.data()), nullptr);
  const fs::path root = pattern;
  // Every place a benchmark writes to by default: the user cache (GPT-2 models), the home directory
  // it falls back to, the temp directory and the weights area's directory.
  const std::vector<std::string> vars = {"XDG_CACHE_HOME", "HOME", "TMPDIR", "NPUFLOW_BENCH_DIR"};
  std::string env = "env";
  for (const std::string& var : vars) {
    fs::create_directories(root / var);
    env += " " + var + "='" + (root / var).string() + "'";
  }

  const CommandRun r =
      Shell(env + " " NPUFLOW_BENCHMARKS_BIN " --benchmark_filter=BM_RawHop --benchmark_min_time=0.01");

  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("BM_RawHop"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("Gpt2"), std::string::npos) << r.output;
  for (const std::string& var : vars)
    EXPECT_EQ(Contents(root / var), std::vector<std::string>{}) << "written under $" << var;
  std::error_code ec;
  fs::remove_all(root, ec);
}

}  // namespace
