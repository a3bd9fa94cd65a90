// Files a test needs but the repository does not hold: the default model (scripts/fetch_model.sh
// caches it) and the reference fixtures in tests/data. A test calls SQUEEZE_REQUIRE_FILE(path)
// first: when the file is missing the test is skipped on a developer's machine, and FAILS under
// CI (the environment variable CI is "true"), so a CI run cannot pass without the references.
//
// The directories are the build's (SQUEEZE_MODELS_DIR, SQUEEZE_TEST_DATA), unless the
// environment variables SQUEEZE_TEST_MODELS_DIR / SQUEEZE_TEST_DATA_DIR name others (to run the
// tests against a model cached elsewhere, or to check that a missing file fails under CI).
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>

namespace squeeze::testing {

inline bool under_ci() {
  const char* ci = std::getenv("CI");
  return ci != nullptr && std::string(ci) == "true";
}

inline std::string dir_from_env(const char* var, const char* fallback) {
  const char* v = std::getenv(var);
  return v != nullptr && *v != '\0' ? std::string(v) : std::string(fallback);
}

// A file of the models directory, e.g. model_file("SmolLM2-135M-Instruct.Q4_1.gguf").
inline std::string model_file(const std::string& name) {
  return dir_from_env("SQUEEZE_TEST_MODELS_DIR", SQUEEZE_MODELS_DIR) + "/" + name;
}
// The default model, as `squeeze` without -m uses it.
inline std::string default_model() { return model_file("SmolLM2-135M-Instruct.Q4_1.gguf"); }
// A reference fixture of tests/data.
inline std::string data_file(const std::string& name) {
  return dir_from_env("SQUEEZE_TEST_DATA_DIR", SQUEEZE_TEST_DATA) + "/" + name;
}

// An evaluation file of the project's shared data (e.g. "hellaswag/hellaswag_val_full.txt"):
// $SQUEEZE_SHARED_DATA_DIR/NAME, else shared/data/NAME in the first folder above the repository
// that holds it (../shared/data from a checkout, ../../shared/data from a worktree under it);
// the ../shared/data path when none does (for the missing-file message).
inline std::string shared_data_file(const std::string& name) {
  namespace fs = std::filesystem;
  const char* env = std::getenv("SQUEEZE_SHARED_DATA_DIR");
  if (env != nullptr && *env != '\0') return std::string(env) + "/" + name;
  const fs::path repo = fs::path(SQUEEZE_MODELS_DIR).parent_path();
  for (fs::path dir = repo.parent_path(); dir.has_relative_path(); dir = dir.parent_path()) {
    const fs::path p = dir / "shared" / "data" / name;
    if (fs::exists(p)) return p.string();
  }
  return (repo.parent_path() / "shared" / "data" / name).string();
}

inline std::string missing_file_message(const std::string& path) {
  return path + " is missing (the model: scripts/fetch_model.sh; fixtures: tools/README.md)" +
         (under_ci() ? "; CI=true, so this is a failure" : "; skipped (under CI=true it fails)");
}

}  // namespace squeeze::testing

// Skips the test (FAILS under CI=true) when `path` does not exist. Use it in a test body or in
// SetUp(); like GTEST_SKIP it returns from the enclosing void function.
#define SQUEEZE_REQUIRE_FILE(path)                                                 \
  do {                                                                             \
    const std::string squeeze_required_file_ = (path);                             \
    if (!std::filesystem::exists(squeeze_required_file_)) {                        \
      if (::squeeze::testing::under_ci()) {                                        \
        GTEST_FAIL() << ::squeeze::testing::missing_file_message(squeeze_required_file_); \
      } else {                                                                     \
        GTEST_SKIP() << ::squeeze::testing::missing_file_message(squeeze_required_file_); \
      }                                                                            \
    }                                                                              \
  } while (0)
