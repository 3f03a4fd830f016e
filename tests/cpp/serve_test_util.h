// Helpers the tests of `orbit serve` below HTTP share (test_serve, test_serve_chat_tools, test_serve_batch,
// test_serve_cuda, test_serve_reasoning_turns, test_serve_audit, test_serve_prefill_pieces, test_serve_responses,
// test_serve_responses_wire): a server on TinyStories-656K without idle-time answers or audits, greedy story
// questions, made-up conversations trimmed to their last messages, a run that must answer, a session's turns with
// idle work between them, a metric read from /metrics' text, a chat body's error, a Responses API stream's events,
// and a wait for a condition.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "orbit_catch.h"
#include "serve/serve_core.h"
#include "serve/wire/serve_api.h"

namespace serve_test {

namespace sv = orbit::serve;

inline const std::string kModel = std::string(ORBIT_MODELS_DIR) + "/tinystories-656k";

inline const std::vector<std::string> kQuestions = {"What did the dog find?", "Who was happy?", "Where were they?",
                                                    "What happened next?",    "Tell me more.",  "Why did she smile?",
                                                    "What did they see?",     "Who came home?"};

// Options of a server on `device` in `dtype` that does nothing in idle time (no anticipated answers, no audits).
inline sv::ServeOptions quiet_options(const std::string& device = "cpu", const std::string& dtype = "float32") {
  sv::ServeOptions o;
  o.model = kModel;
  o.device = device;
  o.dtype = dtype;
  o.anticipate = false;
  o.audit_rate = 0;
  return o;
}

// A greedy question to the story model, after a system message.
inline sv::ChatRequest story_chat(const sv::ServeCore& core, const std::string& question, int64_t max_tokens) {
  sv::ChatRequest r;
  r.model = core.model_name();
  r.messages = {{"system", "You tell short stories."}, {"user", question}};
  r.sampling.max_tokens = max_tokens;
  r.sampling.temperature = 0;
  return r;
}

// A greedy chat request of `messages` to the story model, at most `max_tokens` tokens.
inline sv::ChatRequest greedy_chat(const sv::ServeCore& core, std::vector<orbit::ChatMessage> messages,
                                   int64_t max_tokens = 6) {
  sv::ChatRequest r;
  r.model = core.model_name();
  r.messages = std::move(messages);
  r.sampling.max_tokens = max_tokens;
  r.sampling.temperature = 0;
  return r;
}

// `n` words of a small vocabulary, varied by `seed`: the turns of made-up conversations.
inline std::string words(int seed, int n) {
  static const char* kWords[] = {"the",    "little", "cat",  "saw", "a",   "big",  "dog",   "and", "they",
                                 "played", "in",     "park", "all", "day", "long", "until", "sun", "went"};
  std::string out;
  for (int i = 0; i < n; ++i) out += std::string(i ? " " : "") + kWords[(seed * 7 + i * 3) % 18];
  return out;
}

// The first message of `all` (its system message) and its last `keep` messages (every one when it holds no more):
// what agents send once a conversation is past a length.
inline std::vector<orbit::ChatMessage> trimmed(const std::vector<orbit::ChatMessage>& all, std::size_t keep) {
  std::vector<orbit::ChatMessage> out = {all.front()};
  const std::size_t first = all.size() - 1 > keep ? all.size() - keep : 1;
  out.insert(out.end(), all.begin() + static_cast<std::ptrdiff_t>(first), all.end());
  return out;
}

// Prepares and runs `r` in `session`; both must succeed.
inline sv::RunResult run_answered(sv::ServeCore& core, const sv::ChatRequest& r, const std::string& session,
                                  const sv::RunSink& sink = {}) {
  sv::RunTicket ticket = core.prepare_chat(r, session);
  REQUIRE(ticket.ok());
  sv::RunOutcome out = core.run(ticket, sink);
  REQUIRE(out.result.has_value());
  return *out.result;
}

// A metric's value in the server's /metrics text (the first line that starts with `name` and a space).
inline double metric(sv::ServeCore& core, const std::string& name) {
  const std::string text = core.metrics().render(core.gauges());
  const std::regex line("(^|\n)" + std::regex_replace(name, std::regex(R"([{}"+.])"), R"(\$&)") + " ([0-9.e+-]+)");
  std::smatch m;
  REQUIRE(std::regex_search(text, m, line));
  return std::stod(m[2]);
}

// The error a chat body gets: status and param ("" when it parses).
inline std::pair<int, std::string> chat_error(const std::string& body) {
  const sv::Parsed<sv::ChatRequest> p = sv::parse_chat_request(body);
  if (p.ok()) return {200, ""};
  return {p.error.status, p.error.param};
}

// `turns` chat turns of one session (`session`; "": an anonymous window) from `r`: after each answer, idle
// work (the anticipated answer's prefill, a due audit), then the answer (with the reasoning the server read
// out of it, RunResult::reasoning, as reasoning_content) and the user's "And then?" appended for the next
// turn. Each turn's result; every turn must answer.
inline std::vector<sv::RunResult> chat_turns(sv::ServeCore& core, sv::ChatRequest r, const std::string& session,
                                             int turns = 2) {
  std::vector<sv::RunResult> out;
  for (int turn = 0; turn < turns; ++turn) {
    const sv::RunOutcome o = core.chat(r, session, {});
    REQUIRE(o.result.has_value());
    out.push_back(*o.result);
    core.run_idle_work();
    orbit::ChatMessage answer, next;
    answer.role = "assistant";
    answer.content = o.result->text;
    if (o.result->reasoning) answer.reasoning_content = *o.result->reasoning;
    next.role = "user";
    next.content = "And then?";
    r.messages.push_back(answer);
    r.messages.push_back(next);
  }
  return out;
}

// The events of a Responses API stream (`event: TYPE` and `data: JSON` lines) as (type, data), checking the
// framing (each data's type is its event line's) and the numbering (sequence_number 0, 1, ...).
inline std::vector<std::pair<std::string, nlohmann::json>> parse_events(const std::string& text) {
  std::vector<std::pair<std::string, nlohmann::json>> events;
  std::istringstream in(text);
  std::string line;
  std::string type;
  while (std::getline(in, line)) {
    if (line.rfind("event: ", 0) == 0) type = line.substr(7);
    if (line.rfind("data: ", 0) != 0) continue;
    const nlohmann::json data = nlohmann::json::parse(line.substr(6));
    CHECK(data["type"] == type);
    CHECK(data["sequence_number"] == static_cast<int64_t>(events.size()));
    events.emplace_back(type, data);
  }
  return events;
}

// Waits up to 5 s for `done`, then requires it.
inline void wait_until(const std::function<bool()>& done) {
  for (int i = 0; i < 5000 && !done(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  REQUIRE(done());
}

}  // namespace serve_test
