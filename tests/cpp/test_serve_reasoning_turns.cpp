// A reasoning parser on the model (ServeCore, no sockets): TinyStories-656K under a template whose generation
// prompt opens <think>, so the whole answer is reasoning. The answer's reasoning is read out of its text, and the
// session's next turn, which sends it back as the assistant's reasoning_content, is the list the idle worker
// prefilled (the anticipated answer carries it): nothing is evicted, the answer's tokens were forwarded in idle
// time.
#include <string>
#include <vector>

#include "orbit_catch.h"
#include "serve/serve_core.h"
#include "serve_test_util.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

namespace sv = orbit::serve;

namespace {

const std::string kThinkTemplate =
    "{%- for message in messages -%}"
    "{%- if message.role == 'assistant' -%}<|im_start|>assistant\n"
    "{% if message.reasoning_content %}<think>\n{{ message.reasoning_content }}\n</think>\n\n{% endif %}"
    "{{ message.content or '' }}<|im_end|>\n"
    "{%- else -%}<|im_start|>{{ message.role }}\n{{ message.content }}<|im_end|>\n{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}<|im_start|>assistant\n<think>\n{%- endif -%}";

}  // namespace

TEST_CASE("serve reasoning: the reasoning sent back is the turn the idle worker prefilled", "[serve][model]") {
  sv::ServeOptions options;
  options.model = serve_test::kModel;
  options.policy = "patch:16:exact";
  options.audit_rate = 0;
  options.chat_template = kThinkTemplate;
  options.reasoning = sv::ReasoningFormat::kQwen3;
  sv::ServeCore core(options);
  sv::ChatRequest r;
  r.model = core.model_name();
  r.messages = {{"user", "What did the dog find?"}};
  r.sampling.max_tokens = 12;
  r.sampling.temperature = 0;
  const std::vector<sv::RunResult> out = serve_test::chat_turns(core, r, "agent");
  core.close();
  REQUIRE(out[0].reasoning.has_value());  // sent back as the next turn's reasoning_content
  CHECK(out[0].text.empty());             // all reasoning: the prompt opened it
  CHECK_FALSE(out[0].reasoning->empty());
  CHECK(out[0].usage.reasoning_tokens == out[0].usage.completion_tokens);
  CHECK(out[1].usage.idle_forward_tokens > 0);
  CHECK(out[1].usage.plan.find("evict") == std::string::npos);
  CHECK(out[1].usage.plan.find("admit") == std::string::npos);
}

}  // namespace ORBIT_TEST_FILE
