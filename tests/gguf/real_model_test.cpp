// The real model (models/SmolLM2-135M-Instruct.Q4_1.gguf, fetched by scripts/fetch_model.sh):
// skipped when absent, a failure under CI=true (require_file.h).
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "gguf_test_util.h"
#include "require_file.h"

namespace squeeze::gguf {
namespace {

const std::string kModel = squeeze::testing::default_model();

TEST(GgufRealModel, SmolLM2Header) {
  SQUEEZE_REQUIRE_FILE(kModel);
  const File f = File::open(kModel);
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.alignment(), 32u);
  EXPECT_EQ(f.require_string("general.architecture"), "llama");
  EXPECT_EQ(f.require_int("llama.block_count"), 30);
  EXPECT_EQ(f.require_int("llama.embedding_length"), 576);
  EXPECT_EQ(f.require_string_array("tokenizer.ggml.tokens").size(), 49152u);
  EXPECT_GT(f.require_float("llama.rope.freq_base"), 0.0);

  ASSERT_EQ(f.tensors().size(), 272u);
  const TensorInfo* embd = f.find_tensor("token_embd.weight");
  ASSERT_NE(embd, nullptr);
  EXPECT_EQ(embd->type, formats::DType::Q8_0);
  EXPECT_EQ(embd->shape, (std::vector<int64_t>{576, 49152}));
  EXPECT_EQ(embd->n_bytes, size_t{576} / 32 * 34 * 49152);
  const TensorInfo* wq = f.find_tensor("blk.0.attn_q.weight");
  ASSERT_NE(wq, nullptr);
  EXPECT_EQ(wq->type, formats::DType::Q4_1);
  EXPECT_EQ(wq->shape, (std::vector<int64_t>{576, 576}));

  for (const TensorInfo& t : f.tensors()) {
    EXPECT_LE(static_cast<const uint8_t*>(t.data) + t.n_bytes, f.file_data() + f.file_size()) << t.name;
  }
}

// Copying every key and tensor through the writer reproduces llama.cpp's file byte for byte.
TEST(GgufRealModel, RewriteIsByteIdentical) {
  SQUEEZE_REQUIRE_FILE(kModel);
  const File f = File::open(kModel);
  Writer w(f.alignment());
  w.copy_metadata(f);
  for (const TensorInfo& t : f.tensors()) {
    w.add_tensor(t.name, t.type, t.shape, {static_cast<const uint8_t*>(t.data), t.n_bytes});
  }
  const std::vector<uint8_t> bytes = w.to_bytes();
  ASSERT_EQ(bytes.size(), f.file_size());
  EXPECT_EQ(std::memcmp(bytes.data(), f.file_data(), bytes.size()), 0);
}

}  // namespace
}  // namespace squeeze::gguf
