// `orbit serve` below HTTP (ServeCore) on TinyStories-656K with a ChatML template that renders tools and
// tool calls: a tool-calling agent's requests sent back to back, each with the previous answer and a tool
// result appended, never forward more than the engine's radix yardstick for the same request
// (usage.orbit.forward_tokens <= usage.orbit.radix_cache_tokens), whether or not the idle worker ran between
// them; an agent that trims its history, served under a policy that keeps the trim's survivors approximate
// and heals them in idle time, neither (the heal carries the decoded answer along: window_state.h).
#include <string>
#include <vector>

#include "orbit_catch.h"
#include "serve/serve_core.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

namespace sv = orbit::serve;

namespace {

const std::string kModel = std::string(ORBIT_MODELS_DIR) + "/tinystories-656k";

// Qwen-style ChatML with Hermes tool calls: the generation prompt is how an assistant message starts.
const char* kTemplate =
    "{% if tools %}<|im_start|>system\n{% if messages[0].role == 'system' %}{{ messages[0].content }}{% endif %}\n"
    "<tools>{% for tool in tools %}\n{{ tool | tojson }}{% endfor %}\n</tools><|im_end|>\n"
    "{% elif messages[0].role == 'system' %}<|im_start|>system\n{{ messages[0].content }}<|im_end|>\n{% endif %}"
    "{% for message in messages %}{% if message.role == 'system' %}"
    "{% elif message.role == 'tool' %}<|im_start|>user\n<tool_response>\n{{ message.content }}\n</tool_response>"
    "<|im_end|>\n"
    "{% else %}<|im_start|>{{ message.role }}\n{% if message.content %}{{ message.content }}{% endif %}"
    "{% if message.tool_calls %}{% for call in message.tool_calls %}\n<tool_call>\n{\"name\": \"{{ "
    "call.function.name }}\", \"arguments\": {{ call.function.arguments | tojson }}}\n</tool_call>{% endfor %}"
    "{% endif %}<|im_end|>\n{% endif %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

const char* kTools = R"([{"type":"function","function":{"name":"lookup_order","description":"Find an order",)"
                     R"("parameters":{"type":"object","properties":{"id":{"type":"string"}}}}}])";

orbit::ChatMessage message(const std::string& role, const std::string& content) {
  orbit::ChatMessage m;
  m.role = role;
  m.content = content;
  return m;
}

struct Agent {
  sv::ServeCore& core;
  std::string session;
  bool idle_between = false;
  bool with_tools = true;  // the request's `tools` (the template's tool list); the calls render either way
  std::vector<orbit::ChatMessage> messages = {message("system", "You help the customers of a toy shop."),
                                              message("user", "Where is my order?")};
  std::vector<sv::RunUsage> usages;

  // One request; then the answer, with a call of lookup_order, and the tool's result appended.
  void step(int i) {
    sv::ChatRequest r;
    r.model = core.model_name();
    r.messages = messages;
    if (with_tools) r.tools_json = kTools;
    r.sampling.max_tokens = 6;
    r.sampling.temperature = 0;
    const sv::RunOutcome o = core.chat(r, session, {});
    INFO("request " << i << ": " << o.error.message);
    REQUIRE(o.result.has_value());
    usages.push_back(o.result->usage);
    orbit::ChatMessage answer = message("assistant", o.result->text);
    answer.tool_calls = o.result->tool_calls;
    if (answer.tool_calls.empty()) {
      orbit::ChatToolCall call;
      call.id = "call-" + std::to_string(i);
      call.name = "lookup_order";
      call.arguments = "{\"id\": \"" + std::to_string(100 + i) + "\"}";
      answer.tool_calls.push_back(call);
    }
    messages.push_back(answer);
    orbit::ChatMessage result = message("tool", "Order " + std::to_string(100 + i) + " ships on monday.");
    result.tool_call_id = answer.tool_calls.front().id;
    messages.push_back(result);
    if (idle_between) core.run_idle_work();
  }
};

sv::ServeOptions serve_options(const std::string& policy) {
  sv::ServeOptions options;
  options.model = kModel;
  options.policy = policy;
  options.chat_template = kTemplate;
  options.anticipate = false;  // no idle-time prefill of the answer: the tail alone must keep it
  options.audit_rate = 0;
  return options;
}

}  // namespace

TEST_CASE("serve: an append-only tool conversation forwards no request more than the radix cache",
          "[serve][model][reuse]") {
  for (const bool idle_between : {false, true}) {
    INFO("idle work between requests: " << idle_between);
    sv::ServeCore core(serve_options(""));
    Agent agent{core, "agent", idle_between};
    for (int i = 0; i < 3; ++i) agent.step(i);  // as many as TinyStories-656K's 512 positions hold
    for (std::size_t i = 0; i < agent.usages.size(); ++i) {
      INFO("request " << i << ": " << agent.usages[i].plan);
      CHECK(agent.usages[i].forward_tokens <= static_cast<double>(agent.usages[i].radix_cache_tokens));
    }
    core.close();
  }
}

TEST_CASE("serve: after an idle heal, the answer sent back is not prefilled again", "[serve][model][reuse]") {
  // patch:16:heal keeps a trim's survivors approximate and heals them when the session is idle.
  sv::ServeCore core(serve_options("patch:16:heal"));
  Agent agent{core, "trimming", true, false};
  for (int i = 0; i < 5; ++i) {
    if (i == 3) agent.messages.erase(agent.messages.begin() + 1, agent.messages.begin() + 4);  // the oldest turns
    agent.step(i);
  }
  // The trim left the window approximate, so the idle work after it healed it (Window::idle) before the
  // last request, which sends the answer back with the tool's result after it.
  REQUIRE(agent.usages[3].predicted_kl > 0);
  CHECK(agent.usages[4].plan.find("evict") == std::string::npos);
  for (std::size_t i = 0; i < agent.usages.size(); ++i) {
    INFO("request " << i << ": " << agent.usages[i].plan);
    CHECK(agent.usages[i].forward_tokens <= static_cast<double>(agent.usages[i].radix_cache_tokens));
  }
  core.close();
}

}  // namespace ORBIT_TEST_FILE
