// Window::sync with chunk parts (orbit/sync.h): a message's content parts that name chunks (token chunks and
// embedding chunks) are placed where they sit in the rendering, as instances of their chunks; bad parts are
// refused naming the message and the part; and the property test over random edits of a list with parts.
#include <algorithm>
#include <iostream>
#include <map>
#include <random>
#include <sstream>

#include "orbit/engine.h"
#include "orbit_catch.h"
#include "sync_test_support.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

using namespace orbit;
using namespace orbit::test::sync_support;
using Catch::Contains;

namespace {

// The rendering with chunk parts, built here apart from sync: each chunk part rendered as a sentinel text,
// the rendered text split at the sentinels, each text segment tokenized alone, each part's tokens (or,
// for an embedding chunk, one -1 per row) in its place. `parts` receives each part's [begin, end) and key.
struct PartSpan {
  int64_t begin = 0;
  int64_t end = 0;
  std::string key;
};

// The tokens of the token chunks the tests register (text_chunk), by key.
std::map<std::string, std::vector<int64_t>>& token_chunks() {
  static std::map<std::string, std::vector<int64_t>> tokens;
  return tokens;
}

ChunkRef text_chunk(Engine& engine, const std::string& text) {
  const std::vector<int64_t> tokens = engine.tokenize(text, false);
  const ChunkRef c = engine.add_tokens(tokens);
  token_chunks()[c.key] = tokens;
  return c;
}

std::vector<int64_t> rendering_with_parts(Engine& engine, const std::vector<ChatMessage>& messages,
                                          const SyncOptions& o, std::vector<PartSpan>& parts) {
  std::vector<ChatMessage> text = messages;
  std::vector<ChunkRef> chunks;
  for (ChatMessage& m : text) {
    for (const ContentPart& p : m.parts) {
      if (p.chunk) {
        m.content += "[[PART " + std::to_string(chunks.size()) + "]]";
        chunks.push_back(*p.chunk);
      } else {
        m.content += p.text;
      }
    }
    m.parts.clear();
  }
  const std::string rendered = engine.render_chat(text, false, o.chat);
  std::vector<int64_t> tokens;
  std::size_t from = 0;
  parts.clear();
  for (std::size_t at = rendered.find("[[PART "); at != std::string::npos; at = rendered.find("[[PART ", from)) {
    const std::vector<int64_t> seg = engine.tokenize(rendered.substr(from, at - from), false);
    tokens.insert(tokens.end(), seg.begin(), seg.end());
    const std::size_t close = rendered.find("]]", at);
    const ChunkRef& c = chunks[std::stoul(rendered.substr(at + 7, close - at - 7))];
    PartSpan span{static_cast<int64_t>(tokens.size()), 0, c.key};
    if (c.kind == ChunkKind::kTokens) {
      const std::vector<int64_t>& own = token_chunks().at(c.key);
      tokens.insert(tokens.end(), own.begin(), own.end());
    } else {
      tokens.insert(tokens.end(), static_cast<std::size_t>(c.length), -1);
    }
    span.end = static_cast<int64_t>(tokens.size());
    parts.push_back(span);
    from = close + 2;
  }
  const std::vector<int64_t> seg = engine.tokenize(rendered.substr(from), false);
  tokens.insert(tokens.end(), seg.begin(), seg.end());
  return tokens;
}

// (a) with chunk parts: every part is an instance of its chunk where it sits; the text between is the
// window's other instances, slice by slice.
void require_window_holds(Engine& engine, const Window& w, const std::vector<ChatMessage>& messages,
                          const SyncOptions& o, const SyncPlan& plan) {
  std::vector<PartSpan> parts;
  const std::vector<int64_t> expected = rendering_with_parts(engine, messages, o, parts);
  REQUIRE(plan.tokens == expected);
  int64_t pos = 0;
  std::size_t next_part = 0;
  for (const InstanceInfo& i : w.instances()) {
    REQUIRE(i.position == pos);
    if (next_part < parts.size() && parts[next_part].begin == pos) {
      REQUIRE(i.chunk.key == parts[next_part].key);  // a turn's key is that of a token chunk of its tokens
      REQUIRE(i.length == parts[next_part].end - pos);
      if (i.is_turn) REQUIRE(i.turn_tokens == token_chunks().at(i.chunk.key));  // a token chunk placed twice
      ++next_part;
    } else {
      const std::vector<int64_t> slice(expected.begin() + pos, expected.begin() + pos + i.length);
      REQUIRE(std::count(slice.begin(), slice.end(), int64_t{-1}) == 0);
      if (i.is_turn) {
        REQUIRE(i.turn_tokens == slice);
      } else {
        REQUIRE(i.chunk.key == engine.add_tokens(slice).key);
      }
    }
    pos += i.length;
  }
  REQUIRE(next_part == parts.size());
  REQUIRE(pos == static_cast<int64_t>(expected.size()));
}

ChunkRef screenshot(Engine& engine, int page, int64_t rows = 6) {
  std::mt19937_64 rng(1000 + static_cast<uint64_t>(page));
  std::normal_distribution<float> d(0.0f, 0.5f);
  std::vector<float> values(static_cast<std::size_t>(rows * engine.model_info().hidden_size));
  for (float& x : values) x = d(rng);
  EmbeddingChunk e;
  e.embeddings = view_of(values, {rows, engine.model_info().hidden_size});
  ChunkOptions co;
  co.label = "page " + std::to_string(page);
  return engine.add_embeddings(e, co);
}

// The same message: the same role and content (parts compared by text and chunk key).
bool same(const ChatMessage& a, const ChatMessage& b) {
  if (a.role != b.role || a.content != b.content || a.parts.size() != b.parts.size()) return false;
  for (std::size_t i = 0; i < a.parts.size(); ++i) {
    if (a.parts[i].text != b.parts[i].text || a.parts[i].chunk.has_value() != b.parts[i].chunk.has_value())
      return false;
    if (a.parts[i].chunk && *a.parts[i].chunk != *b.parts[i].chunk) return false;
  }
  return true;
}

ChatMessage with_parts(const std::string& role, std::vector<ContentPart> parts) {
  ChatMessage m;
  m.role = role;
  m.parts = std::move(parts);
  return m;
}

}  // namespace

TEST_CASE("sync places chunk parts where they sit, as instances of their chunks", "[sync]") {
  std::shared_ptr<Engine> engine = open_engine();
  const SyncOptions o = options();
  const ChunkRef shot = screenshot(*engine, 0);
  const ChunkRef doc = text_chunk(*engine, "the dog ran to the park and saw a big red ball");
  std::vector<ChatMessage> messages = {msg("system", "You tell short stories."),
                                       with_parts("tool", {ContentPart::of_text("Look: "), ContentPart::of_chunk(shot),
                                                           ContentPart::of_text(" and "), ContentPart::of_chunk(doc)}),
                                       msg("user", "What did you see?")};
  Window w = engine->new_window();
  SyncReport r = w.sync(messages, o);
  require_window_holds(*engine, w, messages, o, r.plan);
  // The tool message spans four units: its header and text, the screenshot, " and ", the document.
  std::vector<const SyncUnit*> parts;
  for (const SyncUnit& u : r.plan.units) {
    if (u.chunk.valid()) parts.push_back(&u);
    if (u.first_message == 1) CHECK(u.end_message == 2);
  }
  REQUIRE(parts.size() == 2);
  CHECK(parts[0]->chunk == shot);
  CHECK(parts[0]->part == 1);
  CHECK(parts[0]->key == shot.key);
  CHECK(parts[0]->tokens == std::vector<int64_t>(6, kEmbeddingRow));
  CHECK(parts[0]->action == SyncAction::kAdmit);
  CHECK(parts[1]->chunk == doc);
  CHECK(parts[1]->part == 3);
  CHECK(parts[1]->tokens == token_chunks().at(doc.key));
  CHECK_FALSE(parts[1]->is_turn);  // a chunk part is a chunk, however short
  CHECK(r.plan.generation_prompt_exact);
  CHECK_FALSE(w.plan_sync(messages, o).changes());

  // The tool message leaves (its units are evicted) and comes back: its chunks are recalled.
  const InstanceId shot_instance = parts[0]->instance;
  const std::vector<ChatMessage> without = {messages[0], messages[2]};
  r = w.sync(without, o);
  require_window_holds(*engine, w, without, o, r.plan);
  CHECK(std::count(r.plan.evict.begin(), r.plan.evict.end(), shot_instance) == 1);
  r = w.sync(messages, o);
  require_window_holds(*engine, w, messages, o, r.plan);
  for (const SyncUnit& u : r.plan.units) {
    if (u.chunk == shot) CHECK(u.action == SyncAction::kRecall);
  }
  // A token chunk placed twice is a turn the second time, as a repeated message is.
  messages.push_back(with_parts("tool", {ContentPart::of_chunk(doc)}));
  r = w.sync(messages, o);
  require_window_holds(*engine, w, messages, o, r.plan);
  CHECK(r.plan.units.back().chunk == doc);
  CHECK(r.plan.units.back().action == SyncAction::kTurn);
}

TEST_CASE("sync refuses bad chunk parts, naming the message and the part", "[sync]") {
  std::shared_ptr<Engine> engine = open_engine();
  const SyncOptions o = options();
  const ChunkRef shot = screenshot(*engine, 0);
  Window w = engine->new_window();
  const uint64_t version = w.version();
  const auto list = [&](std::vector<ContentPart> parts) {
    return std::vector<ChatMessage>{msg("system", "You tell short stories."), with_parts("user", std::move(parts))};
  };
  // An embedding chunk placed twice (a window holds a chunk once; rows cannot be a turn).
  CHECK_THROWS_WITH(w.sync(list({ContentPart::of_chunk(shot), ContentPart::of_chunk(shot)}), o),
                    Contains("messages[1].content[1].chunk") && Contains("placed twice"));
  // A chunk of another engine (here: content this engine never registered).
  EngineOptions other_options;
  other_options.model = std::string(ORBIT_MODELS_DIR) + "/stories260K/stories260K.bin";
  other_options.pool_bytes = int64_t{16} << 20;
  std::shared_ptr<Engine> other = Engine::open(other_options);
  const ChunkRef foreign = other->add_tokens({1, 365, 169, 44});
  CHECK_THROWS_WITH(w.sync(list({ContentPart::of_text("see "), ContentPart::of_chunk(foreign)}), o),
                    Contains("messages[1].content[1].chunk") && Contains("not registered with this engine"));
  CHECK_THROWS_WITH(w.sync(list({ContentPart::of_chunk(ChunkRef{})}), o),
                    Contains("messages[1].content[0].chunk") && Contains("invalid"));
  // Content given twice, text holding the marker character, a template that drops the content.
  ChatMessage both = with_parts("user", {ContentPart::of_chunk(shot)});
  both.content = "also text";
  CHECK_THROWS_WITH(w.sync({both}, o), Contains("sync: messages[0]: content and parts are both set"));
  CHECK_THROWS_WITH(w.sync(list({ContentPart::of_text("odd \xEE\x80\x80 text"), ContentPart::of_chunk(shot)}), o),
                    Contains("sync: messages[1].content[0].text holds U+E000"));
  // Text alone may hold it (a page's private-use glyph): no marker was written, and the window holds what
  // tokenize_chat gives.
  const std::vector<ChatMessage> glyph = list({ContentPart::of_text("icon \xEE\x80\x80 here")});
  Window text_only = engine->new_window();
  const SyncReport synced = text_only.sync(glyph, o);
  CHECK(synced.plan.tokens == engine->tokenize_chat(glyph, false, o.chat));
  CHECK(text_only.tokens() == static_cast<int64_t>(synced.plan.tokens.size()));
  SyncOptions roles_only = o;
  roles_only.chat.chat_template = "{% for message in messages %}{{ message.role }}\n{% endfor %}";
  CHECK_THROWS_WITH(w.sync(list({ContentPart::of_chunk(shot)}), roles_only),
                    Contains("messages[1].content[0] (a chunk part) 0 times"));
  // render_chat has no text for a chunk part.
  CHECK_THROWS_WITH(engine->render_chat(list({ContentPart::of_chunk(shot)})),
                    Contains("render_chat: messages[1].content[0] is a chunk part"));
  CHECK(w.version() == version);  // nothing was applied
}

// Random edits of a list whose tool messages carry chunk parts (screenshots, token chunks): (a) at every step.
// The cost against a cache of the last read is printed, not asserted: a message with chunk parts is several
// units (its text around each part, each part), and units inserted before kept instances are separate
// admits, each re-planning what follows (sync.h, Limits), so a message returning mid-list can cost more.
TEST_CASE("sync property with chunk parts: the window is the rendering, parts in place", "[sync][property]") {
  for (uint64_t seed : {1, 2, 3}) {
    DYNAMIC_SECTION("seed " << seed) {
      std::shared_ptr<Engine> engine = open_engine();
      const SyncOptions o = options();
      Window w = engine->new_window();
      std::mt19937_64 rng(seed);
      LastRead last;
      double orbit_total = 0;
      int64_t last_total = 0;
      int next = 0;
      const auto new_message = [&]() {
        const int kind = static_cast<int>(rng() % 3);
        const std::string head = "#" + std::to_string(next++) + " ";
        if (kind == 0)
          return msg(rng() % 2 ? "user" : "assistant", head + sentence(rng, 3 + static_cast<int>(rng() % 6)));
        const ChunkRef c = kind == 1 ? screenshot(*engine, next, 4 + static_cast<int64_t>(rng() % 6))
                                     : text_chunk(*engine, sentence(rng, 8 + static_cast<int>(rng() % 12)));
        return with_parts("tool", {ContentPart::of_text(head), ContentPart::of_chunk(c),
                                   ContentPart::of_text(rng() % 2 ? " done." : "")});
      };
      std::vector<ChatMessage> messages = {msg("system", "You tell short stories.")};
      std::vector<ChatMessage> removed;
      std::vector<std::vector<ChatMessage>> history;
      for (int step = 0; step < 30; ++step) {
        const std::size_t n = messages.size();
        const int edit = step < 3 || n < 3 ? 0 : static_cast<int>(rng() % 6);
        if (edit == 0) {
          messages.push_back(new_message());
        } else if (edit == 1 || edit == 2) {  // trim the oldest, remove one from the middle
          const std::size_t i = edit == 1 ? 1 : 1 + rng() % (n - 1);
          removed.push_back(messages[i]);
          messages.erase(messages.begin() + static_cast<std::ptrdiff_t>(i));
        } else if (edit == 3) {  // move one
          const std::size_t from = 1 + rng() % (n - 1);
          const ChatMessage m = messages[from];
          messages.erase(messages.begin() + static_cast<std::ptrdiff_t>(from));
          messages.insert(messages.begin() + static_cast<std::ptrdiff_t>(1 + rng() % (n - 1)), m);
        } else if (edit == 4 && !removed.empty()) {  // re-insert a removed one (unless an earlier state holds it)
          const std::size_t k = rng() % removed.size();
          if (std::none_of(messages.begin(), messages.end(),
                           [&](const ChatMessage& m) { return same(m, removed[k]); })) {
            messages.insert(messages.begin() + static_cast<std::ptrdiff_t>(1 + rng() % n), removed[k]);
          }
          removed.erase(removed.begin() + static_cast<std::ptrdiff_t>(k));
        } else if (edit == 5 && !history.empty()) {  // back to an earlier state
          messages = history[rng() % history.size()];
        }
        std::vector<PartSpan> parts;
        while (messages.size() > 1 && rendering_with_parts(*engine, messages, o, parts).size() > 400) {
          removed.push_back(messages[1]);
          messages.erase(messages.begin() + 1);
        }
        const double before = w.stats().critical_forward_tokens;
        const SyncReport r = w.sync(messages, o);
        INFO("step " << step << ", edit " << edit << "\n" << r.plan.describe());
        require_window_holds(*engine, w, messages, o, r.plan);
        GenerateOptions g;
        g.max_tokens = 1;
        (void)w.generate(r.generation_prompt, g);
        orbit_total += w.stats().critical_forward_tokens - before;
        last_total += last.read(spans_of(w));
        history.push_back(messages);
      }
      std::cout << "chunk parts, seed " << seed << ": orbit " << orbit_total
                << " forward tokens; a cache of the last read " << last_total << "\n";
    }
  }
}

}  // namespace ORBIT_TEST_FILE
