// AtomicFile: the path appears only complete, and nothing is left behind otherwise.
#include "core/atomic_file.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"

namespace squeeze {
namespace {

namespace fs = std::filesystem;

// A directory of this test's own, removed at the end.
struct Dir {
  fs::path path = fs::temp_directory_path() /
                  ("squeeze_atomic_" + std::to_string(getpid()) + "_" +
                   ::testing::UnitTest::GetInstance()->current_test_info()->name());
  Dir() { fs::create_directories(path); }
  ~Dir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::vector<std::string> entries() const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(path)) names.push_back(e.path().filename().string());
    return names;
  }
};

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(AtomicFile, CommitLeavesOnlyTheCompleteFile) {
  const Dir d;
  const fs::path p = d.path / "out.bin";
  {
    AtomicFile f(p.string());
    f.write("hello ");
    EXPECT_FALSE(fs::exists(p)) << "visible before commit";
    EXPECT_TRUE(fs::exists(f.tmp_path()));
    f.write("world");
    f.commit();
  }
  EXPECT_EQ(slurp(p), "hello world");
  EXPECT_EQ(d.entries(), std::vector<std::string>{"out.bin"});
}

TEST(AtomicFile, WithoutCommitNothingIsLeftAndAnOldFileStays) {
  const Dir d;
  const fs::path p = d.path / "out.bin";
  std::ofstream(p) << "old";
  {
    AtomicFile f(p.string());
    f.write("new, never committed");
  }
  EXPECT_EQ(slurp(p), "old");
  EXPECT_EQ(d.entries(), std::vector<std::string>{"out.bin"});
}

TEST(AtomicFile, ReplacesAnExistingFile) {
  const Dir d;
  const fs::path p = d.path / "out.bin";
  std::ofstream(p) << "old";
  AtomicFile f(p.string());
  f.write("new");
  f.commit();
  EXPECT_EQ(slurp(p), "new");
  EXPECT_THROW(f.commit(), Error);
  EXPECT_THROW(f.write("more"), Error);
}

TEST(AtomicFile, FailuresAreErrorsNamingThePath) {
  const Dir d;
  const std::string missing = (d.path / "no_such_dir" / "x.bin").string();
  try {
    AtomicFile f(missing);
    FAIL() << "created a file in a missing directory";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no_such_dir"), std::string::npos) << e.what();
  }
  // The target is a directory: the rename fails, the temporary goes.
  const fs::path target = d.path / "a_dir";
  fs::create_directories(target / "inside");
  {
    AtomicFile f(target.string());
    f.write("x");
    EXPECT_THROW(f.commit(), Error);
  }
  EXPECT_EQ(d.entries(), std::vector<std::string>{"a_dir"});
}

}  // namespace
}  // namespace squeeze
