// Window::generate's logit processors and log probabilities (GenerateOptions: presence_penalty,
// frequency_penalty, logit_bias, logprobs, top_logprobs; sdk/src/window/sampler.h), each checked against an
// independent recomputation from Window::logits over the query and the tokens generated so far.
#include "orbit_catch.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "orbit/engine.h"
#include "test_helpers.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

using namespace orbit;
using Catch::Contains;

namespace {

// Logprobs computed here and by generate differ by float32 rounding only (one forward of all rows here,
// one forward per token there).
constexpr double kTol = 1e-3;

struct Fixture {
  std::shared_ptr<Engine> engine;
  Window window;
  std::vector<int64_t> query;
};

Fixture story() {
  EngineOptions o;
  o.model = test::stories_path();
  o.pool_bytes = int64_t{16} << 20;
  o.page_size = 8;
  std::shared_ptr<Engine> engine = Engine::open(o);
  Window w = engine->new_window();
  w.add_turn(engine->tokenize("Once upon a time, there was a little girl.", true));
  return {engine, std::move(w), engine->tokenize(" She", false)};
}

// Each step's logits as generate saw them: rows of Window::logits(query + generated), row i for step i.
std::vector<std::vector<double>> step_logits(const Window& w, const std::vector<int64_t>& query,
                                             const std::vector<int64_t>& generated) {
  std::vector<int64_t> all = query;
  all.insert(all.end(), generated.begin(), generated.end());
  const Logits l = w.logits(all, /*all_rows=*/true);
  std::vector<std::vector<double>> out;
  for (std::size_t i = 0; i < generated.size(); ++i) {
    const float* r = l.row(static_cast<int64_t>(query.size() - 1 + i));
    out.emplace_back(r, r + l.vocab);
  }
  return out;
}

std::vector<double> log_softmax(const std::vector<double>& x) {
  const double m = *std::max_element(x.begin(), x.end());
  double sum = 0;
  for (double v : x) sum += std::exp(v - m);
  std::vector<double> out(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) out[i] = x[i] - m - std::log(sum);
  return out;
}

int64_t repeats(const std::vector<int64_t>& tokens) {
  return static_cast<int64_t>(tokens.size() - std::set<int64_t>(tokens.begin(), tokens.end()).size());
}

}  // namespace

TEST_CASE("logit_bias -100 bans the token greedy picks, +100 forces one", "[sampling]") {
  Fixture f = story();
  GenerateOptions o;
  o.max_tokens = 6;
  const Generation plain = f.window.generate(f.query, o);
  REQUIRE(plain.tokens.size() == 6);
  const int64_t first = plain.tokens.front();

  o.logit_bias = {{first, -100}};
  const Generation banned = f.window.generate(f.query, o);
  CHECK(std::find(banned.tokens.begin(), banned.tokens.end(), first) == banned.tokens.end());
  // The next best token of the first step (the argmax of the logits with the banned one left out).
  const Logits l = f.window.logits(f.query);
  int64_t second = first == 0 ? 1 : 0;
  for (int64_t j = 0; j < l.vocab; ++j) {
    if (j != first && l.last()[j] > l.last()[second]) second = j;
  }
  CHECK(banned.tokens.front() == second);

  // A token greedy never picks here, forced at every step.
  const int64_t forced = 300;
  REQUIRE(std::find(plain.tokens.begin(), plain.tokens.end(), forced) == plain.tokens.end());
  o.logit_bias = {{forced, 100}};
  const Generation pushed = f.window.generate(f.query, o);
  CHECK(pushed.tokens == std::vector<int64_t>(6, forced));
}

TEST_CASE("penalties act on the tokens generated so far, as OpenAI defines them", "[sampling]") {
  Fixture f = story();
  GenerateOptions o;
  o.max_tokens = 48;
  const Generation plain = f.window.generate(f.query, o);
  o.frequency_penalty = 2;
  const Generation discouraged = f.window.generate(f.query, o);
  o.frequency_penalty = -2;
  const Generation encouraged = f.window.generate(f.query, o);
  INFO("plain: " << plain.text << "\nfrequency 2: " << discouraged.text << "\nfrequency -2: " << encouraged.text);
  CHECK(repeats(discouraged.tokens) < repeats(plain.tokens));
  CHECK(repeats(encouraged.tokens) > repeats(plain.tokens));

  // Every step's choice is the argmax of logits - presence·[count > 0] - frequency·count, recomputed here.
  o.frequency_penalty = 0.7;
  o.presence_penalty = 0.4;
  const Generation g = f.window.generate(f.query, o);
  REQUIRE(g.tokens.size() == 48);
  const auto rows = step_logits(f.window, f.query, g.tokens);
  std::map<int64_t, int64_t> counts;
  for (std::size_t i = 0; i < g.tokens.size(); ++i) {
    std::vector<double> x = rows[i];
    for (const auto& [t, c] : counts) x[t] -= 0.4 + 0.7 * static_cast<double>(c);
    const double best = *std::max_element(x.begin(), x.end());
    INFO("step " << i);
    CHECK(x[g.tokens[i]] >= best - kTol);
    ++counts[g.tokens[i]];
  }
  CHECK(g.tokens != plain.tokens);
}

TEST_CASE("logprobs are log_softmax of the step's logits; top_logprobs sorted, the chosen among them", "[sampling]") {
  Fixture f = story();
  GenerateOptions o;
  o.max_tokens = 24;
  o.temperature = 1.0;
  o.seed = 11;
  o.logprobs = true;
  o.top_logprobs = 5;
  o.logit_bias = {{261, 1.5}};  // the logprobs are of the biased distribution
  const Generation g = f.window.generate(f.query, o);
  REQUIRE(g.logprobs.size() == g.tokens.size());
  const auto rows = step_logits(f.window, f.query, g.tokens);
  std::string bytes;
  int64_t chosen_in_top = 0;
  for (std::size_t i = 0; i < g.tokens.size(); ++i) {
    INFO("step " << i);
    std::vector<double> x = rows[i];
    x[261] += 1.5;
    const std::vector<double> ref = log_softmax(x);
    const StepLogprobs& s = g.logprobs[i];
    CHECK(s.chosen.token == g.tokens[i]);
    CHECK(s.chosen.logprob == Approx(ref[g.tokens[i]]).margin(kTol));
    REQUIRE(s.top.size() == 5);
    std::vector<double> sorted = ref;
    std::sort(sorted.rbegin(), sorted.rend());
    for (std::size_t k = 0; k < s.top.size(); ++k) {
      CHECK(s.top[k].logprob == Approx(sorted[k]).margin(kTol));  // the k-th best, in order
      CHECK(s.top[k].logprob == Approx(ref[s.top[k].token]).margin(kTol));
      if (k > 0) CHECK(s.top[k].logprob <= s.top[k - 1].logprob);
    }
    const bool in_top =
        std::any_of(s.top.begin(), s.top.end(), [&](const TokenLogprob& t) { return t.token == s.chosen.token; });
    if (ref[g.tokens[i]] > sorted[4] + kTol) CHECK(in_top);
    if (ref[g.tokens[i]] < sorted[4] - kTol) CHECK(!in_top);
    chosen_in_top += in_top ? 1 : 0;
    bytes += s.chosen.bytes;
  }
  CHECK(chosen_in_top > 0);
  CHECK(bytes == g.text);  // each token's bytes, in order, write the generated text

  // Temperature shapes the draw, not the reported numbers: greedy reports the same first step.
  GenerateOptions greedy = o;
  greedy.temperature = 0;
  const Generation gg = f.window.generate(f.query, greedy);
  CHECK(gg.logprobs.front().chosen.token == gg.logprobs.front().top.front().token);
  CHECK(gg.logprobs.front().top.front().logprob == Approx(g.logprobs.front().top.front().logprob).margin(1e-9));
}

TEST_CASE("logprobs under a constraint are of the masked distribution", "[sampling]") {
  Fixture f = story();
  GenerateOptions o;
  o.max_tokens = 40;
  o.logprobs = true;
  o.top_logprobs = 20;
  o.constraint = Constraint::json_schema(R"({"type": "object", "properties": {"n": {"type": "integer"}},
                                             "required": ["n"]})");
  const Generation g = f.window.generate(f.query, o);
  REQUIRE(g.stop_reason == "constraint_complete");
  const auto rows = step_logits(f.window, f.query, g.tokens);
  for (std::size_t i = 0; i < g.tokens.size(); ++i) {
    INFO("step " << i << " of " << g.text);
    const StepLogprobs& s = g.logprobs[i];
    // Always 20 entries: the allowed tokens (finite), then, where fewer are allowed, the masked ones (-inf)
    // the logits rank highest before the mask.
    REQUIRE(s.top.size() == 20);
    std::size_t allowed = 0;
    while (allowed < s.top.size() && std::isfinite(s.top[allowed].logprob)) ++allowed;
    CHECK(allowed > 0);
    double mass = 0;
    for (std::size_t k = 0; k < s.top.size(); ++k) {
      if (k < allowed) {
        mass += std::exp(s.top[k].logprob);
        continue;
      }
      CHECK(std::isinf(s.top[k].logprob));
      CHECK(s.top[k].logprob < 0);
      if (k > allowed) CHECK(rows[i][s.top[k - 1].token] >= rows[i][s.top[k].token] - kTol);
    }
    CHECK(mass <= 1 + 1e-9);
    // Renormalised over the allowed tokens: at least the unmasked probability.
    CHECK(s.chosen.logprob >= log_softmax(rows[i])[g.tokens[i]] - kTol);
  }
  // The first step allows '{' (with or without a leading space) only: all its mass is there, and the rest of
  // the list is masked tokens.
  CHECK(std::isinf(g.logprobs.front().top.back().logprob));
}

TEST_CASE("sampling options out of range are refused, naming the field", "[sampling]") {
  Fixture f = story();
  const auto refused = [&](GenerateOptions o, const std::string& field) {
    CHECK_THROWS_WITH(f.window.generate(f.query, o), Contains(field));
  };
  GenerateOptions o;
  o.presence_penalty = 2.5;
  refused(o, "presence_penalty");
  o = {};
  o.frequency_penalty = -3;
  refused(o, "frequency_penalty");
  o = {};
  o.logit_bias = {{5, 101}};
  refused(o, "logit_bias[5]");
  o = {};
  o.logit_bias = {{512, 1}};
  refused(o, "logit_bias names token 512");
  o = {};
  o.logprobs = true;
  o.top_logprobs = 21;
  refused(o, "top_logprobs");
  o = {};
  o.top_logprobs = 2;
  refused(o, "needs logprobs");
  o = {};
  o.on_logprobs = [](const orbit::StepLogprobs&) {};  // it would never be called
  refused(o, "on_logprobs needs logprobs = true");
  o = {};
  o.max_tokens = 3;
  CHECK(f.window.generate(f.query, o).logprobs.empty());  // off: nothing recorded
}

}  // namespace ORBIT_TEST_FILE
