// orbit's chat templates (orbit/runtime/chat_template.h) against @huggingface/jinja, the JavaScript engine
// Hugging Face renders chat templates with (tests/node/chat_template_oracle.mjs). Every template in
// tests/data/templates (Llama 3.1 and 3.2, Qwen2.5, Qwen3, Mistral 7B and Nemo, Gemma 2 and 3, SmolLM2) renders
// every message list below, with and without the generation prompt: the text must be byte-identical,
// and where the reference raises (a template refusing a system turn, say) orbit must refuse too.
// Every list also goes through ChatTemplate::render(ChatMessage...), reasoning_content included (Qwen3 renders
// an assistant turn's reasoning after the last user query, and reads it from <think> tags in the content
// where the field is absent), and a content of null or none (ContentForm: None and undefined to the template).
//
// Exit status 77 (CTest SKIP_RETURN_CODE: reported as skipped) where node or the package is missing:
// scripts/test.sh installs it into tests/node/node_modules.
#include <sys/wait.h>
#include <unistd.h>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "orbit/common/error.h"
#include "orbit/runtime/chat_template.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::ordered_json;
using orbit::runtime::ChatMessage;
using orbit::runtime::ChatRenderOptions;
using orbit::runtime::ChatTemplate;
using orbit::runtime::ChatToolCall;

constexpr int kSkip = 77;
const fs::path kTemplates = fs::path(ORBIT_TEST_DATA_DIR) / "templates";
const fs::path kNodeDir = ORBIT_NODE_DIR;

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

ordered_json msg(const char* role, const std::string& content) { return {{"role", role}, {"content", content}}; }

ordered_json tool_call(const char* id, const char* name, ordered_json args) {
  return {{"id", id}, {"type", "function"}, {"function", {{"name", name}, {"arguments", std::move(args)}}}};
}

ordered_json weather_tools() {
  return ordered_json::parse(R"([
    {"type": "function", "function": {"name": "get_weather", "description": "Current weather in a city.",
      "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "City, Country"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["city"]}}},
    {"type": "function", "function": {"name": "search", "description": "Search the web.",
      "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}}}])");
}

struct Conversation {
  std::string name;
  ordered_json messages;
  bool with_tools = false;
};

std::vector<Conversation> conversations() {
  const std::string sys = "You are a careful assistant.";
  ordered_json call = msg("assistant", "");
  call["tool_calls"] = {tool_call("call12345", "get_weather", {{"city", "Paris, France"}, {"unit", "celsius"}})};
  ordered_json result = msg("tool", "{\"temperature\": 21.5, \"sky\": \"clear\"}");
  result["tool_call_id"] = "call12345";
  result["name"] = "get_weather";
  ordered_json two_calls = msg("assistant", "Let me check both.");
  two_calls["tool_calls"] = {tool_call("callAAAAA", "get_weather", {{"city", "Oslo"}}),
                             tool_call("callBBBBB", "search", {{"query", "Oslo events \"today\""}})};
  ordered_json r1 = msg("tool", "8 degrees");
  r1["tool_call_id"] = "callAAAAA";
  ordered_json r2 = msg("tool", "A concert at 8pm.");
  r2["tool_call_id"] = "callBBBBB";
  ordered_json named = msg("user", "Hi, I'm Ann.");
  named["name"] = "ann";
  const auto thought = [](const std::string& content, const std::string& reasoning) {
    ordered_json m = msg("assistant", content);
    m["reasoning_content"] = reasoning;
    return m;
  };
  // A turn of calls alone as OpenAI's clients send it (content null: the template's None), and with no content key.
  ordered_json null_call = call;
  null_call["content"] = nullptr;
  ordered_json bare_call = call;
  bare_call.erase("content");
  ordered_json thought_call = thought("", "\nThe user wants the weather; I should call get_weather.\n");
  thought_call["tool_calls"] = call["tool_calls"];
  return {
      {"one user turn", ordered_json::array({msg("user", "Hello!")})},
      {"system and user", ordered_json::array({msg("system", sys), msg("user", "What is 2 + 2?")})},
      {"multi-turn", ordered_json::array(
                         {msg("user", "Hi"), msg("assistant", "Hello! How can I help?"), msg("user", "Tell a joke.")})},
      {"system multi-turn",
       ordered_json::array({msg("system", sys), msg("user", "Hi"), msg("assistant", "Hello."), msg("user", "Bye")})},
      {"whitespace and unicode",
       ordered_json::array({msg("user", "  caf\xc3\xa9 \xf0\x9f\x99\x82\n\n tabs\tand \"quotes\" \\ "),
                            msg("assistant", "\n  ok  \n"), msg("user", "\xe4\xbd\xa0\xe5\xa5\xbd")})},
      {"named user", ordered_json::array({named, msg("assistant", "Hi Ann."), msg("user", "Again")})},
      {"tool call and result",
       ordered_json::array({msg("system", sys), msg("user", "Weather in Paris?"), call, result}), true},
      {"tool call, result, answer, no system",
       ordered_json::array({msg("user", "Weather in Paris?"), call, result, msg("assistant", "It is 21.5 C and clear."),
                            msg("user", "Thanks!")}),
       true},
      {"a call with content null", ordered_json::array({msg("user", "Weather in Paris?"), null_call, result}), true},
      {"a call without content", ordered_json::array({msg("user", "Weather in Paris?"), bare_call, result}), true},
      {"two calls, two results", ordered_json::array({msg("user", "Oslo?"), two_calls, r1, r2}), true},
      {"tools offered, plain chat", ordered_json::array({msg("system", sys), msg("user", "Hello")}), true},
      {"tool turns without tools", ordered_json::array({msg("user", "Weather in Paris?"), call, result})},
      {"reasoning in an earlier and the last turn",
       ordered_json::array({msg("system", sys), msg("user", "What is 2 + 2?"), thought("4", "Two and two make four."),
                            msg("user", "And 3 + 3?"), thought("\n6", "\n\nThree and three: six.\n")})},
      {"reasoning before a call, its result",
       ordered_json::array({msg("user", "Weather in Paris?"), thought_call, result}), true},
      {"empty reasoning beside think tags",
       ordered_json::array({msg("user", "Hi"), thought("<think>\nhmm\n</think>\n\nHello.", "")})},
      {"think tags, no reasoning field",
       ordered_json::array({msg("user", "Hi"), msg("assistant", "<think>\nhmm\n</think>\n\nHello."), msg("user", "Bye"),
                            msg("assistant", "<think>ok</think>Bye.")})},
  };
}

struct Tokens {
  const char* prefix;
  const char* bos;
  const char* eos;
};

Tokens tokens_for(const std::string& name) {
  static const Tokens kTable[] = {{"llama", "<|begin_of_text|>", "<|eot_id|>"},
                                  {"qwen", "", "<|im_end|>"},
                                  {"mistral", "<s>", "</s>"},
                                  {"gemma", "<bos>", "<eos>"},
                                  {"smollm", "<|im_start|>", "<|im_end|>"}};
  for (const Tokens& t : kTable) {
    if (name.rfind(t.prefix, 0) == 0) return t;
  }
  return {"", "", ""};
}

// The message list as ChatMessage values, or false when it carries something they cannot express.
bool as_messages(const ordered_json& list, std::vector<ChatMessage>& out) {
  for (const auto& m : list) {
    ChatMessage c;
    c.role = m["role"];
    if (!m.contains("content")) {
      c.content_form = orbit::ContentForm::kAbsent;
    } else if (m["content"].is_null()) {
      c.content_form = orbit::ContentForm::kNull;
    } else {
      c.content = m["content"];
    }
    if (m.contains("reasoning_content")) c.reasoning_content = m["reasoning_content"].get<std::string>();
    if (m.contains("name")) c.name = m["name"].get<std::string>();
    if (m.contains("tool_call_id")) c.tool_call_id = m["tool_call_id"].get<std::string>();
    if (m.contains("tool_calls")) {
      for (const auto& t : m["tool_calls"]) {
        c.tool_calls.push_back(ChatToolCall{t["id"], t["function"]["name"], t["function"]["arguments"].dump()});
      }
    }
    out.push_back(std::move(c));
  }
  return true;
}

struct Job {
  std::string template_name;
  const Conversation* conversation;
  bool add_generation_prompt;
};

int run() {
  if (std::system("node --version > /dev/null 2>&1") != 0) {
    std::cout << "SKIPPED: node is not installed (scripts/test.sh installs Node.js and the oracle package)\n";
    return kSkip;
  }
  if (!fs::exists(kNodeDir / "node_modules" / "@huggingface" / "jinja")) {
    std::cout << "SKIPPED: " << kNodeDir.string()
              << " has no @huggingface/jinja (npm install --prefix tests/node; scripts/test.sh does)\n";
    return kSkip;
  }
  std::vector<std::pair<std::string, std::string>> templates;
  for (const auto& entry : fs::directory_iterator(kTemplates)) {
    if (entry.path().extension() == ".jinja") {
      templates.emplace_back(entry.path().stem().string(), read_file(entry.path()));
    }
  }
  std::sort(templates.begin(), templates.end());
  const std::vector<Conversation> convs = conversations();
  ordered_json request = {{"templates", ordered_json::object()}, {"jobs", ordered_json::array()}};
  std::vector<Job> jobs;
  for (const auto& [name, source] : templates) {
    request["templates"][name] = source;
    const Tokens tok = tokens_for(name);
    for (const Conversation& c : convs) {
      for (bool agp : {true, false}) {
        ordered_json vars = {
            {"messages", c.messages}, {"add_generation_prompt", agp}, {"bos_token", tok.bos}, {"eos_token", tok.eos}};
        if (c.with_tools) vars["tools"] = weather_tools();
        request["jobs"].push_back({{"template", name}, {"vars", vars}});
        jobs.push_back({name, &c, agp});
      }
    }
  }
  const fs::path req = fs::temp_directory_path() / ("orbit-chat-oracle-" + std::to_string(::getpid()) + ".json");
  const fs::path res = req.string() + ".out";
  std::ofstream(req) << request.dump();
  const std::string cmd = "cd " + shell_quote(kNodeDir.string()) + " && node chat_template_oracle.mjs " +
                          shell_quote(req.string()) + " > " + shell_quote(res.string());
  const int rc = std::system(cmd.c_str());
  if (WIFEXITED(rc) && WEXITSTATUS(rc) == 3) {
    std::cout << "SKIPPED: @huggingface/jinja cannot be loaded\n";
    return kSkip;
  }
  ORBIT_CHECK(rc == 0, "the oracle failed: " << cmd);
  const ordered_json results = ordered_json::parse(read_file(res));
  fs::remove(req);
  fs::remove(res);

  std::map<std::string, ChatTemplate> compiled;
  for (const auto& [name, source] : templates) {
    const Tokens tok = tokens_for(name);
    compiled.emplace(name, ChatTemplate(source, name + ".jinja", tok.bos, tok.eos));
  }
  int agree = 0, both_refuse = 0, failures = 0;
  for (std::size_t k = 0; k < jobs.size(); ++k) {
    const Job& job = jobs[k];
    const ChatTemplate& t = compiled.at(job.template_name);
    ChatRenderOptions options;
    options.add_generation_prompt = job.add_generation_prompt;
    if (job.conversation->with_tools) options.tools_json = weather_tools().dump();
    const std::string label =
        job.template_name + " / " + job.conversation->name + (job.add_generation_prompt ? " / generation prompt" : "");
    std::string mine, error;
    try {
      mine = t.render_json(job.conversation->messages.dump(), options);
      std::vector<ChatMessage> typed;
      as_messages(job.conversation->messages, typed);
      const std::string again = t.render(typed, options);
      if (again != mine) {
        std::cout << "MISMATCH (ChatMessage path) " << label << "\n";
        ++failures;
        continue;
      }
    } catch (const orbit::Error& e) {
      error = e.what();
    }
    const ordered_json& ref = results[k];
    if (ref.contains("error")) {
      if (error.empty()) {
        std::cout << "MISMATCH " << label << ": the reference raises (" << ref["error"].get<std::string>()
                  << ") but orbit rendered:\n"
                  << mine << "\n";
        ++failures;
      } else {
        ++both_refuse;
      }
      continue;
    }
    const std::string expected = ref["text"];
    if (!error.empty() || mine != expected) {
      std::cout << "MISMATCH " << label << "\n--- reference\n"
                << expected << "\n--- orbit\n"
                << (error.empty() ? mine : "error: " + error) << "\n";
      ++failures;
      continue;
    }
    ++agree;
  }
  std::cout << templates.size() << " templates x " << convs.size() << " message lists x 2: " << agree
            << " byte-identical renderings, " << both_refuse << " refused by both, " << failures << " mismatches\n";
  return failures == 0 && agree > 0 ? 0 : 1;
}

}  // namespace

int main() {
  try {
    return run();
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}
