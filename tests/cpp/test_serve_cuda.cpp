// `orbit serve` below HTTP on a CUDA device (ServeOptions::device, ::dtype; TinyStories-656K): sessions decoding
// together on the GPU answer, token for token, what the CPU answers alone (a token may differ only where the
// CPU's two best tokens are a near-tie), in float32 and in bfloat16 with a device tier; a session's next request
// reuses its KV on the device; n > 1 choices are forks decoded together there. Exits 77 (skipped) where libtorch
// sees no CUDA device.
#include <algorithm>
#include <cmath>
#include <thread>

#include "orbit_catch.h"
#include "serve/serve_core.h"
#include "serve_test_util.h"

namespace sv = orbit::serve;

namespace {

using serve_test::kQuestions;

sv::ServeOptions options(const std::string& device, const std::string& dtype) {
  return serve_test::quiet_options(device, dtype);
}

// A greedy story question whose answer carries each step's log probability and the two best tokens'.
sv::ChatRequest chat(const sv::ServeCore& core, const std::string& question, int64_t max_tokens) {
  sv::ChatRequest r = serve_test::story_chat(core, question, max_tokens);
  r.sampling.logprobs = true;
  r.sampling.top_logprobs = 2;
  return r;
}

sv::RunResult run(sv::ServeCore& core, const sv::ChatRequest& r, const std::string& session) {
  return serve_test::run_answered(core, r, session);
}

// Every question answered at once by `core`, each in its own session.
std::vector<sv::RunResult> run_together(sv::ServeCore& core, int64_t max_tokens) {
  std::vector<sv::RunResult> got(kQuestions.size());
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < kQuestions.size(); ++i) {
    threads.emplace_back(
        [&, i] { got[i] = run(core, chat(core, kQuestions[i], max_tokens), "s" + std::to_string(i)); });
  }
  for (auto& t : threads) t.join();
  return got;
}

// `got` against `want` (the CPU's float32 answer): equal tokens with log-probabilities within `tolerance`, up
// to a first difference that must fall where `want`'s two best tokens are within `tolerance` of each other
// (from there on the two decode different texts). Returns whether the tokens differ anywhere.
bool agrees_up_to_a_near_tie(const sv::RunResult& got, const sv::RunResult& want, double tolerance) {
  REQUIRE(got.logprobs.size() == got.tokens.size());
  REQUIRE(want.logprobs.size() == want.tokens.size());
  const std::size_t n = std::min(got.tokens.size(), want.tokens.size());
  for (std::size_t j = 0; j < n; ++j) {
    if (got.tokens[j] != want.tokens[j]) {
      const auto& top = want.logprobs[j].top;
      REQUIRE(top.size() == 2);
      INFO("token " << j << ": " << got.tokens[j] << " where the CPU chose " << want.tokens[j]);
      CHECK(top[0].logprob - top[1].logprob <= tolerance);
      return true;
    }
    CHECK(std::abs(got.logprobs[j].chosen.logprob - want.logprobs[j].chosen.logprob) <= tolerance);
  }
  CHECK(got.tokens.size() == want.tokens.size());  // the same stop, or the same length
  return false;
}

double metric(sv::ServeCore& core, const std::string& name) { return serve_test::metric(core, name); }

}  // namespace

TEST_CASE("serve cuda: sessions decoding together on the GPU answer what the CPU answers alone", "[serve][cuda]") {
  std::vector<sv::RunResult> want;
  {
    sv::ServeCore cpu(options("cpu", "float32"));
    for (const std::string& q : kQuestions) want.push_back(run(cpu, chat(cpu, q, 24), ""));
    cpu.close();
  }
  sv::ServeCore gpu(options("cuda", "float32"));
  CHECK(gpu.device().rfind("cuda", 0) == 0);
  const std::vector<sv::RunResult> got = run_together(gpu, 24);
  int differ = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    INFO("question " << i << ": " << kQuestions[i]);
    differ += agrees_up_to_a_near_tie(got[i], want[i], 2e-3) ? 1 : 0;
  }
  CHECK(differ <= 2);  // near-ties are rare: most answers are the CPU's exactly
  const double shared =
      metric(gpu, "orbit_decode_batch_sequences_count") - metric(gpu, "orbit_decode_batch_sequences_bucket{le=\"1\"}");
  CHECK(shared > 0);  // steps on the device held several sequences
  gpu.close();
}

TEST_CASE("serve cuda: bfloat16 with a device tier: reuse across requests and forks on the GPU", "[serve][cuda]") {
  sv::RunResult want;
  {
    sv::ServeCore cpu(options("cpu", "float32"));
    want = run(cpu, chat(cpu, kQuestions[0], 16), "");
    cpu.close();
  }
  sv::ServeOptions o = options("cuda", "bfloat16");
  o.device_tier_bytes = int64_t{16} << 20;
  sv::ServeCore gpu(o);
  CHECK(gpu.dtype() == "bfloat16");
  sv::ChatRequest r = chat(gpu, kQuestions[0], 16);
  const sv::RunResult first = run(gpu, r, "reuse");
  REQUIRE(!first.tokens.empty());
  // bfloat16 keeps about three significant digits: the first token's distribution is the CPU's within that.
  if (first.tokens[0] == want.tokens[0]) {
    CHECK(std::abs(first.logprobs[0].chosen.logprob - want.logprobs[0].chosen.logprob) <= 0.15);
  } else {
    CHECK(want.logprobs[0].top[0].logprob - want.logprobs[0].top[1].logprob <= 0.15);
  }
  // The session's next request sends the answer back with a new question: its KV on the device is reused, no
  // less of it than a radix cache that keeps generated tokens would reuse.
  r.messages.push_back({"assistant", first.text});
  r.messages.push_back({"user", kQuestions[1]});
  const sv::RunResult second = run(gpu, r, "reuse");
  CHECK(second.usage.forward_tokens < static_cast<double>(second.usage.prompt_tokens));
  CHECK(second.usage.forward_tokens <= static_cast<double>(second.usage.radix_cache_tokens));
  // n = 4 at temperature 0: four forks decoded together, each the answer alone.
  sv::ChatRequest forks = chat(gpu, kQuestions[2], 12);
  const sv::RunResult alone = run(gpu, forks, "");
  forks.sampling.n = 4;
  const sv::RunResult together = run(gpu, forks, "");
  REQUIRE(together.extra_choices.size() == 3);
  for (const sv::RunResult& c : together.extra_choices) CHECK(c.tokens == together.tokens);
  CHECK(together.usage.completion_tokens == 4 * static_cast<int64_t>(together.tokens.size()));
  CHECK(!alone.tokens.empty());
  gpu.close();
}
