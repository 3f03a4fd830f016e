// Constrained decoding end to end (GenerateOptions::constraint): the bundled story models write valid JSON
// under a schema, json_object and tool-call constraints, though unconstrained they write stories; the run
// ends when the text is complete, fits max_tokens, and says so when the vocabulary cannot write what the
// constraint needs (TinyStories-656K has no '{').
#include "orbit_catch.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <vector>

#include "constrain/tokenizer_vocabulary.h"
#include "orbit/constraint.h"
#include "orbit/engine.h"
#include "orbit/runtime/tokenizer.h"
#include "orbit/tool_calls.h"
#include "repeated_key.h"
#include "test_helpers.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

using namespace orbit;
using Catch::Contains;
using Json = nlohmann::ordered_json;

namespace {

std::shared_ptr<Engine> open(const std::string& model) {
  EngineOptions o;
  o.model = model;
  o.pool_bytes = int64_t{16} << 20;
  o.page_size = 8;
  return Engine::open(o);
}

std::shared_ptr<Engine> stories260k() { return open(test::stories_path()); }
std::shared_ptr<Engine> tinystories() { return open(std::string(ORBIT_MODELS_DIR) + "/tinystories-656k"); }

const char* kPerson = R"({"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 16},
    "age": {"type": "integer"},
    "pets": {"type": "array", "items": {"enum": ["cat", "dog", "bird"]}, "maxItems": 3},
    "happy": {"type": "boolean"}},
  "required": ["name", "age", "happy"]})";

// The parsed text, checked against kPerson.
Json check_person(const Generation& g) {
  INFO("text: " << g.text << " (" << g.stop_reason << ")");
  Json v;
  REQUIRE_NOTHROW(v = Json::parse(g.text));
  REQUIRE(v.is_object());
  CHECK(v["name"].is_string());
  CHECK(v["name"].get<std::string>().size() <= 16 * 4);
  CHECK(v["age"].is_number_integer());
  CHECK(v["happy"].is_boolean());
  if (v.contains("pets")) CHECK(v["pets"].size() <= 3);
  for (const auto& [key, value] : v.items()) {
    CHECK((key == "name" || key == "age" || key == "pets" || key == "happy"));
  }
  return v;
}

}  // namespace

TEST_CASE("constrained generate: a map's keys are never repeated", "[constraint][model][cpu]") {
  auto e = stories260k();
  Window w = e->new_window();
  w.add_turn("Once upon a time, there was a little girl named Lily.");
  GenerateOptions o;
  o.max_tokens = 160;
  o.constraint = Constraint::json_schema(R"({"type": "object", "additionalProperties": {"type": "integer"},
                                            "minProperties": 6, "maxProperties": 6})");
  for (uint64_t seed = 0; seed <= 4; ++seed) {  // greedy, then sampled
    o.temperature = seed == 0 ? 0.0 : 0.8;
    o.seed = seed;
    const Generation g = w.generate(" She", o);
    INFO("text: " << g.text << " (" << g.stop_reason << ")");
    REQUIRE(g.stop_reason == "constraint_complete");
    CHECK(orbit::test::repeated_key(g.text) == "");
  }
}

TEST_CASE("constrained generate: a story model writes an object valid under the schema", "[constraint][model][cpu]") {
  auto e = stories260k();
  Window w = e->new_window();
  w.add_turn("Once upon a time, there was a little girl named Lily.");
  GenerateOptions o;
  o.max_tokens = 80;
  const Generation story = w.generate(" She", o);
  CHECK_THROWS(Json::parse(story.text));  // unconstrained: a story
  o.constraint = Constraint::json_schema(kPerson);
  const Generation g = w.generate(" She", o);
  CHECK(g.stop_reason == "constraint_complete");
  check_person(g);
  CHECK(g.tokens.size() <= 80);
  // Sampled, several seeds: still valid.
  o.temperature = 0.9;
  o.top_p = 0.95;
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    o.seed = seed;
    const Generation s = w.generate(" She", o);
    CHECK((s.stop_reason == "constraint_complete" || s.stop_reason == "stop_token"));
    check_person(s);
  }
}

TEST_CASE("constrained generate: the budget makes the text complete within max_tokens", "[constraint][model][cpu]") {
  auto e = stories260k();
  Window w = e->new_window();
  w.add_turn("Once upon a time");
  const auto c = Constraint::json_schema(kPerson);
  GenerateOptions o;
  o.constraint = c;
  o.temperature = 1.0;
  // The shortest valid text is {"name":"","age":0,"happy":true}: 32 bytes. Budgets from it up.
  REQUIRE(c->min_bytes() == 32);
  for (int64_t budget : {32, 36, 45}) {
    o.max_tokens = budget;
    o.seed = static_cast<uint64_t>(budget);
    const Generation g = w.generate(" He", o);
    CHECK(g.tokens.size() <= static_cast<std::size_t>(budget));
    check_person(g);
  }
  // Below the shortest text the budget cannot hold: the run is cut, stop_reason says so.
  o.max_tokens = 10;
  const Generation cut = w.generate(" He", o);
  CHECK(cut.stop_reason == "max_tokens");
  CHECK(c->is_prefix(cut.text));
}

TEST_CASE("constrained generate: pattern, format and number bounds hold in what a story model writes",
          "[constraint][model][cpu]") {
  auto e = stories260k();
  Window w = e->new_window();
  w.add_turn("Once upon a time, there was a little girl named Lily.");
  GenerateOptions o;
  o.max_tokens = 120;
  o.constraint = Constraint::json_schema(R"({"type": "object", "properties": {
      "day": {"type": "string", "format": "date"},
      "guests": {"type": "integer", "minimum": 2, "exclusiveMaximum": 10},
      "price": {"type": "number", "minimum": 0.5, "maximum": 20, "multipleOf": 0.25},
      "code": {"type": "string", "pattern": "^[A-Z]{2}-\\d{3}$"}},
    "required": ["day", "guests", "price", "code"]})");
  o.temperature = 1.0;
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    o.seed = seed;
    const Generation g = w.generate(" She", o);
    INFO("seed " << seed << ": " << g.text << " (" << g.stop_reason << ")");
    Json v;
    REQUIRE_NOTHROW(v = Json::parse(g.text));
    const std::string day = v.at("day").get<std::string>();
    CHECK(std::regex_match(day, std::regex(R"(\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01]))")));
    CHECK(v.at("guests").is_number_integer());
    CHECK((v.at("guests").get<int64_t>() >= 2 && v.at("guests").get<int64_t>() < 10));
    const double price = v.at("price").get<double>();
    CHECK((price >= 0.5 && price <= 20));
    CHECK(price * 4 == static_cast<double>(static_cast<int64_t>(price * 4)));
    CHECK(std::regex_match(v.at("code").get<std::string>(), std::regex(R"([A-Z]{2}-\d{3})")));
  }
}

TEST_CASE("constrained generate: from a trigger on, a call after the story's own words", "[constraint][model][cpu]") {
  // The story model writes "Lily" on its own after this turn; calls here begin with it, so the text is free
  // up to "Lily" and a valid call from there (the trigger's mechanism, as tool_choice "auto" uses it).
  auto e = stories260k();
  Window w = e->new_window();
  w.add_turn("Once upon a time, there was a little girl named Lily. She had a red ball.");
  GenerateOptions o;
  o.max_tokens = 120;
  const Generation free = w.generate(" One day,", o);
  INFO("free: " << free.text);
  REQUIRE(free.text.find("Lily") != std::string::npos);
  ToolCallOptions calls;
  calls.begin = "Lily";
  o.constraint = Constraint::tool_calls(
      R"([{"type": "function", "function": {"name": "play", "parameters": {"type": "object",
          "properties": {"toy": {"type": "string", "maxLength": 12}}, "required": ["toy"]}}}])",
      calls);
  o.constraint_trigger = "Lily";
  for (uint64_t seed = 0; seed <= 3; ++seed) {
    o.seed = seed;
    o.temperature = seed == 0 ? 0.0 : 0.8;
    const Generation g = w.generate(" One day,", o);
    INFO("seed " << seed << ": " << g.text << " (" << g.stop_reason << ")");
    const std::size_t at = g.text.find("Lily");
    REQUIRE(at != std::string::npos);
    CHECK(g.stop_reason == "constraint_complete");
    CHECK(o.constraint->matches(g.text.substr(at)));
    if (seed == 0) CHECK(g.text.substr(0, at) == free.text.substr(0, at));  // greedy: the same words before it
  }
}

TEST_CASE("constrained generate: json_object, and the first token after BOS", "[constraint][model][cpu]") {
  auto e = stories260k();
  Window w = e->new_window();
  GenerateOptions o;
  o.max_tokens = 48;
  o.constraint = Constraint::json_object();
  // Right after BOS the tokenizer drops a piece's leading space: " {" would write "{" there.
  const Generation g = w.generate(std::vector<int64_t>{1}, o);
  INFO(g.text << " (" << g.stop_reason << ")");
  CHECK(g.text == e->detokenize(g.tokens, 1));
  CHECK(ConstraintMatcher(o.constraint).can_advance(g.text));
  if (g.stop_reason != "max_tokens") CHECK(Json::parse(g.text).is_object());
}

TEST_CASE("constrained generate: tool calls the Hermes parser reads back", "[constraint][model][cpu]") {
  auto e = stories260k();
  Window w = e->new_window();
  w.add_turn("Lily wanted to know the weather.");
  const std::string tools = R"([
    {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
      "properties": {"city": {"type": "string", "maxLength": 12}, "days": {"type": "integer"}},
      "required": ["city"]}}},
    {"type": "function", "function": {"name": "tell_story", "parameters": {"type": "object",
      "properties": {"topic": {"enum": ["cats", "dogs"]}}, "required": ["topic"]}}}])";
  GenerateOptions o;
  o.max_tokens = 120;
  o.constraint = Constraint::tool_calls(tools);
  const Generation g = w.generate(" She", o);
  INFO(g.text);
  CHECK(g.stop_reason == "constraint_complete");
  const ToolCallParse calls = parse_tool_calls(g.text, ToolCallFormat::kHermes);
  REQUIRE(calls.calls.size() == 1);
  CHECK_FALSE(calls.malformed);
  const Json args = Json::parse(calls.calls[0].arguments);
  if (calls.calls[0].name == "get_weather") {
    CHECK(args["city"].is_string());
  } else {
    REQUIRE(calls.calls[0].name == "tell_story");
    CHECK((args["topic"] == "cats" || args["topic"] == "dogs"));
  }
  // tool_choice naming one tool.
  ToolCallOptions only;
  only.only = "tell_story";
  o.constraint = Constraint::tool_calls(tools, only);
  const ToolCallParse forced = parse_tool_calls(w.generate(" She", o).text, ToolCallFormat::kHermes);
  REQUIRE(forced.calls.size() == 1);
  CHECK(forced.calls[0].name == "tell_story");
}

TEST_CASE("constrained generate: a Hugging Face vocabulary, and one that cannot write '{'",
          "[constraint][model][cpu]") {
  auto e = tinystories();
  Window w = e->new_window();
  w.add_turn("Once upon a time");
  GenerateOptions o;
  o.max_tokens = 24;
  o.constraint = Constraint::json_schema(R"({"enum": ["happy", "sad", "sleepy"]})");
  const Generation mood = w.generate(" she was", o);
  CHECK(mood.stop_reason == "constraint_complete");
  CHECK((mood.text == "\"happy\"" || mood.text == "\"sad\"" || mood.text == "\"sleepy\""));
  o.constraint = Constraint::json_schema(R"({"type": "array", "items": {"type": "integer"}})");
  const Generation none = w.generate(" she was", o);
  CHECK(none.stop_reason == "constraint_no_token");  // the vocabulary has no '['
  CHECK(none.tokens.empty());
  o.constraint = Constraint::json_schema(R"({"type": "string", "maxLength": 40})");
  o.max_tokens = 60;
  const Generation words = w.generate(" she was", o);
  INFO(words.text);
  CHECK(words.stop_reason == "constraint_complete");
  CHECK(Json::parse(words.text).is_string());
  // Streaming sees every token; a constraint on an engine's vocabulary is read once and reused.
  int64_t streamed = 0;
  o.on_token = [&](int64_t, int64_t) { return ++streamed > 0; };
  const Generation again = w.generate(" she was", o);
  CHECK(streamed == static_cast<int64_t>(again.tokens.size()));
  CHECK(token_vocabulary(*e)->size() == e->model_info().vocab_size);
  CHECK(token_vocabulary(*e) == token_vocabulary(*e));
}

TEST_CASE("constrained generate: refused without a tokenizer, before anything runs", "[constraint][model][cpu]") {
  test::TempDir dir;
  std::filesystem::copy_file(test::stories_path(), dir / "alone.bin");
  auto e = open(dir / "alone.bin");
  REQUIRE_FALSE(e->has_tokenizer());
  Window w = e->new_window();
  GenerateOptions o;
  o.constraint = Constraint::json_object();
  CHECK_THROWS_WITH(w.generate(std::vector<int64_t>{1}, o), Contains("a constraint needs the engine's tokenizer"));
  CHECK(w.stats().radix_cache_tokens == 0);  // refused before the model call is counted
}

namespace {

std::vector<std::string> corpus() {
  std::ifstream in(std::string(ORBIT_TEST_DATA_DIR) + "/tokenizers/corpus.json");
  return Json::parse(in)["texts"].get<std::vector<std::string>>();
}

}  // namespace

TEST_CASE("token bytes: a text's tokens write exactly the text, for each kind of tokenizer", "[constraint][cpu]") {
  // GPT-2 and MiniMind: byte-level BPE (pieces in GPT-2's alphabet, characters split across tokens);
  // TinyStories-656K: SentencePiece-style with a Strip decoder (the first token's space dropped after BOS).
  for (const char* name : {"gpt2", "minimind", "tinystories-656k"}) {
    const auto tokenizer =
        runtime::load_tokenizer(std::string(ORBIT_TEST_DATA_DIR) + "/tokenizers/" + name + "/tokenizer.json");
    const auto vocab = constrain::tokenizer_vocabulary(*tokenizer, tokenizer->vocab_size());
    CHECK(constrain::tokenizer_vocabulary(*tokenizer, tokenizer->vocab_size()) == vocab);  // read once
    const int64_t anchor = tokenizer->encode("a", false).back();                           // an ordinary token
    int64_t texts = 0;
    for (const std::string& text : corpus()) {
      std::vector<int64_t> ids;
      try {
        ids = tokenizer->encode(text, false);
      } catch (const Error&) {
        continue;  // a character the vocabulary cannot write (no byte fallback)
      }
      if (tokenizer->decode(ids) != text) continue;  // <unk> or a normalizer changed it
      std::string mid, start;
      for (std::size_t i = 0; i < ids.size(); ++i) {
        const auto& bytes = vocab->bytes(ids[i]);
        REQUIRE(bytes.has_value());
        mid += *bytes;
        std::optional<std::string> first = bytes;
        for (const auto& [id, b] : vocab->at_start()) {
          if (i == 0 && id == ids[0]) first = b;
        }
        start += first.value_or("");
      }
      INFO(name << ": " << text);
      // After an ordinary token the text is the tokens' bytes; at the start of a text, with at_start's.
      CHECK(mid == tokenizer->decode(ids, anchor));
      CHECK(start == tokenizer->decode(ids, tokenizer->bos_id()));
      ++texts;
    }
    CHECK(texts > 5);
  }
}

}  // namespace ORBIT_TEST_FILE
