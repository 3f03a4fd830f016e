// Text through the SDK: Engine::tokenize / detokenize / add_text, the Window's text overloads and
// Generation::text, stop strings and streamed text (GenerateOptions::stop, on_text; orbit/text_stream.h), the
// error on a model without a tokenizer, and text in traces (parsing, round trip, errors, replay of
// tests/data/traces/story.json).
#include "orbit_catch.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "orbit/engine.h"
#include "orbit/text_stream.h"
#include "orbit/trace.h"
#include "test_helpers.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

using namespace orbit;
using Catch::Contains;

namespace {

const std::string kTok512 = std::string(ORBIT_MODELS_DIR) + "/stories260K/tok512.bin";

std::shared_ptr<Engine> stories_engine(const std::string& model = test::stories_path(),
                                       const std::string& tokenizer = "") {
  EngineOptions o;
  o.model = model;
  o.tokenizer = tokenizer;
  o.pool_bytes = int64_t{16} << 20;
  o.page_size = 8;
  return Engine::open(o);
}

std::string trace_error(const std::string& text) {
  try {
    parse_trace(text, "text.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "(accepted)";
}

}  // namespace

TEST_CASE("engine text: tokenizer found beside the model, tokenize and detokenize", "[text][model][cpu]") {
  auto e = stories_engine();
  REQUIRE(e->has_tokenizer());
  const ModelInfo info = e->model_info();
  CHECK(info.tokenizer == kTok512);
  CHECK(info.bos_token == 1);
  CHECK(info.eos_token == 2);
  // The committed reference ids (tests/data/tokenizer/tok512.json, an independent encoder).
  CHECK(e->tokenize("Once upon a time") == std::vector<int64_t>{1, 403, 407, 261, 378});
  CHECK(e->tokenize("Once upon a time", false) == std::vector<int64_t>{403, 407, 261, 378});
  CHECK(e->detokenize({1, 403, 407, 261, 378}) == "Once upon a time");
  CHECK(e->detokenize({403, 407}) == " Once upon");
  CHECK(e->detokenize({403, 407}, 1) == "Once upon");
  CHECK(e->piece(403) == " Once");
  const std::string odd = "Zo\xc3\xab said \"hi\"  twice: 42!";
  CHECK(e->detokenize(e->tokenize(odd)) == odd);
  CHECK_THROWS_WITH(e->detokenize({9999}), Contains("detokenize: tokens[0] = 9999 is outside the vocabulary [0, 512)"));
}

TEST_CASE("engine text: add_text, text turns, text queries and Generation::text", "[text][model][cpu]") {
  auto e = stories_engine();
  const ChunkRef intro = e->add_text("Once upon a time, there was a little girl named Lily.", {}, true);
  CHECK(intro == e->add_tokens(e->tokenize("Once upon a time, there was a little girl named Lily.", true)));
  CHECK(e->add_text("She liked to play.") == e->add_tokens(e->tokenize("She liked to play.", false)));
  CHECK_THROWS_WITH(e->add_text(""), Contains("add_text: the text is empty"));

  Window w = e->new_window();
  w.admit(intro);
  w.add_turn("She loved to play outside.");
  CHECK(w.instances().back().turn_tokens == e->tokenize("She loved to play outside.", false));
  CHECK_THROWS_WITH(w.add_turn(std::string_view("")), Contains("add_turn: the text is empty"));

  GenerateOptions g;
  g.max_tokens = 12;
  const Generation by_text = w.generate(" One day", g);
  const Generation by_ids = w.generate(e->tokenize(" One day", false), g);
  CHECK(by_text.tokens == by_ids.tokens);
  CHECK(by_text.text == by_ids.text);
  CHECK(by_text.text == e->detokenize(by_text.tokens, e->tokenize(" One day", false).back()));
  CHECK(by_text.text.size() > 10);  // a trained model continues with words

  const Logits a = w.logits("She saw", true);
  const Logits b = w.logits(e->tokenize("She saw", false), true);
  CHECK(a.values == b.values);
  const Plan by_text_plan = w.plan_add_turn("Then");
  const Plan by_ids_plan = w.plan_add_turn(e->tokenize("Then", false));
  CHECK(by_text_plan.window_tokens_after == by_ids_plan.window_tokens_after);
  CHECK(by_text_plan.forward_tokens == by_ids_plan.forward_tokens);

  // From BOS the genuine stories260K greedily tells its story (what llama2.c's run.c prints for it).
  Window empty = e->new_window();
  g.max_tokens = 20;
  CHECK(empty.generate(std::vector<int64_t>{1}, g)
            .text.rfind("Once upon a time, there was a little girl named Lily.", 0) == 0);
}

TEST_CASE("text stream: whole characters, stop strings held back and cut", "[text][cpu]") {
  // Each token is one byte of the text: 'é' is two tokens.
  const std::string text =
      "ab\xc3\xa9"
      "cd<|x|>ef";
  const auto bytes = [](const std::vector<int64_t>& tokens) {
    std::string out;
    for (int64_t t : tokens) out += static_cast<char>(t);
    return out;
  };
  TextStream s(bytes, {"<|x|>", "zz"});
  std::vector<std::string> pieces;
  for (unsigned char c : text) {
    pieces.push_back(s.push(c));
    if (s.stopped()) break;
  }
  // 'é' waits for its second byte; '<' and '<|x' wait as a stop string's start, then the stop string ends it.
  CHECK(pieces == std::vector<std::string>{"a", "b", "", "\xc3\xa9", "c", "d", "", "", "", "", ""});
  CHECK(s.stopped());
  CHECK(s.finish().empty());
  CHECK(s.released() ==
        "ab\xc3\xa9"
        "cd");
  CHECK(complete_utf8_prefix("a\xe2\x82") == 1);
  CHECK(complete_utf8_prefix("a\xe2\x82\xac") == 4);

  // A stop string's start that the text then leaves is released; the end of a run releases what was held.
  TextStream t(bytes, {"zz"});
  CHECK(t.push('z') == "");
  CHECK(t.push('a') == "za");
  CHECK(t.push('z') == "");
  CHECK(t.finish() == "z");
  CHECK_FALSE(t.stopped());
}

TEST_CASE("engine text: stop strings and on_text", "[text][model][cpu]") {
  auto e = stories_engine();
  Window w = e->new_window();
  w.add_turn("Once upon a time, there was a little girl.");
  const std::vector<int64_t> query = e->tokenize(" She", false);
  GenerateOptions o;
  o.max_tokens = 40;
  const Generation plain = w.generate(query, o);
  REQUIRE(plain.text.rfind(" loved to play with her toys", 0) == 0);

  std::string streamed;
  o.on_text = [&](const std::string& piece) {
    CHECK_FALSE(piece.empty());
    streamed += piece;
    return true;
  };
  const Generation same = w.generate(query, o);
  CHECK(same.tokens == plain.tokens);
  CHECK(streamed == plain.text);

  // "ove" spans the tokens " lo" and "ved": the text ends before it, the tokens at the one completing it.
  streamed.clear();
  o.stop = {"zebra", "ove"};
  const Generation cut = w.generate(query, o);
  CHECK(cut.stop_reason == "stop_string");
  CHECK(cut.text == " l");
  CHECK(streamed == " l");
  CHECK(cut.tokens == std::vector<int64_t>(plain.tokens.begin(), plain.tokens.begin() + 2));

  // "ved" is a stop token too: the stop string's cut applies, so that is the reason given.
  streamed.clear();
  o.stop_tokens = {plain.tokens[1]};
  const Generation both = w.generate(query, o);
  CHECK(both.stop_reason == "stop_string");
  CHECK(both.text == " l");
  CHECK(streamed == " l");
  CHECK(both.tokens == cut.tokens);
  o.stop_tokens.clear();

  // on_text returning false cancels; the text holds every token's.
  int calls = 0;
  o.stop.clear();
  o.on_text = [&](const std::string&) { return ++calls < 3; };
  const Generation cancelled = w.generate(query, o);
  CHECK(cancelled.stop_reason == "cancelled");
  CHECK(calls == 3);
  CHECK(cancelled.text == e->detokenize(cancelled.tokens, query.back()));

  o.on_text = nullptr;
  o.stop = {""};
  CHECK_THROWS_WITH(w.generate(query, o), Contains("generate: stop[0] is empty"));
}

TEST_CASE("engine text: a model without a tokenizer says so; an explicit tokenizer is checked", "[text][model][cpu]") {
  test::TempDir dir;
  std::filesystem::copy_file(test::stories_path(), dir / "alone.bin");
  auto alone = stories_engine(dir / "alone.bin");
  CHECK_FALSE(alone->has_tokenizer());
  CHECK(alone->model_info().tokenizer.empty());
  CHECK(alone->model_info().bos_token == -1);
  CHECK_THROWS_WITH(alone->tokenize("hi"), Contains("text needs a tokenizer and the model") &&
                                               Contains("alone.bin has none") && Contains("give token ids"));
  Window w = alone->new_window();
  w.add_turn(std::vector<int64_t>{1, 403});
  const Generation g = w.generate(std::vector<int64_t>{407}, GenerateOptions{});
  CHECK(g.text.empty());  // ids still work; no text without a tokenizer
  CHECK_THROWS_WITH(w.add_turn("hi"), Contains("has none"));
  GenerateOptions stop;
  stop.stop = {"."};
  CHECK_THROWS_WITH(w.generate(std::vector<int64_t>{407}, stop), Contains("stop strings need the engine's tokenizer"));

  auto named = stories_engine(dir / "alone.bin", kTok512);
  CHECK(named->tokenize("Once") == std::vector<int64_t>{1, 403});
  std::ofstream(dir / "tiny.bin", std::ios::binary).write("\x07\x00\x00\x00", 4);
  CHECK_THROWS_WITH(stories_engine(dir / "alone.bin", dir / "tiny.bin"), Contains("tiny.bin"));
  // A tokenizer that is not there is refused naming the option and the path, before the model loads.
  CHECK_THROWS_WITH(stories_engine(dir / "alone.bin", dir / "none.bin"),
                    Contains("EngineOptions::tokenizer = '" + dir / "none.bin" + "': no such file"));
  CHECK_THROWS_WITH(
      stories_engine(dir / "alone.bin", dir.path().string()),
      Contains("EngineOptions::tokenizer = '" + dir.path().string() + "': a directory with no tokenizer.json"));
}

TEST_CASE("traces: text chunks, turns, queries and probe parse, round-trip and are checked", "[text][trace][cpu]") {
  const std::string text = R"({"format": "orbit-trace/1", "probe": {"text": "What next?"},
    "chunks": [{"name": "a", "text": "Once upon a time", "bos": true}, {"name": "b", "tokens": [5, 6]}],
    "steps": [{"op": "admit", "chunk": "a"}, {"op": "turn", "text": "Lily smiled."},
              {"op": "generate", "max_tokens": 3, "query": {"text": "She"}},
              {"op": "disposable", "chunk": "a", "query": {"text": "Why?"}}]})";
  const Trace t = parse_trace(text, "text.json");
  REQUIRE(t.chunks[0].tokens.kind == TokenSource::Kind::kText);
  CHECK(t.chunks[0].tokens.text == "Once upon a time");
  CHECK(t.chunks[0].tokens.bos);
  CHECK(t.steps[1].tokens.kind == TokenSource::Kind::kText);
  CHECK_FALSE(t.steps[1].tokens.bos);
  CHECK(t.steps[2].tokens.text == "She");
  CHECK(t.probe.text == "What next?");
  CHECK(trace_to_json(parse_trace(trace_to_json(t), "again.json")) == trace_to_json(t));

  const std::string head = R"({"format": "orbit-trace/1", "chunks": [{"name": "a", "tokens": [5]}], "steps": [)";
  CHECK_THAT(trace_error(head + R"({"op": "turn", "text": 5}]})"),
             Contains("text.json: step 0 (turn): field 'text': must be a string"));
  CHECK_THAT(trace_error(head + R"({"op": "turn", "text": ""}]})"),
             Contains("step 0 (turn): field 'text': must not be empty"));
  CHECK_THAT(trace_error(head + R"({"op": "turn", "tokens": [3], "bos": true}]})"),
             Contains("step 0 (turn): field 'bos': only meaningful with 'text'"));
  CHECK_THAT(
      trace_error(head + R"({"op": "turn", "tokens": [3], "text": "x"}]})"),
      Contains("step 0 (turn): field 'tokens': give only one of 'tokens', 'random_tokens', 'sample' and 'text'"));
  CHECK_THAT(trace_error(head + R"({"op": "turn", "text": "x", "seed": 3}]})"),
             Contains("field 'seed': only meaningful with"));
  CHECK_THAT(trace_error(head + R"({"op": "generate", "query": {"text": "x", "bos": 1}}]})"),
             Contains("step 0 (generate): field 'query.bos': must be true or false"));
  CHECK_THAT(
      trace_error(
          R"({"format": "orbit-trace/1", "chunks": [{"name": "m", "text": "x", "embeddings": {"grid": [1, 1, 1]}}], "steps": []})"),
      Contains("chunk 0 ('m'): field 'text': a chunk holds either 'embeddings' or tokens"));
}

TEST_CASE("traces: the shipped story trace replays; text is the tokenizer's ids", "[text][trace][replay][model][cpu]") {
  const Trace t = load_trace(std::string(ORBIT_TEST_DATA_DIR) + "/traces/story.json");
  ReplayOptions o;
  o.engine.model = test::stories_path();
  o.engine.page_size = 8;
  o.engine.pool_bytes = int64_t{32} << 20;
  o.policies = {"patch:16"};
  const ReplayReport r = replay(t, o);
  auto e = stories_engine();
  const PolicyReplay* re = r.find("reprefill");
  REQUIRE(re != nullptr);
  // After admitting the title (with BOS) the window holds exactly its tokens.
  CHECK(re->steps[0].window_tokens == static_cast<int64_t>(e->tokenize(t.chunks[0].tokens.text, true).size()));
  CHECK(re->steps[1].window_tokens ==
        re->steps[0].window_tokens +
            static_cast<int64_t>(e->tokenize("Reader: I will read the story one page at a time.", false).size()));
  for (const StepResult& s : re->steps) {
    CHECK(s.status == "ok");
    if (s.fidelity) CHECK(s.fidelity->kl < 1e-9);
  }
  const PolicyReplay* patch = r.find("patch:16");
  REQUIRE(patch != nullptr);
  CHECK(patch->totals.refused == 0);
  CHECK(patch->totals.mean_kl < r.find("blind")->totals.mean_kl);

  // The same trace on a model without a tokenizer fails naming the chunk and field.
  test::TempDir dir;
  std::filesystem::copy_file(test::stories_path(), dir / "alone.bin");
  o.engine.model = dir / "alone.bin";
  CHECK_THROWS_WITH(replay(t, o),
                    Contains("story.json: chunk 0 ('title'): field 'text': the trace gives text but the model") &&
                        Contains("has no tokenizer"));
}

}  // namespace ORBIT_TEST_FILE
