// `orbit serve` below HTTP (cli/serve/): the request parser's refusals, streamed text with stop strings and
// split characters, the fair gate's round-robin order, and ServeCore on TinyStories-656K: interleaved
// sessions give the answers they give alone, anonymous requests reuse a kept window, idle sessions leave
// memory past max_sessions and come back from the store, a client that leaves cancels its run, an answer
// prefilled in idle time leaves the next request less to forward, refusals come from prepare (before any
// byte of an answer), and usage reports the engine's radix yardstick. (More of the parser's refusals:
// test_serve_refusals.cpp.)
#include <atomic>
#include <map>
#include <mutex>
#include <thread>

#include "orbit/text_stream.h"
#include "orbit_catch.h"
#include "serve/compute/fair_gate.h"
#include "serve/responses/responses_api.h"
#include "serve/run/tool_stream.h"
#include "serve/serve_core.h"
#include "serve/wire/serve_api.h"
#include "serve/wire/serve_wire.h"
#include "serve_test_util.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

namespace sv = orbit::serve;

namespace {

using serve_test::kModel;

using serve_test::chat_error;
using serve_test::wait_until;

}  // namespace

TEST_CASE("serve: the parser refuses what OpenAI refuses, naming the field", "[serve]") {
  const std::string ok = R"({"model":"m","messages":[{"role":"user","content":"hi"}]})";
  CHECK(chat_error(ok).first == 200);
  CHECK(chat_error("{not json") == std::pair<int, std::string>{400, ""});
  CHECK(chat_error("[1,2]") == std::pair<int, std::string>{400, ""});
  CHECK(chat_error(R"({"messages":[{"role":"user","content":"hi"}]})").second == "model");
  CHECK(chat_error(R"({"model":"m","messages":[]})").second == "messages");
  CHECK(chat_error(R"({"model":"m","messages":[{"role":"robot","content":"x"}]})").second == "messages[0].role");
  CHECK(chat_error(R"({"model":"m","messages":[{"role":"user","content":7}]})").second == "messages[0].content");
  CHECK(chat_error(R"({"model":"m","messages":[{"role":"user","content":[{"type":"image_url"}]}]})").second ==
        "messages[0].content[0].type");
  CHECK(chat_error(R"({"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":0})").second ==
        "max_tokens");
  CHECK(chat_error(R"({"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":8,)"
                   R"("max_completion_tokens":8})")
            .first == 200);
  CHECK(chat_error(R"({"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":8,)"
                   R"("max_completion_tokens":9})")
            .second == "max_tokens");
  CHECK(chat_error(R"({"model":"m","messages":[{"role":"user","content":"x"}],"temperature":3})").second ==
        "temperature");
  CHECK(chat_error(R"({"model":"m","messages":[{"role":"user","content":"x"}],"top_p":-0.1})").second == "top_p");
  // 0 is the top token alone, as OpenAI takes it (clients send it for greedy answers; it was a 400).
  CHECK(chat_error(R"({"model":"m","messages":[{"role":"user","content":"x"}],"top_p":0})").first == 200);
  CHECK(chat_error(R"({"model":"m","messages":[{"role":"user","content":"x"}],"n":2})").first == 200);
  CHECK(chat_error(R"({"model":"m","messages":[{"role":"user","content":"x"}],"n":0})").second == "n");
  CHECK(chat_error(R"({"model":"m","messages":[{"role":"user","content":"x"}],"n":65})").second == "n");
  // Streamed, each choice's chunks carry its index (as OpenAI streams n > 1).
  CHECK(chat_error(R"({"model":"m","messages":[{"role":"user","content":"x"}],"n":2,"stream":true})").first == 200);
  CHECK(chat_error(R"({"model":"m","messages":[{"role":"user","content":"x"}],"stream":"yes"})").second == "stream");
  const std::string streamed = R"({"model":"m","messages":[{"role":"user","content":"x"}],"stream":true,)";
  CHECK(chat_error(streamed + R"("stream_options":{"include_usage":true,"include_obfuscation":false}})").first == 200);
  // include_obfuscation pads each chunk with a random "obfuscation" field (stream_obfuscation.h): on unless
  // false, as OpenAI has it.
  const sv::ServeLimits limits;
  CHECK(sv::parse_chat_request(streamed + R"("stream_options":{"include_obfuscation":true}})", limits)
            .value->sampling.include_obfuscation);
  CHECK_FALSE(sv::parse_chat_request(streamed + R"("stream_options":{"include_obfuscation":false}})", limits)
                  .value->sampling.include_obfuscation);
  CHECK(sv::parse_chat_request(streamed + R"("stream_options":{"include_usage":true}})", limits)
            .value->sampling.include_obfuscation);
  CHECK(chat_error(streamed + R"("stream_options":{"include_obfuscation":"no"}})").second ==
        "stream_options.include_obfuscation");
  CHECK(chat_error(streamed + R"("stream_options":{"include_usage":1}})").second == "stream_options.include_usage");
  CHECK(chat_error(streamed + R"("stream_options":{"usage":true}})").second == "stream_options.usage");
  CHECK(chat_error(R"({"model":"m","messages":[{"role":"user","content":"x"}],"stream_options":{}})").second ==
        "stream_options");
  CHECK(chat_error(R"({"model":"m","messages":[{"role":"user","content":"x"}],"stop":["a","b","c","d","e"]})").second ==
        "stop");
  // `user` is any string; one that is not a session id names the session of its hash: "user-" and the first 128
  // bits of its SHA-256 (a 64-bit FNV-1a collision could be chosen, putting two users in one session).
  CHECK(chat_error(R"({"model":"m","messages":[{"role":"user","content":"x"}],"user":"john doe"})").first == 200);
  CHECK(sv::session_for_user("s-1") == "s-1");
  CHECK(sv::session_for_user("john doe") == "user-94890005f3b2117a353da72602595318");
  CHECK(sv::session_for_user("a.b+c@example.com") != sv::session_for_user("john doe"));
  CHECK(sv::session_id_problem(sv::session_for_user("a.b+c@example.com")).empty());
  CHECK(sv::session_id_problem(sv::session_for_user(std::string(4096, '\xff'))).empty());
  // A valid id in the hashed ones' namespace is hashed too, so no `user` can name the session of another's hash.
  const std::string hashed = sv::session_for_user("john doe");
  CHECK(sv::session_for_user(hashed) != hashed);
  CHECK(sv::session_for_user("user-7") == "user-092081140b677b45dbe983b2f0d4ae02");
  CHECK(sv::session_for_user("user") == "user");
  CHECK(sv::session_for_user("") == "");
  // A call's arguments are text (a cut call's are not JSON), but JSON in them is bounded as the body is.
  const std::string arguments = R"({"model":"m","messages":[{"role":"assistant","tool_calls":[{"id":"c","function":)"
                                R"({"name":"f","arguments":")" +
                                std::string(5000, '[') + std::string(5000, ']') + R"("}}]}]})";
  CHECK(chat_error(arguments).second == "messages[0].tool_calls[0].function.arguments");
  std::string deep = R"({"model":"m","messages":[{"role":"user","content":"x"}],"tools":)";
  deep += std::string(5000, '[') + std::string(5000, ']') + "}";
  CHECK(chat_error(deep).first == 400);
  sv::ServeLimits small;
  small.max_body_bytes = 16;
  CHECK(sv::parse_chat_request(ok, small).error.status == 413);

  const sv::Parsed<sv::ChatRequest> full = sv::parse_chat_request(
      R"({"model":"m","messages":[{"role":"developer","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]},
      {"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]}],
      "max_completion_tokens":5,"temperature":0,"top_p":0.5,"seed":3,"stop":"\n","stream":true,
      "stream_options":{"include_usage":true},"user":"s-1"})");
  REQUIRE(full.ok());
  CHECK(full.value->messages[0].content == "ab");
  CHECK(full.value->messages[1].tool_calls.at(0).name == "f");
  CHECK(*full.value->sampling.max_tokens == 5);
  CHECK(full.value->sampling.stop == std::vector<std::string>{"\n"});
  CHECK(full.value->sampling.include_usage);
  CHECK(full.value->user == "s-1");
  const sv::Parsed<sv::CompletionRequest> completion = sv::parse_completion_request(R"({"model":"m","prompt":["x"]})");
  REQUIRE(completion.ok());
  CHECK(completion.value->prompt == "x");
  CHECK_FALSE(sv::parse_completion_request(R"({"model":"m","prompt":["x","y"]})").ok());
  const sv::Parsed<sv::CompletionRequest> choices = sv::parse_completion_request(R"({"model":"m","prompt":"x","n":2})");
  REQUIRE_FALSE(choices.ok());
  CHECK(choices.error.param == "n");
  // A server whose --max-batch is below the 64 choices a request may ask for refuses more, naming it.
  sv::ServeLimits batch;
  batch.max_choices = 2;
  batch.max_choices_by_batch = true;
  const std::string three = R"({"model":"m","messages":[{"role":"user","content":"hi"}],"n":3})";
  const sv::Parsed<sv::ChatRequest> over = sv::parse_chat_request(three, batch);
  REQUIRE_FALSE(over.ok());
  CHECK(over.error.param == "n");
  CHECK(over.error.message.find("must be in [1, 2] (this server decodes at most 2 sequences at once: --max-batch)") !=
        std::string::npos);
  CHECK(sv::parse_chat_request(R"({"model":"m","messages":[{"role":"user","content":"hi"}],"n":2})", batch).ok());
  // A value below the range says nothing of --max-batch; a batch of one is "1 sequence".
  const sv::Parsed<sv::ChatRequest> zero =
      sv::parse_chat_request(R"({"model":"m","messages":[{"role":"user","content":"hi"}],"n":0})", batch);
  REQUIRE_FALSE(zero.ok());
  CHECK(zero.error.message.find("must be in [1, 2], got 0") != std::string::npos);
  batch.max_choices = 1;
  const sv::Parsed<sv::ChatRequest> two =
      sv::parse_chat_request(R"({"model":"m","messages":[{"role":"user","content":"hi"}],"n":2})", batch);
  REQUIRE_FALSE(two.ok());
  CHECK(two.error.message.find("at most 1 sequence at once: --max-batch") != std::string::npos);
}

TEST_CASE("serve: parameters this server does not serve are refused by name, their no-ops accepted", "[serve]") {
  const std::string head = R"({"model":"m","messages":[{"role":"user","content":"hi"}],)";
  for (const std::string& field : std::vector<std::string>{
           R"("top_k":1)", R"("min_p":0.1)", R"("repetition_penalty":1.1)", R"("typical_p":0.9)", R"("functions":[])",
           R"("function_call":"auto")", R"("audio":{})", R"("prediction":{})", R"("web_search_options":{})",
           R"("modalities":["text","audio"])", R"("reasoning_effort":"low")", R"("service_tier":"flex")"}) {
    INFO(field);
    const sv::Parsed<sv::ChatRequest> p = sv::parse_chat_request(head + field + "}");
    REQUIRE_FALSE(p.ok());
    CHECK(p.error.status == 400);
    CHECK(p.error.code == "unsupported_parameter");
    CHECK(field.find("\"" + p.error.param + "\"") == 0);
    CHECK(p.error.message.find("is not supported by this server") != std::string::npos);
  }
  for (const std::string& field :
       std::vector<std::string>{R"("top_k":null)", R"("modalities":["text"])", R"("reasoning_effort":"none")",
                                R"("service_tier":"auto")", R"("metadata":{"a":"b"})", R"("store":false)"}) {
    INFO(field);
    CHECK(sv::parse_chat_request(head + field + "}").ok());
  }
  const std::string text = R"({"model":"m","prompt":"x",)";
  for (const std::string& field :
       std::vector<std::string>{R"("echo":true)", R"("best_of":3)", R"("suffix":"end")", R"("top_k":5)"}) {
    INFO(field);
    const sv::Parsed<sv::CompletionRequest> p = sv::parse_completion_request(text + field + "}");
    REQUIRE_FALSE(p.ok());
    CHECK(field.find("\"" + p.error.param + "\"") == 0);
  }
  for (const std::string& field : std::vector<std::string>{R"("echo":false)", R"("best_of":1)", R"("suffix":"")"}) {
    CHECK(sv::parse_completion_request(text + field + "}").ok());
  }
  const sv::Parsed<sv::CompletionRequest> ids = sv::parse_completion_request(R"({"model":"m","prompt":[1,2,3]})");
  REQUIRE_FALSE(ids.ok());
  CHECK(ids.error.message.find("token ids") != std::string::npos);
}

TEST_CASE("serve: a field the endpoint does not know is refused by name, never ignored", "[serve]") {
  const std::string head = R"({"model":"m","messages":[{"role":"user","content":"hi"}],)";
  const sv::Parsed<sv::ChatRequest> typo = sv::parse_chat_request(head + R"("temprature":0.5})");
  REQUIRE_FALSE(typo.ok());
  CHECK(typo.error.status == 400);
  CHECK(typo.error.code == "unknown_parameter");
  CHECK(typo.error.param == "temprature");
  CHECK(typo.error.message.find("did you mean 'temperature'") != std::string::npos);
  CHECK(sv::parse_chat_request(head + R"("max_token":5})").error.message.find("did you mean 'max_tokens'") !=
        std::string::npos);
  const sv::Parsed<sv::ChatRequest> stranger = sv::parse_chat_request(head + R"("chat_template_kwargs":null})");
  CHECK(stranger.error.param == "chat_template_kwargs");
  CHECK(stranger.error.message.find("did you mean") == std::string::npos);
  // A key of a megabyte: named in param whole, quoted in the message in part.
  const std::string huge(1 << 20, 'k');
  const sv::Parsed<sv::ChatRequest> big = sv::parse_chat_request(head + "\"" + huge + "\":1}");
  CHECK(big.error.param == huge);
  CHECK(big.error.message.size() < 200);
  // What OpenAI's clients send as hints or defaults is taken; a verbosity other than medium is refused.
  CHECK(sv::parse_chat_request(head + R"("prompt_cache_key":"k","prompt_cache_retention":"24h",)"
                                      R"("prompt_cache_options":{},"safety_identifier":"u","verbosity":"medium"})")
            .ok());
  CHECK(sv::parse_chat_request(head + R"("verbosity":"low"})").error.code == "unsupported_parameter");
  CHECK(sv::parse_chat_request(head + R"("safety_identifier":5})").error.param == "safety_identifier");
  // /v1/completions: chat's fields name the endpoint that serves them; other strangers are refused as in chat.
  const std::string text = R"({"model":"m","prompt":"x",)";
  for (const char* field : {"tools", "response_format", "messages", "store", "metadata", "tool_choice"}) {
    INFO(field);
    const sv::Parsed<sv::CompletionRequest> p = sv::parse_completion_request(text + "\"" + field + "\":{}}");
    REQUIRE_FALSE(p.ok());
    CHECK(p.error.param == field);
    CHECK(p.error.code == "unknown_parameter");
    CHECK(p.error.message.find("/v1/chat/completions field") != std::string::npos);
  }
  CHECK(sv::parse_completion_request(text + R"("foo":1})").error.param == "foo");
  CHECK(sv::parse_completion_request(text + R"("max_completion_tokens":3,"stream":false})").ok());
}

TEST_CASE("serve: a stop string ends the text only where may_stop_before allows it", "[serve]") {
  const std::map<int64_t, std::string> pieces = {{1, "{\"a\""}, {2, ": 1"}, {3, "}"}, {4, "\nmore"}};
  auto decode = [&](const std::vector<int64_t>& tokens) {
    std::string text;
    for (int64_t t : tokens) text += pieces.at(t);
    return text;
  };
  // As a JSON answer's rule: a stop string ends it only after a whole object.
  orbit::TextStream json(decode, {"}", "\n"}, [](const std::string& before) { return before == "{\"a\": 1}"; });
  CHECK(json.push(1) == "{\"a\"");
  CHECK(json.push(2) == ": 1");
  CHECK(json.push(3) == "}");  // the '}' closes the object: it ends nothing
  CHECK_FALSE(json.stopped());
  CHECK(json.push(4).empty());  // the '\n' after the whole object does
  CHECK(json.stopped());
  CHECK(json.released() == "{\"a\": 1}");
  // Without a rule the first '}' ends the text.
  orbit::TextStream free(decode, {"}", "\n"});
  CHECK(free.push(1) == "{\"a\"");
  CHECK(free.push(2) == ": 1");
  CHECK(free.push(3).empty());
  CHECK(free.stopped());
}

TEST_CASE("serve: streamed text holds back split characters and stop strings", "[serve]") {
  const std::map<int64_t, std::string> pieces = {{1, "Hello"}, {2, " wor"}, {3, "ld\nus"},
                                                 {4, "er:"},   {5, "\xC3"}, {6, "\xA9!"}};
  auto decode = [&](const std::vector<int64_t>& tokens) {
    std::string text;
    for (int64_t t : tokens) text += pieces.at(t);
    return text;
  };
  orbit::TextStream plain(decode, {});
  CHECK(plain.push(1) == "Hello");
  CHECK(plain.push(5).empty());  // half of "é"
  CHECK(plain.push(6) == "\xC3\xA9!");
  CHECK(plain.finish().empty());

  orbit::TextStream stopped(decode, {"\nuser:"});
  CHECK(stopped.push(1) == "Hello");
  CHECK(stopped.push(2) == " wor");
  CHECK(stopped.push(3) == "ld");  // "\nus" may start the stop string
  CHECK_FALSE(stopped.stopped());
  CHECK(stopped.push(4).empty());
  CHECK(stopped.stopped());
  CHECK(stopped.released() == "Hello world");
  CHECK(stopped.finish().empty());
}

TEST_CASE("serve: the gate serves lanes round-robin, one forward each", "[serve]") {
  sv::FairGate gate;
  REQUIRE(gate.enter("holder"));
  std::mutex m;
  std::vector<std::string> order;
  auto waiter = [&](const std::string& lane, const std::string& name) {
    return std::thread([&, lane, name] {
      REQUIRE(gate.enter(lane));
      {
        std::lock_guard<std::mutex> lock(m);
        order.push_back(name);
      }
      gate.leave();
    });
  };
  std::thread a1 = waiter("A", "A1");
  wait_until([&] { return gate.waiting() == 1; });
  std::thread a2 = waiter("A", "A2");
  wait_until([&] { return gate.waiting() == 2; });
  std::thread b1 = waiter("B", "B1");
  wait_until([&] { return gate.waiting() == 3; });
  CHECK_FALSE(gate.try_enter_idle());  // requests wait: idle work does not take the gate
  std::atomic<bool> cancel{false};
  std::atomic<int> cancelled_result{-1};
  std::thread c([&] {
    cancelled_result = gate.enter(
                           "C", [&] { return cancel.load(); }, 1)
                           ? 1
                           : 0;
  });
  wait_until([&] { return gate.waiting() == 4; });
  cancel = true;
  wait_until([&] { return cancelled_result.load() == 0; });
  gate.leave();
  for (std::thread* t : {&a1, &a2, &b1, &c}) t->join();
  // A second waiter of lane A is served after lane B's, not before.
  CHECK(order == std::vector<std::string>{"A1", "B1", "A2"});
  CHECK(gate.try_enter_idle());
  gate.leave();
  gate.close();
  CHECK_FALSE(gate.enter("late"));
}

TEST_CASE("serve: sessions on the model: interleaving, anonymous reuse, LRU, cancel", "[serve][model]") {
  sv::ServeOptions options;
  options.model = kModel;
  options.policy = "patch:16:exact";
  options.max_sessions = 2;
  options.max_known_sessions = 4;
  options.chunk_min_tokens = 16;
  sv::ServeCore core(options);
  const std::string doc =
      "The dog found a big red ball in the park. Lily was happy. She threw the ball and the dog ran after it.";
  auto request = [&](const std::string& question) {
    sv::ChatRequest r;
    r.model = core.model_name();
    r.messages = {{"system", "You tell short stories."}, {"tool", doc}, {"user", question}};
    r.sampling.max_tokens = 8;
    r.sampling.temperature = 0;
    return r;
  };
  auto run = [&](const sv::ChatRequest& r, const std::string& session, const sv::RunSink& sink = {}) {
    sv::RunTicket ticket = core.prepare_chat(r, session);
    REQUIRE(ticket.ok());
    sv::RunOutcome out = core.run(ticket, sink);
    REQUIRE(out.result.has_value());
    return *out.result;
  };
  const std::vector<std::string> questions = {"What did the dog find?", "Who was happy?", "Where were they?"};
  std::vector<std::string> alone;
  for (const std::string& q : questions) alone.push_back(run(request(q), "").text);

  // Three sessions at once, one forward at a time: each answer is the one it gets alone.
  std::vector<std::string> together(questions.size());
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < questions.size(); ++i) {
    threads.emplace_back([&, i] { together[i] = run(request(questions[i]), "s" + std::to_string(i)).text; });
  }
  for (auto& t : threads) t.join();
  CHECK(together == alone);

  // The same anonymous request again (a retry) reuses the kept window: only the generation prompt is
  // forwarded. (The sessions' requests since have sent it out of memory; its record stayed, and its KV
  // comes back from the store.)
  const sv::RunResult again = run(request(questions[0]), "");
  CHECK(again.text == alone[0]);
  CHECK(again.usage.forward_tokens < 8);

  // max_sessions = 2, anonymous windows counted: the anonymous window just used and one of s0, s1, s2 are
  // resident; the others have left memory, and come back from the store.
  // (A release skips a window the idle worker holds; enforce_session_budget waits for it.)
  core.enforce_session_budget();
  int resident = 0;
  for (int i = 0; i < 3; ++i) resident += core.session_info("s" + std::to_string(i)).value()["resident"].get<bool>();
  CHECK(resident == 1);
  std::string gone;
  for (int i = 0; i < 3; ++i) {
    if (!core.session_info("s" + std::to_string(i)).value()["resident"].get<bool>()) gone = "s" + std::to_string(i);
  }
  REQUIRE_FALSE(gone.empty());
  const sv::RunResult back = run(request(questions[std::stoi(gone.substr(1))]), gone);
  CHECK(back.text == alone[std::stoi(gone.substr(1))]);
  CHECK(core.session_info(gone).value()["left_memory"].get<int64_t>() == 1);
  CHECK_FALSE(core.session_info("nobody").has_value());
  CHECK(core.end_session(gone) == sv::SessionTable::End::kEnded);
  CHECK_FALSE(core.session_info(gone).has_value());
  CHECK(core.end_session(gone) == sv::SessionTable::End::kUnknown);
  // A session a prepared request holds cannot be ended under it (409 over HTTP); once it ran, it can.
  {
    const sv::ChatRequest held_request = request(questions[0]);
    sv::RunTicket held = core.prepare_chat(held_request, "held");
    REQUIRE(held.ok());
    CHECK(core.end_session("held") == sv::SessionTable::End::kBusy);
    REQUIRE(core.run(held, {}).result.has_value());
  }
  CHECK(core.end_session("held") == sv::SessionTable::End::kEnded);

  // A client that leaves after the first piece of text cancels the run. The batch decodes on a thread of
  // its own, so how many tokens it runs ahead before it sees the cancel depends on scheduling (a loaded
  // machine may deschedule the request's thread for a while): the run ends cancelled, short of its limit.
  sv::RunSink sink;
  sink.on_text = [](const std::string&) { return false; };
  sv::ChatRequest longer = request("Tell me more.");
  longer.sampling.max_tokens = 300;
  longer.sampling.logit_bias = {{2, -100.0}};  // the model's end of story: the run lasts until the cancel
  const sv::RunResult cut = run(longer, "s-cut", sink);
  CHECK(cut.finish_reason == "cancelled");
  CHECK(cut.usage.completion_tokens < 300);

  // Session records past max_known_sessions: the oldest not resident are forgotten.
  for (const char* id : {"f1", "f2", "f3"}) run(request(questions[0]), id);
  core.enforce_session_budget();
  CHECK(core.gauges().sessions == 4);
  CHECK(core.gauges().resident_sessions == 2);
  CHECK(core.session_info("f3").has_value());
  core.close();
}

TEST_CASE("serve: anonymous windows are matched to requests by what they continue and share", "[serve]") {
  auto msg = [](const std::string& role, const std::string& content) {
    orbit::ChatMessage m;
    m.role = role;
    m.content = content;
    return sv::digest(m);
  };
  const sv::MessageDigest sys = msg("system", "You tell short stories."), doc = msg("tool", "A long page.");
  const sv::MessageDigest q1 = msg("user", "Who?"), a1 = msg("assistant", "Lily."), q2 = msg("user", "Why?");
  const sv::MessageDigest tools = sv::digest_tools(R"([{"type":"function"}])"), none = sv::digest_tools("");
  CHECK(sys.size == 29);  // role and content
  CHECK_FALSE(msg("user", "Who?") == msg("assistant", "Who?"));
  CHECK_FALSE(msg("user", "ab") == msg("user", "ba"));
  const sv::LastRequest last{{sys, doc, q1, a1}, true, none};

  // Sending the answer back continues the window, wherever it sits (the page trimmed away).
  const sv::WindowMatch trimmed = sv::match_window(last, {sys, q1, a1, q2}, none);
  CHECK(trimmed.continues);
  CHECK(trimmed.shared_size == sys.size + q1.size + a1.size);
  CHECK(trimmed.leading == 1);
  // A retry (the same request again) continues it; an edited question does not.
  CHECK(sv::match_window(last, {sys, doc, q1}, none).continues);
  const sv::WindowMatch edited = sv::match_window(last, {sys, doc, q2}, none);
  CHECK_FALSE(edited.continues);
  CHECK(edited.shared_size == sys.size + doc.size);
  CHECK(edited.leading == 2);
  // Another conversation under the same system prompt shares it and no more; the same tools count only
  // beside a shared message, and other tools break the leading run.
  const sv::WindowMatch stranger = sv::match_window(last, {sys, q2}, none);
  CHECK_FALSE(stranger.continues);
  CHECK(stranger.shared_size == sys.size);
  CHECK(stranger < trimmed);
  CHECK(edited < trimmed);
  CHECK(stranger < edited);
  const sv::LastRequest with_tools{{sys, q1, a1}, true, tools};
  CHECK(sv::match_window(with_tools, {q2}, tools).shared_size == 0);
  CHECK(sv::match_window(with_tools, {sys, q2}, tools).shared_size == sys.size + tools.size);
  const sv::WindowMatch other_tools = sv::match_window(with_tools, {sys, q1, a1, q2}, none);
  CHECK(other_tools.continues);
  CHECK(other_tools.leading == 0);
  CHECK(other_tools.shared_size == sys.size + q1.size + a1.size);
  // Each message the window holds matches once: a question asked twice shares one copy.
  CHECK(sv::match_window(last, {q1, q1}, none).shared_size == q1.size);
  // A window whose last run gave no answer: a retry continues it.
  const sv::LastRequest unanswered{{sys, q1}, false, none};
  CHECK(sv::match_window(unanswered, {sys, q1}, none).continues);
  CHECK_FALSE(sv::match_window(unanswered, {sys, q1, q2}, none).continues);
}

TEST_CASE("serve: an anonymous conversation that trimmed its history finds its own window", "[serve][model]") {
  // Two agents under one system prompt, their requests interleaved without sessions: the system prompt
  // alone must not put the second in the first one's window, where every request would evict the other
  // agent's history and recall its own from the store. Later both trim their first page, so only the
  // system prompt leads their lists and only the answers they send back tell the windows apart. Every
  // request must do to its window what it does in the agent's own named session.
  auto conversation = [](bool named) {
    sv::ServeOptions options;
    options.model = kModel;
    options.policy = "patch:16:exact";
    options.anticipate = false;
    options.anonymous_windows = 2;
    options.chunk_min_tokens = 16;
    sv::ServeCore core(options);
    const std::vector<std::string> pages = {
        "The dog found a big red ball in the park. Lily was happy. She threw the ball and the dog ran after it.",
        "Tom had a small boat. He took it to the pond with his mom. The boat went fast on the water.",
        "Sue liked to draw. One day she drew a big tree with red apples. Her friend Ben saw it and wanted to draw.",
        "The cat sat in the sun by the door. A bird came down to the grass and the cat watched it all day long."};
    std::vector<std::vector<orbit::ChatMessage>> lists(2);
    std::vector<double> forwarded;
    std::vector<std::string> plans;  // what each request did to its window, as usage.orbit.plan says
    auto turn = [&](int agent, const std::string& question) {
      std::vector<orbit::ChatMessage>& list = lists[agent];
      if (list.empty())
        list = {{"system", "You tell short stories."}, {"tool", pages[agent]}, {"tool", pages[2 + agent]}};
      list.push_back({"user", question});
      sv::ChatRequest r;
      r.model = core.model_name();
      r.messages = list;
      r.sampling.max_tokens = 8;
      r.sampling.temperature = 0;
      const sv::RunOutcome o = core.chat(r, named ? "agent" + std::to_string(agent) : "", {});
      REQUIRE(o.result.has_value());
      list.push_back({"assistant", o.result->text});
      forwarded.push_back(o.result->usage.forward_tokens);
      plans.push_back(o.result->usage.plan);
      core.run_idle_work();  // whatever idle work there is, done before the next request in both runs
    };
    turn(1, "Who was there?");
    turn(0, "What did they find?");
    turn(0, "Why?");
    turn(1, "Where did they go?");
    for (auto& list : lists) list.erase(list.begin() + 1);  // both trim their first page
    turn(1, "What then?");
    turn(0, "And then?");
    const sv::MetricGauges g = core.gauges();
    CHECK(g.anonymous_windows == (named ? 0 : 2));  // a window per agent
    CHECK(g.resident_anonymous_windows == g.anonymous_windows);
    CHECK(g.sessions == (named ? 2 : 0));
    core.close();
    return std::make_pair(plans, forwarded);
  };
  const auto anonymous = conversation(false), named = conversation(true);
  CHECK(anonymous.first == named.first);
  CHECK(anonymous.second == named.second);
  CHECK(named.first[4] == "keep 5, turn 2, evict 1");  // the page left; the rest of the window stayed
}

TEST_CASE("serve: an answer prefilled in idle time is kept by the next request", "[serve][model]") {
  // The same two requests of one session (or, session "", of an anonymous window: framework defaults send
  // none), with and without anticipation.
  auto two_turns = [](bool anticipate, const std::string& session) {
    sv::ServeOptions options;
    options.model = kModel;
    options.policy = "patch:16:exact";
    options.anticipate = anticipate;
    sv::ServeCore core(options);
    const std::vector<sv::RunResult> out =
        serve_test::chat_turns(core, serve_test::story_chat(core, "What did the dog find?", 12), session);
    core.close();
    return out;
  };
  for (const std::string session : {"agent", ""}) {
    INFO("session '" << session << "'");
    const std::vector<sv::RunResult> ahead = two_turns(true, session);
    const std::vector<sv::RunResult> plain = two_turns(false, session);
    CHECK(ahead[0].text == plain[0].text);
    CHECK(ahead[1].text == plain[1].text);
    CHECK(ahead[1].usage.idle_forward_tokens > 0);
    CHECK(plain[1].usage.idle_forward_tokens == 0);
    CHECK(ahead[1].usage.plan.find("evict") == std::string::npos);  // the prefilled answer was what came back
    // The answer's tokens moved from the critical path to idle time.
    CHECK(ahead[1].usage.forward_tokens < plain[1].usage.forward_tokens);
    CHECK(ahead[1].usage.forward_tokens + ahead[1].usage.idle_forward_tokens == Approx(plain[1].usage.forward_tokens));
  }
}

TEST_CASE("serve: --deterministic ends each answer with the idle work it left done", "[serve][model]") {
  // A session under the default policy (background encodes, the anticipated answer, heals): a page shown, a
  // trim from the front, questions. Under ServeOptions::deterministic nothing is left for idle time when a
  // request returns, so two servers give the same plans, forwards and answers.
  auto conversation = [] {
    sv::ServeOptions options;
    options.model = kModel;
    options.deterministic = true;
    options.chunk_min_tokens = 8;
    sv::ServeCore core(options);
    std::vector<orbit::ChatMessage> list = {
        {"system", "You tell short stories."},
        {"tool", "Tom had a small boat. He took it to the pond with his mom. The boat went fast on the water."},
        {"user", "What did Tom do?"}};
    std::vector<std::string> out;
    for (int turn = 0; turn < 4; ++turn) {
      if (turn == 2) list.erase(list.begin() + 1, list.begin() + 3);  // the page and its question leave
      const sv::RunOutcome o = core.chat(serve_test::greedy_chat(core, list, 8), "agent", {});
      REQUIRE(o.result.has_value());
      CHECK(core.run_idle_work() == 0);  // nothing was left: the answer ended after it
      out.push_back(o.result->text + " | " + o.result->usage.plan + " | " +
                    std::to_string(o.result->usage.forward_tokens));
      list.push_back({"assistant", o.result->text});
      list.push_back({"user", turn % 2 == 0 ? "And then?" : "Why?"});
    }
    core.close();
    return out;
  };
  const std::vector<std::string> first = conversation();
  CHECK(first == conversation());
}

TEST_CASE("serve: refusals come before the run; usage reports the engine's radix yardstick", "[serve][model]") {
  sv::ServeOptions options;
  options.model = kModel;
  options.policy = "patch:16:exact";
  sv::ServeCore core(options);
  sv::ChatRequest r;
  r.model = core.model_name();
  r.messages = {{"system", "You tell short stories."}, {"user", "What did the dog find?"}};
  r.sampling.max_tokens = 6;
  r.sampling.temperature = 0;

  // prepare_chat answers every check before anything runs, and a refused request leaves no session behind.
  sv::ChatRequest too_long = r;
  too_long.messages.back().content.clear();
  for (int i = 0; i < 400; ++i) too_long.messages.back().content += "the dog ran ";
  const sv::RunTicket past_context = core.prepare_chat(too_long, "refused");
  REQUIRE_FALSE(past_context.ok());
  CHECK(past_context.error().status == 400);
  CHECK(past_context.error().code == "context_length_exceeded");
  CHECK(past_context.error().param == "messages");
  CHECK(past_context.error().message.find("the prompt is ") == 0);
  sv::ChatRequest greedy = r;
  greedy.sampling.max_tokens = 100000;
  const sv::RunTicket past_room = core.prepare_chat(greedy, "refused");
  REQUIRE_FALSE(past_room.ok());
  CHECK(past_room.error().param == "max_tokens");
  CHECK_FALSE(core.session_info("refused").has_value());
  sv::ChatRequest unknown = r;
  unknown.model = "gpt-4";
  CHECK(core.prepare_chat(unknown, "").error().status == 404);
  CHECK(core.chat(unknown, "", {}).error.code == "model_not_found");

  // The first read of a prompt forwards all of it on the yardstick; the same prompt again, in another
  // session's window, only its last token, for the logits (the engine's radix cache is shared by every
  // window; planner/prefix_cache.h).
  const sv::RunOutcome first = core.chat(r, "a", {});
  REQUIRE(first.result.has_value());
  CHECK(first.result->usage.radix_cache_tokens == first.result->usage.prompt_tokens);
  const sv::RunOutcome again = core.chat(r, "b", {});
  REQUIRE(again.result.has_value());
  CHECK(again.result->usage.radix_cache_tokens == 1);
  CHECK(again.result->text == first.result->text);
  CHECK(core.session_info("a").value()["savings"]["radix_cache_tokens"].get<int64_t>() ==
        first.result->usage.radix_cache_tokens);

  // /v1/completions: the same yardstick (its prompt may share a BOS with the chats' renderings).
  sv::CompletionRequest c;
  c.model = core.model_name();
  c.prompt = "Once upon a time there was a cat called Tom.";
  c.sampling.max_tokens = 4;
  c.sampling.temperature = 0;
  const sv::RunOutcome once = core.complete(c, {});
  REQUIRE(once.result.has_value());
  CHECK(once.result->usage.radix_cache_tokens > 0);
  CHECK(once.result->usage.radix_cache_tokens <= once.result->usage.prompt_tokens);
  const sv::RunOutcome twice = core.complete(c, {});
  REQUIRE(twice.result.has_value());
  CHECK(twice.result->usage.radix_cache_tokens == 1);
  CHECK(twice.result->text == once.result->text);
  core.close();
}

}  // namespace ORBIT_TEST_FILE
