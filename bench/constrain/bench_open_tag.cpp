// The open-or-answer step against the plain constrained step (bench_open_tag.h).
#include "bench_open_tag.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "window/sampler.h"

namespace orbit::bench {

namespace {

using Clock = std::chrono::steady_clock;

// The answer as the server builds it where Qwen3 may open its reasoning: at most two newlines, then JSON.
std::shared_ptr<const Constraint> gap_then_json() {
  std::vector<std::shared_ptr<const Constraint>> ways;
  for (const char* gap : {"", "\n", "\n\n"}) {
    ways.push_back(Constraint::sequence({Constraint::literal(gap), Constraint::json_object()}));
  }
  return Constraint::choice(ways);
}

int64_t token_of(const TokenVocabulary& vocabulary, const std::string& bytes) {
  for (int64_t id = 0; id < vocabulary.size(); ++id) {
    if (vocabulary.bytes(id) == bytes) return id;
  }
  return -1;
}

struct Case {
  const char* name;
  bool may_open;              // the block {"<think>", "</think>"}: the open-or-answer step
  std::string before;         // a token's bytes taken first ("" none): the step timed is the one after it
  const char* baseline = "";  // the plain constrained case at the same point (its ratio's denominator)
};

// Microseconds of Sampler::next for the case's timed step, one fresh sampler per rep; the median.
double time_case(const Case& c, const std::shared_ptr<const TokenVocabulary>& vocabulary,
                 const std::shared_ptr<const Constraint>& constraint, const at::Tensor& logits, int64_t reps) {
  GenerateOptions o;
  o.constraint = constraint;
  if (c.may_open) o.constraint_trigger_block = {"<think>", "</think>"};
  const int64_t vocab = vocabulary->size();
  const int64_t before = c.before.empty() ? -1 : token_of(*vocabulary, c.before);
  std::vector<double> us;
  for (int64_t r = 0; r < reps; ++r) {
    detail::SamplerSetup setup;
    setup.vocab = vocab;
    setup.vocabulary = vocabulary;
    detail::Sampler s(o, std::move(setup));
    if (before >= 0) {
      at::Tensor first = at::zeros({vocab}, at::kFloat);
      first[before] = 100;
      if (s.next(first).token != before) return -1;  // the case's first token refused
    }
    const auto t0 = Clock::now();
    const detail::SamplerStep step = s.next(logits);
    us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    if (!step.has_token()) return -1;
  }
  std::nth_element(us.begin(), us.begin() + static_cast<std::ptrdiff_t>(us.size() / 2), us.end());
  return us[us.size() / 2];
}

}  // namespace

void bench_open_tag(const std::string& setting, const std::shared_ptr<const TokenVocabulary>& vocabulary,
                    int64_t reps) {
  const std::vector<Case> cases{
      {"constrained first", false, ""},
      {"open-or-answer first", true, "", "constrained first"},
      {"constrained after \\n", false, "\n"},
      {"open-or-answer after \\n", true, "\n", "constrained after \\n"},
      {"open-or-answer after <", true, "<", "constrained first"},
  };
  const std::shared_ptr<const Constraint> constraint = gap_then_json();
  at::manual_seed(7);
  const at::Tensor logits = at::randn({vocabulary->size()}, at::kFloat);
  std::vector<double> us(cases.size(), 0);
  for (std::size_t i = 0; i < cases.size(); ++i) us[i] = time_case(cases[i], vocabulary, constraint, logits, reps);
  for (std::size_t i = 0; i < cases.size(); ++i) {
    double base = 0;
    for (std::size_t j = 0; j < cases.size(); ++j) {
      if (cases[j].name == std::string(cases[i].baseline)) base = us[j];
    }
    std::printf("%-26s %-26s %7lld %10.1f us", setting.c_str(), cases[i].name,
                static_cast<long long>(vocabulary->size()), us[i]);
    if (base > 0 && us[i] > 0) std::printf("  x%.2f of %s", us[i] / base, cases[i].baseline);
    std::printf("%s\n", us[i] < 0 ? "  (its first token refused)" : "");
  }
}

}  // namespace orbit::bench
