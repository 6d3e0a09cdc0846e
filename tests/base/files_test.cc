#include "base/files.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include <gtest/gtest.h>

namespace npuflow {
namespace {

namespace fs = std::filesystem;

fs::path TempDir() {
  fs::path dir = fs::temp_directory_path() / ("npuflow_files_test_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  return dir;
}

std::string ReadAll(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::size_t EntriesIn(const fs::path& dir) {
  return static_cast<std::size_t>(std::distance(fs::directory_iterator(dir), fs::directory_iterator()));
}

TEST(WriteFileAtomically, WritesTheWholeFileWithTheModeLessTheUmask) {
  const fs::path dir = TempDir();
  const std::string path = (dir / "a.bin").string();
  const mode_t old = ::umask(027);
  Status s = WriteFileAtomically(path, [](std::FILE* f, const std::string&) {
    std::fputs("hello", f);
    return Status::Ok();
  });
  ::umask(old);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(ReadAll(path), "hello");
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0640u);  // 0644 less 027
  EXPECT_EQ(EntriesIn(dir), 1u);  // no temporary file left
  fs::remove_all(dir);
}

TEST(WriteFileAtomically, AFailedWriteLeavesTheOldFileAndNoTemporary) {
  const fs::path dir = TempDir();
  const std::string path = (dir / "b.bin").string();
  ASSERT_TRUE(WriteFileAtomically(path, [](std::FILE* f, const std::string&) {
                std::fputs("old", f);
                return Status::Ok();
              }).ok());
  Status s = WriteFileAtomically(path, [](std::FILE* f, const std::string& tmp) {
    std::fputs("half of the new", f);
    return Status::Failed("writer gave up on {}", tmp);
  });
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("writer gave up"), std::string::npos) << s;
  EXPECT_EQ(ReadAll(path), "old");
  EXPECT_EQ(EntriesIn(dir), 1u);
  fs::remove_all(dir);
}

TEST(WriteFileAtomically, AMissingDirectoryIsAnErrorNamingThePath) {
  const std::string path = (TempDir() / "no" / "such" / "c.bin").string();
  Status s = WriteFileAtomically(path, [](std::FILE*, const std::string&) { return Status::Ok(); });
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find(path), std::string::npos) << s;
  fs::remove_all(TempDir());
}

}  // namespace
}  // namespace npuflow
