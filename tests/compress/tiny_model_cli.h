// A fixture for the compress commands' binary tests: a temporary folder holding the tiny model
// (tiny.gguf) and a calibration text (calib.txt) of 300 sentences.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "tiny_model.h"

namespace squeeze::testing {

class TinyModelCli : public ::testing::Test {
 protected:
  explicit TinyModelCli(std::string tag) : tag_(std::move(tag)) {}
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("squeeze_" + tag_ + "_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    model_ = (dir_ / "tiny.gguf").string();
    write_tiny_model(model_);
    calib_ = (dir_ / "calib.txt").string();
    std::ofstream c(calib_);
    for (int i = 0; i < 300; ++i) c << "The quick brown fox " << i << " jumps over the lazy dog. ";
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string out(const std::string& name) const { return (dir_ / name).string(); }
  size_t n_files() const {
    return static_cast<size_t>(std::distance(std::filesystem::directory_iterator(dir_),
                                             std::filesystem::directory_iterator()));
  }

  std::string tag_;
  std::filesystem::path dir_;
  std::string model_, calib_;
};

}  // namespace squeeze::testing
