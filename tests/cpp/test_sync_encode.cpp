// Step 3's incremental encoding (sdk/src/window/sync_encode.h): a segment encoded from the earlier list's tokens
// up to a cut both texts share (orbit::detail::encode_reusing) is exactly the whole encode, ids and bytes, for both
// bundled prefix-stable tokenizers (TinyStories-656K's tokenizer.json, stories260K's llama2.c file; and a variant
// of the first whose normalizer maps a character into several): over agents
// whose lists grow, get trimmed and edited (edits inside multi-byte characters, so the texts part mid-character)
// under several templates; from every prefix of a rendering, including the ends BPE merges across once the
// text goes on (the safe-cut rule refuses those and an earlier cut is taken). And plan_sync with incremental
// encoding on and off (orbit::detail::set_incremental_encode) gives the same plan, reusing most tokens when a list
// grew.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <sstream>

#include "orbit/common/sha256.h"
#include "orbit/engine.h"
#include "orbit/runtime/chat_template.h"
#include "orbit/runtime/hf_tokenizer.h"
#include "orbit/runtime/tokenizer.h"
#include "orbit/sync.h"
#include "orbit/window.h"
#include "orbit_catch.h"
#include "sync_cuts_support.h"
#include "sync_test_support.h"
#include "test_helpers.h"
#include "tokenizer_variants.h"
#include "window/sync_encode.h"
#include "window/sync_memo.h"
#include "window/sync_render.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

namespace {

using namespace orbit;
using orbit::test::sync_cuts::content;
using orbit::test::sync_cuts::random_list;
using orbit::test::sync_cuts::require_same;
using orbit::test::sync_support::msg;
using orbit::test::sync_support::sentence;

// The two bundled tokenizers, and TinyStories-656K's with a normalizer that maps a character into several
// ("e" into "▁h", "\n" into "▁▁"), whose tokens may share a character: a token that ends where the next one
// starts inside the same character leaves no cut there.
std::vector<std::unique_ptr<runtime::Tokenizer>> tokenizers() {
  std::vector<std::unique_ptr<runtime::Tokenizer>> out;
  out.push_back(runtime::load_tokenizer(std::string(ORBIT_MODELS_DIR) + "/tinystories-656k"));
  out.push_back(runtime::load_tokenizer(std::string(ORBIT_MODELS_DIR) + "/stories260K/tok512.bin", 512));
  nlohmann::json j = test::tokenizer_variants::tinystories_json();
  j["normalizer"] = test::tokenizer_variants::several_normalizer();
  out.push_back(test::tokenizer_variants::load_variant("tinystories-656k, 'e' normalized into two", j));
  return out;
}

// The templates of sync_cuts_support.h and two model templates (their special tokens spelled out in text).
std::vector<std::string> templates() {
  std::vector<std::string> out = orbit::test::sync_cuts::kTemplates;
  for (const char* name : {"qwen2.5-7b-instruct", "llama-3.1-8b-instruct"}) {
    std::ifstream in(std::filesystem::path(ORBIT_TEST_DATA_DIR) / "templates" / (std::string(name) + ".jinja"));
    std::stringstream text;
    text << in.rdbuf();
    out.push_back(text.str());
  }
  return out;
}

// Characters whose last byte an edit changes, so the earlier and the later text part inside the character.
const std::vector<std::pair<std::string, std::string>> kFlips = {
    {"\xC3\xA9", "\xC3\xA8"},                   // é -> è
    {"\xE4\xBD\xA0", "\xE4\xBD\x80"},           // 你 -> 佀
    {"\xF0\x9F\x99\x82", "\xF0\x9F\x99\x83"}};  // 🙂 -> 🙃

// One step of an agent's list: mostly appends, sometimes a trim of the oldest turns, an edit, or a flip of a
// multi-byte character's last byte (after appending such characters to a message).
void step(std::mt19937_64& rng, std::vector<ChatMessage>& list) {
  const std::size_t r = rng() % 10;
  if (r < 5 || list.size() < 4) {
    for (std::size_t k = 1 + rng() % 2; k > 0; --k) list.push_back(random_list(rng, 1).front());
  } else if (r == 5) {
    list.erase(list.begin() + 1, list.begin() + 3);
  } else if (r == 6) {
    list[rng() % list.size()].content = content(rng);
  } else {
    ChatMessage& m = r == 7 ? list.back() : list[rng() % list.size()];
    for (const auto& [from, to] : kFlips) {
      const std::size_t at = m.content.find(from);
      if (at != std::string::npos) {
        m.content.replace(at, from.size(), to);
        return;
      }
    }
    m.content += " caf\xC3\xA9 \xE4\xBD\xA0\xF0\x9F\x99\x82" + sentence(rng, 1);
  }
}

void require_same_encoding(const runtime::Encoding& got, const runtime::Encoding& want) {
  REQUIRE(got.ids == want.ids);
  REQUIRE(got.bytes.size() == want.bytes.size());
  for (std::size_t i = 0; i < got.bytes.size(); ++i) {
    INFO("token " << i);
    REQUIRE(got.bytes[i].begin == want.bytes[i].begin);
    REQUIRE(got.bytes[i].end == want.bytes[i].end);
  }
}

// `list` rendered with the generation prompt (as step 3 encodes its last segment) or without; nullopt where the
// template refuses it.
std::optional<std::string> rendered(const runtime::ChatTemplate& t, const std::vector<ChatMessage>& list,
                                    bool generation_prompt = true) {
  std::vector<runtime::ChatMessage> rl;
  for (const ChatMessage& m : list) {
    runtime::ChatMessage r{m.role, m.content, m.name, m.tool_call_id, {}};
    for (const ChatToolCall& c : m.tool_calls) r.tool_calls.push_back({c.id, c.name, c.arguments});
    rl.push_back(std::move(r));
  }
  runtime::ChatRenderOptions o;
  o.add_generation_prompt = generation_prompt;
  try {
    return t.render(rl, o);
  } catch (const Error&) {
    return std::nullopt;
  }
}

// Where `list`'s messages start in `text`, its rendering by `t` (the ends of the prefixes' renderings that are
// prefixes of it, as step 2 finds them), in increasing order.
std::vector<std::size_t> message_starts(const runtime::ChatTemplate& t, const std::vector<ChatMessage>& list,
                                        const std::string& text) {
  std::vector<std::size_t> starts;
  for (std::size_t i = 1; i < list.size(); ++i) {
    const std::optional<std::string> prefix =
        rendered(t, std::vector<ChatMessage>(list.begin(), list.begin() + static_cast<std::ptrdiff_t>(i)), false);
    if (!prefix || text.compare(0, prefix->size(), *prefix) != 0) continue;
    if (starts.empty() || prefix->size() > starts.back()) starts.push_back(prefix->size());
  }
  return starts;
}

// `list` with its `k` oldest messages after the first dropped, and a summary of them in their place when
// `summarize`.
std::vector<ChatMessage> trimmed(const std::vector<ChatMessage>& list, std::size_t k, bool summarize,
                                 std::mt19937_64& rng) {
  std::vector<ChatMessage> out{list.front()};
  if (summarize) out.push_back(msg("assistant", "Earlier:" + sentence(rng, 1 + static_cast<int>(rng() % 6))));
  out.insert(out.end(), list.begin() + 1 + static_cast<std::ptrdiff_t>(k), list.end());
  return out;
}

// How an agent edits its last list at request `request` (0, 1, ...) into the next.
using ListEdit = std::function<std::vector<ChatMessage>(const std::vector<ChatMessage>&, int, std::mt19937_64&)>;

// Under each of sync_cuts::kTemplates, a story list (a system prompt and 16 turns) edited by `edit` at each of 6
// requests, each list planned before the next: the next list's incremental plan equals the whole one, and more than
// half of its tokens are reused from the memo.
void check_edits_reuse_tokens(uint64_t seed, const ListEdit& edit) {
  struct On {
    ~On() { orbit::detail::set_incremental_encode(true); }
  } restore;
  const auto engine = orbit::test::sync_support::open_engine();
  std::mt19937_64 rng(seed);
  for (const std::string& tmpl : orbit::test::sync_cuts::kTemplates) {
    orbit::detail::clear_encode_memo();
    const Window w = engine->new_window();
    const SyncOptions o = orbit::test::sync_support::options(tmpl.c_str(), 16);
    std::vector<ChatMessage> list = {msg("system", "You tell short stories.")};
    for (int k = 0; k < 16; ++k) list.push_back(msg(k % 2 ? "assistant" : "user", sentence(rng, 6)));
    for (int request = 0; request < 6; ++request) {
      (void)w.plan_sync(list, o);  // the memo holds this list, the latest under this template
      std::vector<ChatMessage> next = edit(list, request, rng);
      INFO("template '" << tmpl << "', request " << request << ", " << next.size() << " messages");
      orbit::detail::set_incremental_encode(false);  // keeps nothing in the memo
      const SyncPlan whole = w.plan_sync(next, o);
      orbit::detail::set_incremental_encode(true);
      const int64_t before = orbit::detail::tokens_reused_so_far();
      const SyncPlan incremental = w.plan_sync(next, o);
      const int64_t reused = orbit::detail::tokens_reused_so_far() - before;
      require_same(incremental, whole);
      INFO(reused << " of " << incremental.tokens.size() << " tokens reused");
      CHECK(reused * 2 > static_cast<int64_t>(incremental.tokens.size()));
      list = std::move(next);
    }
  }
}

}  // namespace

TEST_CASE("a list trimmed or summarized at its start encodes from the last one's tokens as it encodes whole",
          "[sync_encode]") {
  for (const auto& tok : tokenizers()) {
    std::mt19937_64 rng(25);
    int64_t with_run = 0, prefix_only = 0, tokens = 0;
    for (const std::string& source : templates()) {
      const runtime::ChatTemplate t(source.empty() ? std::string(kPlainChatTemplate) : source, "test");
      for (int agent = 0; agent < 4; ++agent) {
        std::vector<ChatMessage> list = {msg("system", "You tell short stories.")};
        for (int k = 0; k < 14; ++k) list.push_back(random_list(rng, 1).front());
        const std::optional<std::string> earlier = rendered(t, list);
        if (!earlier) continue;
        const orbit::detail::SegmentEncoding known{*earlier, tok->encode_with_bytes(*earlier)};
        for (const std::size_t k : {1, 2, 3, 5}) {
          for (const bool summarize : {false, true}) {
            std::vector<ChatMessage> next = trimmed(list, k, summarize, rng);
            if (rng() % 2 == 0) next.push_back(random_list(rng, 1).front());
            const std::optional<std::string> text = rendered(t, next);
            if (!text) continue;
            INFO(tok->source() << ", template '" << source.substr(0, 60) << "', agent " << agent << ", " << k
                               << " dropped" << (summarize ? " and summarized" : "") << ", text '" << *text << "'");
            const runtime::Encoding whole = tok->encode_with_bytes(*text);
            int64_t before = orbit::detail::tokens_reused_so_far();
            require_same_encoding(orbit::detail::encode_reusing(*tok, *text, &known, message_starts(t, next, *text)),
                                  whole);
            with_run += orbit::detail::tokens_reused_so_far() - before;
            before = orbit::detail::tokens_reused_so_far();
            require_same_encoding(orbit::detail::encode_reusing(*tok, *text, &known), whole);
            prefix_only += orbit::detail::tokens_reused_so_far() - before;
            tokens += static_cast<int64_t>(whole.ids.size());
          }
        }
      }
    }
    std::printf("%s: trimmed and summarized lists: %lld of %lld tokens reused (%lld from the common prefix alone)\n",
                tok->source().c_str(), static_cast<long long>(with_run), static_cast<long long>(tokens),
                static_cast<long long>(prefix_only));
    CHECK(with_run * 2 > tokens);  // most of the kept messages' tokens come from the earlier list
    CHECK(with_run > 3 * prefix_only);
  }
}

TEST_CASE("a list edited in several places encodes from every run it shares with the last one", "[sync_encode]") {
  for (const auto& tok : tokenizers()) {
    std::mt19937_64 rng(28);
    int64_t reused = 0, tokens = 0;
    for (const std::string& source : templates()) {
      const runtime::ChatTemplate t(source.empty() ? std::string(kPlainChatTemplate) : source, "test");
      for (int agent = 0; agent < 3; ++agent) {
        std::vector<ChatMessage> list = {msg("system", "You tell short stories.")};
        for (int k = 0; k < 24; ++k) list.push_back(msg(k % 2 ? "assistant" : "user", sentence(rng, 8 + k % 5)));
        const std::optional<std::string> earlier = rendered(t, list);
        if (!earlier) continue;
        const orbit::detail::SegmentEncoding known{*earlier, tok->encode_with_bytes(*earlier)};
        for (const bool summarize : {false, true}) {
          // Trimmed (or summarized) at its start, a message in the middle rewritten, one further on removed, and
          // a message added: four runs of kept messages, three edits between them.
          std::vector<ChatMessage> next = trimmed(list, 2, summarize, rng);
          next[next.size() / 2].content = sentence(rng, 9);
          next.erase(next.begin() + static_cast<std::ptrdiff_t>(next.size() * 3 / 4));
          next.push_back(msg("user", sentence(rng, 5)));
          const std::optional<std::string> text = rendered(t, next);
          if (!text) continue;
          INFO(tok->source() << ", template '" << source.substr(0, 60) << "', agent " << agent
                             << (summarize ? ", summarized" : ", trimmed") << ", text '" << *text << "'");
          const runtime::Encoding whole = tok->encode_with_bytes(*text);
          const int64_t before = orbit::detail::tokens_reused_so_far();
          require_same_encoding(orbit::detail::encode_reusing(*tok, *text, &known, message_starts(t, next, *text)),
                                whole);
          reused += orbit::detail::tokens_reused_so_far() - before;
          tokens += static_cast<int64_t>(whole.ids.size());
        }
      }
    }
    std::printf("%s: lists edited in three places: %lld of %lld tokens reused\n", tok->source().c_str(),
                static_cast<long long>(reused), static_cast<long long>(tokens));
    // The kept messages are most of the text: the longest run alone is about half of it.
    CHECK(reused * 4 > tokens * 3);
  }
}

TEST_CASE("a text that ends as an earlier one does encodes from its tokens as it encodes whole", "[sync_encode]") {
  // T = X + K[q, end) for every character boundary q of a rendering K and heads X ending in characters that
  // merge with what follows, or that end in an added token: the run starts at q, where K's token boundaries
  // hold only where the rule takes the cut in T as well.
  const std::vector<std::string> heads = {"s",           "Summary: a",  " ", "\n", "<|start_story|>",
                                          "caf\xC3\xA9", "\xE2\x96\x81"};
  for (const auto& tok : tokenizers()) {
    std::mt19937_64 rng(26);
    int64_t reused = 0;
    for (const std::string& source : orbit::test::sync_cuts::kTemplates) {
      const runtime::ChatTemplate t(source.empty() ? std::string(kPlainChatTemplate) : source, "test");
      std::vector<ChatMessage> list = {msg("system", "You tell short stories.")};
      for (int k = 0; k < 6; ++k) list.push_back(random_list(rng, 1).front());
      const std::optional<std::string> earlier = rendered(t, list);
      if (!earlier) continue;
      const orbit::detail::SegmentEncoding known{*earlier, tok->encode_with_bytes(*earlier)};
      for (std::size_t q = 1; q + orbit::detail::kMinRunBytes < earlier->size(); ++q) {
        if ((static_cast<unsigned char>((*earlier)[q]) & 0xC0) == 0x80) continue;
        for (const std::string& head : heads) {
          const std::string text = head + earlier->substr(q);
          INFO(tok->source() << ", earlier text '" << *earlier << "', its bytes from " << q << " after '" << head
                             << "'");
          const int64_t before = orbit::detail::tokens_reused_so_far();
          require_same_encoding(orbit::detail::encode_reusing(*tok, text, &known, {head.size()}),
                                tok->encode_with_bytes(text));
          reused += orbit::detail::tokens_reused_so_far() - before;
        }
      }
    }
    CHECK(reused > 0);
  }
}

TEST_CASE("an agent's renderings encoded from the last one's tokens are the whole encodes", "[sync_encode]") {
  for (const auto& tok : tokenizers()) {
    REQUIRE(tok->prefix_stable());
    std::mt19937_64 rng(21);
    int64_t reused = 0, tokens = 0;
    for (const std::string& source : templates()) {
      const runtime::ChatTemplate t(source.empty() ? std::string(kPlainChatTemplate) : source, "test");
      for (int agent = 0; agent < 2; ++agent) {
        std::vector<ChatMessage> list = {msg("system", "You tell short stories.")};
        std::optional<orbit::detail::SegmentEncoding> last;
        for (int request = 0; request < 16; ++request) {
          step(rng, list);
          const std::optional<std::string> text = rendered(t, list);
          if (!text) continue;
          INFO(tok->source() << ", template '" << source.substr(0, 60) << "', agent " << agent << ", request "
                             << request << ", text '" << *text << "'");
          const int64_t before = orbit::detail::tokens_reused_so_far();
          runtime::Encoding got = orbit::detail::encode_reusing(*tok, *text, last ? &*last : nullptr);
          reused += orbit::detail::tokens_reused_so_far() - before;
          tokens += static_cast<int64_t>(got.ids.size());
          require_same_encoding(got, tok->encode_with_bytes(*text));
          last = orbit::detail::SegmentEncoding{*text, std::move(got)};  // the next one reuses what this one made
        }
      }
    }
    std::printf("%s: %lld of %lld tokens reused\n", tok->source().c_str(), static_cast<long long>(reused),
                static_cast<long long>(tokens));
    CHECK(reused * 2 > tokens);  // most of a growing list's tokens come from the last one
  }
}

TEST_CASE("a rendering encoded from each of its prefixes is the whole encode", "[sync_encode]") {
  for (const auto& tok : tokenizers()) {
    std::mt19937_64 rng(22);
    int64_t refused = 0;  // ends of a prefix that its own tokens leave whole but the text's merge across
    for (const std::string& source : orbit::test::sync_cuts::kTemplates) {
      const runtime::ChatTemplate t(source.empty() ? std::string(kPlainChatTemplate) : source, "test");
      std::vector<ChatMessage> list = {msg("system", "You tell short stories.")};
      for (int k = 0; k < 6; ++k) step(rng, list);
      const std::string text = rendered(t, list).value();
      const runtime::Encoding whole = tok->encode_with_bytes(text);
      for (std::size_t c = 1; c < text.size(); ++c) {
        if ((static_cast<unsigned char>(text[c]) & 0xC0) == 0x80) continue;
        INFO(tok->source() << ", text '" << text << "', earlier text its first " << c << " bytes");
        const orbit::detail::SegmentEncoding earlier{text.substr(0, c), tok->encode_with_bytes(text.substr(0, c))};
        require_same_encoding(orbit::detail::encode_reusing(*tok, text, &earlier), whole);
        bool straddled = false;
        for (const runtime::TokenBytes& b : whole.bytes) straddled = straddled || (b.begin < c && c < b.end);
        if (straddled) {
          CHECK_FALSE(tok->encode_rest(text, c).has_value());
          ++refused;
        }
      }
    }
    CHECK(refused > 0);  // the ends BPE merges across were met, and refused
  }
}

TEST_CASE("plan_sync encodes incrementally as it encodes whole", "[sync_encode]") {
  struct On {
    ~On() { orbit::detail::set_incremental_encode(true); }
  } restore;
  EngineOptions eo;
  eo.model = orbit::test::stories_path();
  eo.pool_bytes = int64_t{16} << 20;
  eo.page_size = 16;
  eo.background = BackgroundMode::kInline;
  const std::vector<std::shared_ptr<Engine>> engines = {orbit::test::sync_support::open_engine(), Engine::open(eo)};
  std::mt19937_64 rng(23);
  for (const auto& engine : engines) {
    orbit::detail::clear_encode_memo();
    int64_t reused = 0;
    for (const std::string& tmpl : orbit::test::sync_cuts::kTemplates) {
      Window w = engine->new_window();
      const SyncOptions o = orbit::test::sync_support::options(tmpl.c_str(), 8 + static_cast<int64_t>(rng() % 24));
      std::vector<ChatMessage> list = {msg("system", "You tell short stories.")};
      for (int request = 0; request < 12; ++request) {
        step(rng, list);
        INFO("template '" << tmpl << "', request " << request << ", " << list.size() << " messages");
        orbit::detail::set_incremental_encode(false);
        const SyncPlan whole = w.plan_sync(list, o);
        orbit::detail::set_incremental_encode(true);
        const int64_t before = orbit::detail::tokens_reused_so_far();
        const SyncPlan incremental = w.plan_sync(list, o);
        reused += orbit::detail::tokens_reused_so_far() - before;
        require_same(incremental, whole);
        if (rng() % 2 == 0) w.sync(list, incremental);
      }
    }
    CHECK(reused > 0);
  }
}

TEST_CASE("a list that only grew encodes little more than its new message", "[sync_encode]") {
  const auto engine = orbit::test::sync_support::open_engine();
  orbit::detail::clear_encode_memo();
  std::mt19937_64 rng(24);
  const Window w = engine->new_window();
  const SyncOptions o = orbit::test::sync_support::options(orbit::test::sync_support::kRunOnTemplate, 16);
  std::vector<ChatMessage> list = {msg("system", "You tell short stories.")};
  std::size_t last_tokens = 0;
  for (int request = 0; request < 10; ++request) {
    list.push_back(msg(request % 2 ? "assistant" : "user", sentence(rng, 2 + static_cast<int>(rng() % 6))));
    const int64_t before = orbit::detail::tokens_reused_so_far();
    const SyncPlan plan = w.plan_sync(list, o);
    const int64_t reused = orbit::detail::tokens_reused_so_far() - before;
    INFO("request " << request << ": " << reused << " of " << plan.tokens.size() << " tokens reused, " << last_tokens
                    << " before");
    // All but the last few tokens of the last list (its generation prompt, the word its end merges with).
    if (request > 0) CHECK(reused + 8 >= static_cast<int64_t>(last_tokens));
    last_tokens = plan.tokens.size();
  }
}

TEST_CASE("plan_sync of a list trimmed or summarized at its start reuses the kept messages' tokens", "[sync_encode]") {
  check_edits_reuse_tokens(27, [](const std::vector<ChatMessage>& list, int request, std::mt19937_64& rng) {
    std::vector<ChatMessage> next = trimmed(list, 2, request % 2 == 1, rng);
    next.push_back(msg("user", sentence(rng, 4)));
    return next;
  });
}

TEST_CASE("plan_sync of a list whose system prompt changed reuses the kept messages' tokens", "[sync_encode]") {
  check_edits_reuse_tokens(28, [](const std::vector<ChatMessage>& list, int request, std::mt19937_64& rng) {
    // A new system prompt (a step counter in it), then as the request asks: nothing else, two turns added,
    // or the two oldest turns dropped and one added.
    std::vector<ChatMessage> next = request % 3 == 2 ? trimmed(list, 2, false, rng) : list;
    next.front().content = "You tell short stories. Step " + std::to_string(request) + ": " + sentence(rng, 2);
    if (request % 3 != 0) next.push_back(msg("user", sentence(rng, 4)));
    if (request % 3 == 1) next.push_back(msg("assistant", sentence(rng, 4)));
    return next;
  });
}

TEST_CASE("a list kept as the latest with its first message counts once against the memo's bytes", "[sync_encode]") {
  orbit::detail::clear_encode_memo();
  const auto tok = runtime::load_tokenizer(std::string(ORBIT_MODELS_DIR) + "/tinystories-656k");
  // Three lists of 20 MiB each, with different first messages: 60 MiB in all, within the memo's 64 MiB, when
  // each is counted once (its key and its aliases as the latest with its first message and template).
  std::vector<orbit::detail::ListKeys> keys;
  for (int i = 0; i < 3; ++i) {
    auto made = std::make_shared<orbit::detail::ListEncodings>();
    made->segments.push_back({std::string(std::size_t{20} << 20, static_cast<char>('a' + i)), {}});
    Sha256 first, list;
    first.update("first message " + std::to_string(i));
    list.update("list " + std::to_string(i));
    keys.push_back({Sha256::Digest{}, {first.digest(), list.digest()}, {}});
    orbit::detail::put_encodings(keys.back(), *tok, std::move(made));
  }
  for (int i = 0; i < 3; ++i) {
    INFO("list " << i);
    const std::shared_ptr<const orbit::detail::ListEncodings> known = orbit::detail::known_encodings(keys[i], *tok);
    REQUIRE(known != nullptr);
    CHECK(known->segments.front().text[0] == 'a' + i);
    // A list with the same first message and another key (trimmed at its start) finds it as the latest.
    Sha256 other;
    other.update("trimmed " + std::to_string(i));
    const std::shared_ptr<const orbit::detail::ListEncodings> latest =
        orbit::detail::known_encodings({Sha256::Digest{}, {keys[i].lists[0], other.digest()}, {}}, *tok);
    CHECK(latest == known);
  }
  // A list with a first message none had (its system prompt rewritten) finds the latest under its template.
  Sha256 first, list;
  first.update("a new first message");
  list.update("a new list");
  CHECK(orbit::detail::known_encodings({Sha256::Digest{}, {first.digest(), list.digest()}, {}}, *tok) ==
        orbit::detail::known_encodings(keys[2], *tok));
  orbit::detail::clear_encode_memo();
}

}  // namespace ORBIT_TEST_FILE
