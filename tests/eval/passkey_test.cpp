// Passkey retrieval (eval/passkey.h): the prompt fills the budget with the key at its depth;
// answers are checked by their first number; SmolLM2 finds keys at both ends of 512 tokens,
// with an f16 and a q8 cache; the command's bad flags are clear errors.
#include "eval/passkey.h"

#include <gtest/gtest.h>

#include "cli_run.h"
#include "core/error.h"
#include "require_file.h"
#include "temp_dir.h"
#include "tiny_model.h"

namespace squeeze::eval {
namespace {

TEST(Passkey, AnswersAreJudgedByTheirFirstNumber) {
  EXPECT_TRUE(answer_has_key(" 12345. The", 12345));
  EXPECT_TRUE(answer_has_key("12345", 12345));
  EXPECT_FALSE(answer_has_key(" 1234 5", 12345));
  EXPECT_FALSE(answer_has_key(" 123456", 12345));
  EXPECT_FALSE(answer_has_key(" 54321 or 12345", 12345));
  EXPECT_FALSE(answer_has_key(" no idea", 12345));
  EXPECT_EQ(passkey_depths({3, 1, 1, 8}), (std::vector<double>{0, 0.5, 1}));
  EXPECT_EQ(passkey_depths({1, 1, 1, 8}), (std::vector<double>{0.5}));
  EXPECT_THROW(passkey_depths({0, 1, 1, 8}), UsageError);
}

TEST(Passkey, PromptsFillTheBudgetWithTheKeyAtItsDepthAndRetrieveIt) {
  const std::string path = testing::default_model();
  SQUEEZE_REQUIRE_FILE(path);
  const auto m = model::Model::load(path);
  const tokenizer::Tokenizer tok(tokenizer::read_vocab(m->file()));
  for (const double depth : {0.0, 0.5, 1.0}) {
    const std::vector<int32_t> ids = passkey_prompt(tok, 31415, depth, 500);
    EXPECT_LE(ids.size(), 500u);
    EXPECT_GE(ids.size(), 470u);  // within one filler sentence of the budget
    const std::string text = tok.decode(ids);
    const size_t key = text.find("The pass key is 31415");
    ASSERT_NE(key, std::string::npos);
    const double at = static_cast<double>(key) / static_cast<double>(text.size());
    EXPECT_NEAR(at, depth, 0.12) << depth;
  }
  EXPECT_THROW(passkey_prompt(tok, 31415, 0.5, 40), UsageError);
  ThreadPool pool(2);
  for (const kv::KvOptions& o : {kv::KvOptions{}, kv::KvOptions{kv::KvType::Q8, kv::KeyAxis::Channel, 64, 64, 0}}) {
    model::Context ctx(*m, 512, pool, 256, 1, 0, o);
    for (const double depth : {0.0, 1.0}) {
      const PasskeyTrial r = run_passkey_trial(ctx, tok, 27182, depth, 8);
      EXPECT_TRUE(r.correct) << kv::describe(o) << " depth " << depth << ": '" << r.answer << "'";
      EXPECT_GT(r.n_prompt, 450);
    }
  }
}

TEST(PasskeyCli, BadFlagsAreClearErrors) {
  const std::string path = testing::temp_path("squeeze_passkey_tiny.gguf");
  testing::write_tiny_model(path);
  const std::string m = "-m " + path + " ";
  testing::expect_clean_error(testing::run_squeeze("passkey " + m + "--ctx 64 --depths 0", "passkey"), "depths");
  testing::expect_clean_error(testing::run_squeeze("passkey " + m + "--ctx 16", "passkey"), "passkey question");
  testing::expect_clean_error(testing::run_squeeze("passkey " + m + "--ctx 64 --kv-type q3", "passkey"), "q3");
}

}  // namespace
}  // namespace squeeze::eval
