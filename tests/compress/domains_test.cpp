// Per-domain FFN masks (compress/domains.h): the masks are each domain's own structured choice,
// a domain's model is the original with the other neurons silenced, windows of each domain's
// text route to it, and bad specs, names and tables are clear errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <numeric>
#include <random>

#include "compress/domains.h"
#include "compress/prune_structured.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "gguf/gguf.h"
#include "model/context.h"
#include "model/model.h"
#include "logits_compare.h"
#include "tiny_model.h"
#include "tiny_model_cli.h"
#include "cli_run.h"

namespace squeeze::compress {
namespace {

using testing::run_squeeze;

// Two texts of different alphabets: letters, and digits with punctuation.
void write_domain_texts(const std::string& letters, const std::string& digits) {
  std::ofstream a(letters), b(digits);
  for (int i = 0; i < 200; ++i) {
    a << "the quick brown fox jumps over the lazy dog and runs away ";
    b << (i * 7919) % 10007 << ", " << (i * 104729) % 1000003 << "; " << i * 31 << ". ";
  }
}

class Domains : public testing::TinyModelCli {
 protected:
  Domains() : TinyModelCli("domains") {}
  void SetUp() override {
    TinyModelCli::SetUp();
    letters_ = out("letters.txt");
    digits_ = out("digits.txt");
    write_domain_texts(letters_, digits_);
  }
  std::string letters_, digits_;
};

TEST(DomainSpecs, ParseAndRefuse) {
  const std::vector<DomainSpec> d = parse_domains("code=a.py,docs=/x/y.txt");
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d[1].name, "docs");
  EXPECT_EQ(d[1].calib_path, "/x/y.txt");
  for (const char* bad : {"", "code", "=x", "code=", "a b=x", "code=x,code=y", "auto=x"}) {
    EXPECT_THROW(parse_domains(bad), UsageError) << bad;
  }
}

TEST_F(Domains, MasksModelsAndRouting) {
  ThreadPool pool(2);
  StructuredPruneOptions o;
  o.criterion = Criterion::Wanda;
  o.fraction = 0.5;
  o.calib_samples = 4;
  o.calib_ctx = 32;
  const std::string path = out("domains.gguf");
  const DomainPruneStats ds =
      prune_domains(model_, path, o, {{"letters", letters_}, {"digits", digits_}}, pool);
  EXPECT_EQ(ds.n_ff_after, ds.n_ff_before / 2);
  const auto m = model::Model::load(path);
  const model::HParams& hp = m->hparams();
  EXPECT_EQ(hp.n_ff, ds.n_ff_before);  // the dense weights stay
  const auto t = read_domains(m->file(), hp.n_layer, hp.n_embd);
  ASSERT_TRUE(t.has_value());
  ASSERT_EQ(t->names, (std::vector<std::string>{"letters", "digits"}));
  for (size_t d = 0; d < 2; ++d) {
    SCOPED_TRACE(t->names[d]);
    // The mask is what --structure ffn keeps on that domain's text.
    StructuredPruneOptions od = o;
    od.calib_path = d == 0 ? letters_ : digits_;
    StructuredPruneStats st;
    const auto dense = model::Model::load(model_);
    build_structured(*dense, od, pool, st);
    EXPECT_EQ(t->neurons[d], st.kept);
    // The domain's model is the original with the other neurons' gate rows zeroed.
    const gguf::File src = gguf::File::open(model_);
    std::vector<uint8_t> silenced(src.file_data(), src.file_data() + src.file_size());
    for (int64_t il = 0; il < hp.n_layer; ++il) {
      const gguf::TensorInfo& g = *src.find_tensor("blk." + std::to_string(il) + ".ffn_gate.weight");
      const size_t rb = g.n_bytes / static_cast<size_t>(hp.n_ff);
      std::vector<uint8_t> keep(static_cast<size_t>(hp.n_ff), 0);
      for (int64_t j : t->neurons[d][il]) keep[j] = 1;
      const size_t off = static_cast<const uint8_t*>(g.data) - src.file_data();
      for (int64_t j = 0; j < hp.n_ff; ++j) {
        if (!keep[j]) std::memset(silenced.data() + off + j * rb, 0, rb);
      }
    }
    const auto small = domain_model(*m, *t, static_cast<int64_t>(d), pool);
    EXPECT_EQ(small->hparams().n_ff, t->ffn_length);
    const auto reference = model::Model::load(gguf::File::from_bytes("silenced", silenced));
    testing::expect_same_logits(*small, *reference, pool, 0.02f);
  }
  // Windows of each text route to their own domain.
  for (const auto& [file, want] : {std::pair{letters_, "letters"}, std::pair{digits_, "digits"}}) {
    const auto r = run_squeeze("route -m " + path + " -f " + file + " --tokens 24 --windows 10 --expect " + want +
                                   " -t 2", "dom_route");
    ASSERT_EQ(r.rc, 0) << r.err;
    EXPECT_NE(r.out.find(std::string("; ") + want + ": 100.0%"), std::string::npos) << r.out;
  }
}

TEST_F(Domains, CommandsTakeADomain) {
  const std::string path = out("domains.gguf");
  const auto p = run_squeeze("prune -m " + model_ + " -o " + path + " -t 2 --structure ffn --method wanda --sparsity 0.5 "
                             "--calib-samples 4 --calib-ctx 32 --domains letters=" + letters_ + ",digits=" + digits_,
                             "dom_prune");
  ASSERT_EQ(p.rc, 0) << p.err;
  EXPECT_NE(p.err.find("ffn masks of 2 domains: 128 -> 64 neurons per layer each"), std::string::npos) << p.err;
  const auto run = run_squeeze("run -m " + path + " --domain auto -p \"the lazy dog runs over the quick fox\" "
                               "-n 4 --temp 0 --ctx 64 -t 2", "dom_run");
  ASSERT_EQ(run.rc, 0) << run.err;
  EXPECT_NE(run.err.find("domain: letters (auto, probability"), std::string::npos) << run.err;
  const auto named = run_squeeze("run -m " + path + " --domain digits -p hello -n 4 --temp 0 --ctx 64 -t 2", "dom_run2");
  ASSERT_EQ(named.rc, 0) << named.err;
  EXPECT_NE(named.err.find("domain: digits"), std::string::npos) << named.err;
  const auto ppl = run_squeeze("perplexity -m " + path + " --domain letters -f " + letters_ + " --ctx 32 --chunks 2 -t 2",
                               "dom_ppl");
  ASSERT_EQ(ppl.rc, 0) << ppl.err;
  // chat with a domain answers as run does with that domain and the chat template.
  const auto chat = run_squeeze("chat -m " + path + " --domain digits -n 4 --temp 0 --ctx 64 -t 2", "dom_chat",
                                "hello\n/quit\n");
  ASSERT_EQ(chat.rc, 0) << chat.err;
  EXPECT_NE(chat.err.find("domain: digits"), std::string::npos) << chat.err;
  const auto run_chat = run_squeeze("run -m " + path + " --domain digits --chat -p hello -n 4 --temp 0 --ctx 64 -t 2",
                                    "dom_run_chat");
  ASSERT_EQ(run_chat.rc, 0) << run_chat.err;
  ASSERT_FALSE(run_chat.out.empty());
  EXPECT_NE(chat.out.find(run_chat.out), std::string::npos) << chat.out << " vs " << run_chat.out;
  // chat --domain auto routes on its first message, and answers as with that domain named.
  for (const auto& [message, want] : {std::pair{"the lazy dog runs over the quick fox", "letters"},
                                      std::pair{"7919, 104729; 31. 15838, 209458; 62.", "digits"}}) {
    const std::string input = std::string(message) + "\nand more\n/quit\n";
    const auto routed = run_squeeze("chat -m " + path + " --domain auto -n 4 --temp 0 --ctx 96 -t 2", "dom_chat_auto",
                                    input);
    ASSERT_EQ(routed.rc, 0) << routed.err;
    EXPECT_NE(routed.err.find(std::string("domain: ") + want + " (auto, probability"), std::string::npos) << routed.err;
    const auto named = run_squeeze("chat -m " + path + " --domain " + want + " -n 4 --temp 0 --ctx 96 -t 2",
                                   "dom_chat_named", input);
    ASSERT_EQ(named.rc, 0) << named.err;
    EXPECT_EQ(routed.out, named.out);
  }
  // A first message of one token routes with the template around it.
  const auto short_first = run_squeeze("chat -m " + path + " --domain auto -n 2 --temp 0 --ctx 96 -t 2", "dom_chat_short",
                                       "h\n/quit\n");
  ASSERT_EQ(short_first.rc, 0) << short_first.err;
  EXPECT_NE(short_first.err.find("(auto, probability"), std::string::npos) << short_first.err;
  const std::pair<std::string, std::string> bad[] = {
      {"run -m " + path + " --domain code -p hi -n 1", "the model's domains are letters, digits (or auto)"},
      {"run -m " + model_ + " --domain letters -p hi -n 1", "has no domain masks"},
      {"chat -m " + path + " --domain code -n 1", "the model's domains are letters, digits"},
      {"serve -m " + path + " --domain code --port 0", "the model's domains are letters, digits"},
      {"run -m " + path + " --domain auto -p h -n 1", "give at least 2"},
      {"perplexity -m " + path + " --domain auto -f " + letters_, "--domain auto routes a prompt"},
      {"bench -m " + path + " --domain letters --machine", "--domain needs a model"},
      {"route -m " + model_ + " -f " + letters_, "has no domain masks"},
      {"prune -m " + model_ + " -o " + out("x.gguf") + " --method wanda --sparsity 0.5 --domains a=" + letters_,
       "--domains needs --structure ffn"},
      {"prune -m " + model_ + " -o " + out("x.gguf") + " --structure ffn --method flap --sparsity 0.5 --domains a=" + letters_,
       "--domains ranks neurons by wanda or taylor"},
      {"prune -m " + model_ + " -o " + out("x.gguf") + " --structure ffn --method wanda --sparsity 0.5 --calib " + calib_ +
           " --domains a=" + letters_, "--calib does not apply to --domains"},
  };
  for (const auto& [args, needle] : bad) {
    SCOPED_TRACE(args);
    testing::expect_clean_error(run_squeeze(args, "dom_bad"), needle);
  }
}

TEST(DomainTables, MalformedOnesAreFormatErrors) {
  // A well-formed table of one domain for 2 layers of n_embd 64, then each key broken in turn.
  struct Table {
    int64_t neurons = 64 * 2, weights = 64, route_tokens = 64;
    bool bias = true;
  };
  const auto file = [](const Table& t) {
    testing::TinyModelSpec spec;
    spec.extra = [t](gguf::Writer& w) {
      w.add_string_array("squeeze.domains.names", {"a"});
      w.add_uint32("squeeze.domains.ffn_length", 64);
      w.add_uint32("squeeze.domains.route_layer", 1);
      w.add_uint32("squeeze.domains.route_tokens", static_cast<uint32_t>(t.route_tokens));
      w.add_int32_array("squeeze.domains.a.neurons", std::vector<int32_t>(t.neurons, 0));
      w.add_float32_array("squeeze.domains.a.route_weight", std::vector<float>(t.weights, 0.125f));
      if (t.bias) w.add_float32("squeeze.domains.a.route_bias", 0.0f);
    };
    return gguf::File::from_bytes("bad", testing::tiny_model_writer(spec).to_bytes());
  };
  EXPECT_TRUE(read_domains(file({}), 2, 64).has_value());
  EXPECT_THROW(read_domains(file({.neurons = 64 * 2 - 1}), 2, 64), FormatError);
  EXPECT_THROW(read_domains(file({.weights = 63}), 2, 64), FormatError);
  EXPECT_THROW(read_domains(file({.route_tokens = 1}), 2, 64), FormatError);
  EXPECT_THROW(read_domains(file({.bias = false}), 2, 64), FormatError);
}

// Classes told apart by one quiet channel while a loud channel, shared by all, varies more:
// the nearest centroid by cosine mostly follows the loud channel, the trained router does not.
TEST(DomainRouter, LearnsTheQuietChannel) {
  std::mt19937 rng(7);
  std::normal_distribution<float> loud(0.0f, 3.0f), quiet(0.0f, 0.05f);
  const auto sample = [&](int c) {
    std::vector<float> x(8);
    x[0] = 10.0f + loud(rng);                  // common to every class
    x[1] = 5.0f + (c == 0 ? 0.3f : c == 1 ? 0.0f : -0.3f) + quiet(rng);  // the class
    for (size_t i = 2; i < x.size(); ++i) x[i] = loud(rng);
    return x;
  };
  std::vector<std::vector<std::vector<float>>> train(3), test(3);
  for (int c = 0; c < 3; ++c) {
    for (int i = 0; i < 200; ++i) train[c].push_back(sample(c));
    for (int i = 0; i < 100; ++i) test[c].push_back(sample(c));
  }
  const LinearRouter r = train_router(train);
  DomainTable t;
  t.names = {"a", "b", "c"};
  t.route_weight = r.weight;
  t.route_bias = r.bias;
  int right = 0;
  for (int c = 0; c < 3; ++c) {
    for (const auto& x : test[c]) {
      double p = 0.0;
      right += route_domain(t, x, &p) == c;
      EXPECT_GE(p, 1.0 / 3.0);
      EXPECT_LE(p, 1.0);
    }
  }
  EXPECT_GE(right, 297);
  // The same table routing by the class means alone (bias 0: the centroid rule) does much worse.
  for (int c = 0; c < 3; ++c) {
    std::vector<float> m(8, 0.0f);
    for (const auto& x : train[c]) {
      for (size_t i = 0; i < m.size(); ++i) m[i] += x[i] / 200.0f;
    }
    t.route_weight[c] = m;
    t.route_bias[c] = 0.0f;
  }
  int by_mean = 0;
  for (int c = 0; c < 3; ++c) {
    for (const auto& x : test[c]) by_mean += route_domain(t, x) == c;
  }
  EXPECT_LT(by_mean, 200);
  EXPECT_THROW(train_router({{{1.0f, 2.0f}}, {}}), Error);
  EXPECT_THROW(train_router({{{1.0f, 2.0f}}, {{1.0f}}}), Error);
}

}  // namespace
}  // namespace squeeze::compress
