// Runs the squeeze binary (SQUEEZE_BINARY, defined for every test target) as a user would,
// capturing its exit status, stdout and stderr, and checks the shape of a clean error.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "temp_dir.h"

namespace squeeze::testing {

struct CmdResult {
  int rc;  // exit status, or 128 + signal
  std::string out, err;
};

inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// `squeeze ARGS` with `input` on stdin. `tag` names the capture files, kept in this test
// process's temporary directory (temp_dir.h: removed at exit).
inline CmdResult run_squeeze(const std::string& args, const std::string& tag,
                             const std::string& input = "") {
  const std::string out = temp_path(tag + ".out"), err = temp_path(tag + ".err"),
                    in = temp_path(tag + ".in");
  std::ofstream(in) << input;
  const std::string cmd = std::string(SQUEEZE_BINARY) + " " + args + " <" + in + " >" + out +
                          " 2>" + err;
  const int status = std::system(cmd.c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), slurp(out), slurp(err)};
}

// Exit code 1 or 2 (not a signal, not a sanitizer abort) and exactly one line "error: ..."
// naming `needle`; with `after_progress`, progress lines may come before the error line.
inline void expect_clean_error(const CmdResult& r, const std::string& needle,
                               bool after_progress = false) {
  EXPECT_TRUE(r.rc == 1 || r.rc == 2) << "rc=" << r.rc << " stderr: " << r.err;
  const size_t at = r.err.find("error: ");
  ASSERT_NE(at, std::string::npos) << r.err;
  if (!after_progress) {
    EXPECT_EQ(at, 0u) << r.err;
  }
  EXPECT_EQ(std::count(r.err.begin() + static_cast<std::ptrdiff_t>(at), r.err.end(), '\n'), 1)
      << r.err;
  EXPECT_NE(r.err.find(needle), std::string::npos) << "missing '" << needle << "' in: " << r.err;
}

}  // namespace squeeze::testing
