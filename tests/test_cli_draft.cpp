// The speculative-decoding options of run / serve / bench (--draft, --draft-max) and synth
// --draft mtp through the binary: output with drafting equals plain greedy output; bad values
// are refused with a message naming the option.
#include <gtest/gtest.h>

#include <cstdio>

#include "cli_util.h"

namespace hs {
namespace {

void expect_error(const test::CliResult& r, const std::string& needle) {
  EXPECT_NE(r.code, 0) << r.out;
  EXPECT_NE(r.out.find(needle), std::string::npos) << r.out;
}

TEST(CliDraft, SynthRunAndBadValues) {
  const std::string path = testing::TempDir() + "/hs_cli_draft.gguf";
  auto r = test::run_cli("synth --draft mtp --layers 3 " + test::shell_quote(path));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("+ MTP (nextn)"), std::string::npos) << r.out;
  const std::string run = "run " + test::shell_quote(path) + " -p 'hello there' --max-tokens 20 --temperature 0 ";
  const auto plain = test::run_cli(run);
  const auto spec = test::run_cli(run + "--draft mtp --draft-max 4");
  ASSERT_EQ(plain.code, 0) << plain.out;
  ASSERT_EQ(spec.code, 0) << spec.out;
  EXPECT_NE(spec.out.find("[speculative: "), std::string::npos) << spec.out;
  EXPECT_EQ(spec.out.substr(0, spec.out.find("\n[")), plain.out.substr(0, plain.out.find("\n[")));
  expect_error(test::run_cli(run + "--draft mtp --draft-max 0"), "--draft-max 0");
  expect_error(test::run_cli(run + "--draft mtp --draft-max 1000000"), "--draft-max 1000000");
  expect_error(test::run_cli(run + "--draft-max 3"), "--draft-max needs --draft");
  expect_error(test::run_cli(run + "--draft-device cpu"), "--draft-device needs --draft");
  expect_error(test::run_cli(run + "--draft mtp --draft-device tpu:0"), "--draft-device: unknown device 'tpu:0'");
  const auto on_cpu = test::run_cli(run + "--draft mtp --draft-max 4 --draft-device cpu");
  ASSERT_EQ(on_cpu.code, 0) << on_cpu.out;
  EXPECT_EQ(on_cpu.out.substr(0, on_cpu.out.find("\n[")), plain.out.substr(0, plain.out.find("\n[")));
  expect_error(test::run_cli(run + "--draft sometimes"), "--draft: expected auto, mtp, dspark or off");
  expect_error(test::run_cli("run -p hi --draft mtp"), "no MTP block");  // the built-in model has none
  expect_error(test::run_cli(run + "--draft dspark"), "cannot draft with --draft dspark");  // an MTP model
  const auto bench = test::run_cli("bench " + test::shell_quote(path) +
                                   " --device cpu --draft mtp --pp 16 --depth 16 --tg 4 --reps 1");
  ASSERT_EQ(bench.code, 0) << bench.out;
  EXPECT_NE(bench.out.find("| 7 |"), std::string::npos) << bench.out;  // the verify-step table, k = 1..7
  // The drafter in a file of its own (an MTP-only GGUF) for a model without one.
  const std::string main = testing::TempDir() + "/hs_cli_draft_main.gguf", only = testing::TempDir() + "/hs_cli_draft_only.gguf";
  ASSERT_EQ(test::run_cli("synth --layers 3 " + test::shell_quote(main)).code, 0);
  r = test::run_cli("synth --layers 3 --draft mtp --draft-layout nextn-counted --draft-only " + test::shell_quote(only));
  ASSERT_EQ(r.code, 0) << r.out;
  const std::string run2 = "run " + test::shell_quote(main) + " -p 'hello there' --max-tokens 20 --temperature 0 ";
  const auto plain2 = test::run_cli(run2);
  const auto spec2 = test::run_cli(run2 + "--draft-model " + test::shell_quote(only));
  ASSERT_EQ(spec2.code, 0) << spec2.out;
  EXPECT_NE(spec2.out.find("[speculative: "), std::string::npos) << spec2.out;
  EXPECT_EQ(spec2.out.substr(0, spec2.out.find("\n[")), plain2.out.substr(0, plain2.out.find("\n[")));
  expect_error(test::run_cli(run2 + "--draft off --draft-model " + test::shell_quote(only)), "--draft-model needs");
  expect_error(test::run_cli(run2 + "--draft mtp"), "no MTP block");
  for (const std::string& p : {path, main, only}) std::remove(p.c_str());
}

// synth --draft dspark, and run with it (greedy: plain decode's output) by --draft dspark and auto.
TEST(CliDraft, DsparkSynthAndRun) {
  const std::string path = testing::TempDir() + "/hs_cli_draft_dspark.gguf";
  auto r = test::run_cli("synth --draft dspark --layers 4 " + test::shell_quote(path));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("+ DSpark (3 stages)"), std::string::npos) << r.out;
  const std::string run = "run " + test::shell_quote(path) + " -p 'hello there' --max-tokens 20 --temperature 0 ";
  const auto plain = test::run_cli(run);
  ASSERT_EQ(plain.code, 0) << plain.out;
  for (const std::string& opt : {std::string("--draft dspark --draft-max 5 --draft-confidence 0"),
                                 std::string("--draft auto")}) {
    const auto spec = test::run_cli(run + opt);
    ASSERT_EQ(spec.code, 0) << spec.out;
    EXPECT_EQ(spec.out.substr(0, spec.out.find("\n[")), plain.out.substr(0, plain.out.find("\n["))) << opt;
  }
  EXPECT_NE(test::run_cli(run + "--draft dspark --draft-confidence 0").out.find("[speculative: "), std::string::npos);
  expect_error(test::run_cli(run + "--draft dspark --draft-confidence 2"), "--draft-confidence 2");
  expect_error(test::run_cli(run + "--draft-confidence 0.2"), "--draft-confidence needs --draft");
  expect_error(test::run_cli(run + "--draft mtp"), "no MTP block");
  std::remove(path.c_str());
}

}  // namespace
}  // namespace hs
