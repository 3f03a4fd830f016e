// Window::plan_sync / sync's cuts (orbit/sync.h step 3) for prefix-stable tokenizers: decided from the bytes of
// the rendering's tokens (runtime::Tokenizer::encode_with_bytes) they give exactly the plan that encoding the
// text before every cut gives (detail::set_cut_by_token_bytes switches between the two): the same tokens,
// units, merged boundaries and generation prompt, on TinyStories-656K (tokenizer.json) and stories260K
// (llama2.c's tokenizer), over random lists, several templates (boundaries that are token boundaries and
// boundaries BPE merges across), chunk parts, and an agent that keeps appending and trimming its oldest turns.
#include <random>

#include "orbit/engine.h"
#include "orbit/sync.h"
#include "orbit/window.h"
#include "orbit_catch.h"
#include "sync_cuts_support.h"
#include "sync_test_support.h"
#include "test_helpers.h"
#include "window/sync_render.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

namespace {

using namespace orbit;
using orbit::test::sync_cuts::content;
using orbit::test::sync_cuts::kTemplates;
using orbit::test::sync_cuts::random_list;
using orbit::test::sync_cuts::require_same;
using orbit::test::sync_support::sentence;

// Turns the shortcut back on however the test leaves.
struct ShortcutOn {
  ~ShortcutOn() { orbit::detail::set_cut_by_token_bytes(true); }
};

// The prefixes step 3 encoded: with token bytes, and encoding every prefix.
struct Encoded {
  int64_t bytes = 0, prefixes = 0;
};

// plan_sync both ways, checked equal; the plan the shortcut made. Adds the prefixes each way encoded.
SyncPlan plan_both(const Window& w, const std::vector<ChatMessage>& messages, const SyncOptions& o,
                   Encoded* encoded = nullptr) {
  const ShortcutOn restore;
  const int64_t start = orbit::detail::prefix_encodes_so_far();
  orbit::detail::set_cut_by_token_bytes(false);
  const SyncPlan prefixes = w.plan_sync(messages, o);
  const int64_t middle = orbit::detail::prefix_encodes_so_far();
  orbit::detail::set_cut_by_token_bytes(true);
  const SyncPlan bytes = w.plan_sync(messages, o);
  require_same(bytes, prefixes);
  if (encoded != nullptr) {
    encoded->prefixes += middle - start;
    encoded->bytes += orbit::detail::prefix_encodes_so_far() - middle;
  }
  return bytes;
}

std::shared_ptr<Engine> open_stories260k() {
  EngineOptions o;
  o.model = orbit::test::stories_path();
  o.pool_bytes = int64_t{16} << 20;
  o.page_size = 16;
  o.background = BackgroundMode::kInline;
  return Engine::open(o);
}

// What random lists on a fresh window met under each template (kTemplates' order).
struct Seen {
  int64_t merged = 0;            // boundaries merged, in all
  std::vector<Encoded> encoded;  // per template
};

Seen random_lists(Engine& engine, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const Window w = engine.new_window();
  Seen seen;
  for (const std::string& tmpl : kTemplates) {
    seen.encoded.emplace_back();
    for (int trial = 0; trial < 25; ++trial) {
      const SyncOptions o = orbit::test::sync_support::options(tmpl.c_str(), 8 + static_cast<int64_t>(rng() % 24));
      INFO("template '" << tmpl << "', trial " << trial);
      seen.merged += plan_both(w, random_list(rng, 1 + rng() % 9), o, &seen.encoded.back()).merged_boundaries;
    }
  }
  return seen;
}

}  // namespace

TEST_CASE("cuts from token bytes plan as encoding every prefix does: TinyStories-656K", "[sync_cuts]") {
  const auto engine = orbit::test::sync_support::open_engine();
  // Boundaries BPE merges across are among them (the straddled cuts, which still encode their prefix).
  const Seen seen = random_lists(*engine, 1);
  CHECK(seen.merged > 0);
  // Under the plain template every message boundary is a token boundary no token straddles: no prefix is
  // encoded, where encoding every prefix encodes them all.
  CHECK(seen.encoded[0].bytes == 0);
  CHECK(seen.encoded[0].prefixes > 50);
  CHECK(seen.encoded[1].bytes == 0);
}

TEST_CASE("cuts from token bytes plan as encoding every prefix does: stories260K", "[sync_cuts]") {
  const auto engine = open_stories260k();
  const Seen seen = random_lists(*engine, 2);
  CHECK(seen.merged > 0);
  CHECK(seen.encoded[0].bytes == 0);
  CHECK(seen.encoded[0].prefixes > 50);
  // Under the run-on template llama2.c's pieces (" user") take each boundary's space: every cut is straddled
  // and encodes its prefix.
  CHECK(seen.encoded[2].bytes == seen.encoded[2].prefixes);
}

TEST_CASE("cuts from token bytes around chunk parts", "[sync_cuts]") {
  const auto engine = orbit::test::sync_support::open_engine();
  std::mt19937_64 rng(3);
  const Window w = engine->new_window();
  const ChunkRef chunk = engine->add_tokens({80, 147, 201, 282, 57, 80, 1209});
  for (const std::string& tmpl : kTemplates) {
    for (int trial = 0; trial < 10; ++trial) {
      std::vector<ChatMessage> messages = random_list(rng, 2 + rng() % 6);
      ChatMessage& m = messages[rng() % messages.size()];
      m.parts = {ContentPart::of_text(m.content), ContentPart::of_chunk(chunk), ContentPart::of_text(content(rng))};
      m.content.clear();
      INFO("template '" << tmpl << "', trial " << trial);
      plan_both(w, messages, orbit::test::sync_support::options(tmpl.c_str()));
    }
  }
}

TEST_CASE("cuts from token bytes for an agent that appends and trims its oldest turns", "[sync_cuts]") {
  const auto engine = orbit::test::sync_support::open_engine();
  for (const std::string& tmpl : {std::string(), std::string(orbit::test::sync_support::kRunOnTemplate)}) {
    std::mt19937_64 rng(4);
    Window w = engine->new_window();
    const SyncOptions o = orbit::test::sync_support::options(tmpl.c_str(), 16);
    std::vector<ChatMessage> messages = {orbit::test::sync_support::msg("system", "You tell short stories.")};
    for (int turn = 0; turn < 12; ++turn) {
      messages.push_back(orbit::test::sync_support::msg("user", sentence(rng, 3 + static_cast<int>(rng() % 10))));
      messages.push_back(orbit::test::sync_support::msg("assistant", content(rng)));
      if (messages.size() > 7) messages.erase(messages.begin() + 1, messages.begin() + 3);  // the oldest turn
      INFO("template '" << tmpl << "', turn " << turn);
      w.sync(messages, plan_both(w, messages, o));
    }
  }
}

}  // namespace ORBIT_TEST_FILE
