// Speculative decoding through the service (issue 16): a request on an engine with an MTP
// drafter reports its drafted and accepted tokens in the outcome and in OpenAI's usage
// (completion_tokens_details accepted/rejected_prediction_tokens), and its text equals the
// text without drafting.
#include <gtest/gtest.h>

#include "server/openai_api.h"
#include "server_util.h"

namespace hs::server {
namespace {

TEST(ServerDraft, UsageReportsDraftedTokens) {
  SyntheticSpec spec = builtin_spec();
  spec.draft = "mtp";
  EngineOptions eo = one_thread();
  eo.draft = "mtp";
  Engine engine(make_synthetic_source(spec), eo);
  const Tokenizer tok = builtin_tokenizer();
  auto run = [&](int draft_max) {
    SchedulerOptions so{2, 16, 1024};
    so.draft_max = draft_max;
    Scheduler sched(engine, so);
    Service svc(sched, tok, ServiceConfig{});
    GenerationSpec g;
    g.prompt = tok.encode("speculative decoding is lossless");
    g.max_tokens = 40;
    g.sampling.temperature = 0;
    auto [events, outcome] = drain(svc.start(std::move(g), "t", ApiStyle::completions));
    std::string text;
    for (const auto& e : events) text += e.text;
    return std::make_pair(text, outcome);
  };
  const auto [plain_text, plain] = run(0);
  const auto [text, o] = run(3);
  EXPECT_EQ(text, plain_text);
  EXPECT_EQ(o.completion_tokens, plain.completion_tokens);
  EXPECT_EQ(plain.drafted_tokens, 0);
  EXPECT_FALSE(openai_usage(plain).contains("completion_tokens_details"));
  ASSERT_GT(o.drafted_tokens, 0);
  const ojson u = openai_usage(o);
  ASSERT_TRUE(u.contains("completion_tokens_details")) << u.dump();
  const ojson& d = u["completion_tokens_details"];
  EXPECT_EQ(d["accepted_prediction_tokens"].get<int64_t>(), o.accepted_tokens);
  EXPECT_EQ(d["accepted_prediction_tokens"].get<int64_t>() + d["rejected_prediction_tokens"].get<int64_t>(),
            o.drafted_tokens);
}

}  // namespace
}  // namespace hs::server
