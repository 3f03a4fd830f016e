// Per-step cost against the number of keys an object has written (bench_key_growth.h).
#include "bench_key_growth.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <unordered_map>
#include <vector>

#include "orbit/common/error.h"

namespace orbit::bench {

namespace {

using Clock = std::chrono::steady_clock;

constexpr int64_t kTight = -2;  // run_once's `remaining` for a budget of the fewest bytes left at each step

std::vector<std::string> random_keys(int64_t n) {
  std::mt19937_64 rng(7);
  std::vector<std::string> out;
  for (int64_t i = 0; i < n; ++i) {
    std::string k;
    for (int c = 0; c < 40; ++c) k.push_back(static_cast<char>('a' + rng() % 26));
    out.push_back(k);
  }
  return out;
}

// The cases, in the order they run.
const std::vector<std::string>& case_names() {
  static const std::vector<std::string> names{"pattern", "loop", "string", "enum", "bounded", "declared"};
  return names;
}

// The schema of a case: keys by a pattern (of 40 letters, or of any number), plain string keys, keys from an
// enum of twice the object's names, plain string keys under minProperties and maxProperties, or every key
// declared.
std::string schema_of(const std::string& name, const std::vector<std::string>& keys, const std::string& value_type) {
  const std::string values = R"(, "additionalProperties": {"type": ")" + value_type + "\"}}";
  if (name == "pattern") return R"({"type": "object", "propertyNames": {"pattern": "^[a-z]{40}$"})" + values;
  if (name == "loop") return R"({"type": "object", "propertyNames": {"pattern": "^[a-z]+$"})" + values;
  if (name == "string") return R"({"type": "object")" + values;
  if (name == "bounded") {
    return R"({"type": "object", "minProperties": 2, "maxProperties": )" + std::to_string(keys.size() + 10) + values;
  }
  if (name == "enum") {
    std::string names;
    for (const std::string& k : keys) names += (names.empty() ? "\"" : ", \"") + k + "\", \"" + k + "x\"";
    return R"({"type": "object", "propertyNames": {"enum": [)" + names + "]}" + values;
  }
  std::string props;
  for (const std::string& k : keys)
    props += (props.empty() ? "\"" : ", \"") + k + R"(": {"type": ")" + value_type + "\"}";
  return R"({"type": "object", "properties": {)" + props + R"(}, "additionalProperties": false})";
}

// Milliseconds per step, one entry per member (its key, ':' and value, and the ',' or '}' after it): the
// constraint's TokenConstraint::allowed and accept, timed apart from the search for the token to take. A last
// entry past the members: the milliseconds of the step that closes the object alone (its '}', where the key
// log frees the object's keys), counted in the last member's as well.
std::vector<double> run_once(const std::shared_ptr<const Constraint>& constraint,
                             const std::shared_ptr<const TokenVocabulary>& vocabulary,
                             const std::unordered_map<std::string, int64_t>& ids, const std::vector<std::string>& keys,
                             const std::string& value, int64_t remaining) {
  std::string text = "{";
  std::vector<std::size_t> ends;  // the offset past each member
  for (std::size_t i = 0; i < keys.size(); ++i) {
    text += (i == 0 ? "\"" : ", \"") + keys[i] + "\": " + value;
    ends.push_back(text.size() + 1);
  }
  text += "}";
  TokenConstraint tc(constraint, vocabulary);
  std::vector<double> per_member(keys.size(), 0.0);
  std::vector<int64_t> steps(keys.size(), 0);
  double close = 0.0;
  for (std::size_t at = 0, member = 0; at < text.size();) {
    // A tight budget: the fewest bytes that complete the text (untimed), so that every step's budget binds; the
    // token is then chosen from the unbudgeted mask (untimed), as the text need not be the shortest.
    const int64_t budget = remaining == kTight ? tc.matcher().min_bytes_to_complete() : remaining;
    const auto t0 = Clock::now();
    const TokenMask timed = tc.allowed(budget);
    const auto t1 = Clock::now();
    const TokenMask mask = remaining == kTight ? tc.allowed() : timed;
    // The bench's own choice of the next token, untimed: the longest token of the text that the mask allows.
    int64_t token = -1;
    std::size_t len = std::min<std::size_t>(16, text.size() - at);
    for (; len > 0; --len) {
      const auto it = ids.find(text.substr(at, len));
      if (it != ids.end() && mask.allows(it->second)) {
        token = it->second;
        break;
      }
    }
    if (token < 0) {
      std::fprintf(stderr, "key growth: no allowed token at byte %zu\n", at);
      return {};
    }
    const auto t2 = Clock::now();
    tc.accept(token);
    const double ms = std::chrono::duration<double, std::milli>((t1 - t0) + (Clock::now() - t2)).count();
    per_member[member] += ms;
    ++steps[member];
    if (at + len == text.size()) close = ms;
    at += len;
    while (member + 1 < ends.size() && at >= ends[member]) ++member;
  }
  for (std::size_t i = 0; i < keys.size(); ++i) per_member[i] /= static_cast<double>(std::max<int64_t>(1, steps[i]));
  per_member.push_back(close);
  return per_member;
}

}  // namespace

std::vector<std::string> key_growth_cases(const std::string& list) {
  if (list.empty()) return case_names();
  std::vector<std::string> out;
  for (std::size_t from = 0; from <= list.size();) {
    const std::size_t comma = std::min(list.find(',', from), list.size());
    const std::string name = list.substr(from, comma - from);
    ORBIT_CHECK(std::find(case_names().begin(), case_names().end(), name) != case_names().end(),
                "--cases: unknown case '" << name << "' (pattern, loop, string, enum, bounded, declared)");
    out.push_back(name);
    from = comma + 1;
  }
  return out;
}

void bench_key_growth(const std::string& setting, const std::shared_ptr<const TokenVocabulary>& vocabulary,
                      int64_t keys, int64_t reps, const std::vector<std::string>& cases, const std::string& values) {
  ORBIT_CHECK(values == "integer" || values == "string", "--values: '" << values << "' is neither integer nor string");
  // A string value of words and the punctuation around quotes, so that tokens holding a '"' are allowed.
  const std::string value = values == "integer" ? "1" : R"("it said, \"see the dog.\" and ran")";
  const std::vector<std::string> names = random_keys(keys);
  std::unordered_map<std::string, int64_t> ids;
  for (int64_t id = vocabulary->size(); id-- > 0;) {
    if (vocabulary->bytes(id).has_value()) ids[*vocabulary->bytes(id)] = id;
  }
  const std::vector<std::size_t> at{0, std::min<std::size_t>(50, names.size() - 1),
                                    std::min<std::size_t>(100, names.size() - 1), names.size() - 1};
  for (const std::string& name : cases) {
    const auto constraint = Constraint::json_schema(schema_of(name, names, values));
    for (const int64_t remaining : {int64_t{-1}, int64_t{1} << 20, kTight}) {
      std::vector<double> best(names.size() + 1, 1e300);  // the last: the closing step
      for (int64_t r = 0; r < reps; ++r) {
        const std::vector<double> ms = run_once(constraint, vocabulary, ids, names, value, remaining);
        if (ms.empty()) return;
        for (std::size_t i = 0; i < ms.size(); ++i) best[i] = std::min(best[i], ms[i]);
      }
      std::printf("%-10s %-7s %-9s %-7s", setting.c_str(), values.c_str(), name.c_str(),
                  remaining == kTight ? "tight"
                  : remaining < 0     ? "none"
                                      : "far");
      for (const std::size_t i : at) std::printf("  key %3zu %8.4f", i, best[i]);
      std::printf("  last/first %6.2f  close %8.4f\n", best[names.size() - 1] / best.front(), best.back());
    }
  }
}

}  // namespace orbit::bench
