// Forwards in pieces (orbit/forward_pieces.h): under a ForwardPieces scope a plan's prefills and a chunk's
// canonical encode go in pieces of the scope's budget, its between() called between two; the window they make
// reads as the one made whole (logits within float rounding), with the same tokens forwarded and the same plan.
// Pieces are counted, never timed.
#include "orbit_catch.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <string>

#include "orbit/engine.h"
#include "orbit/forward_pieces.h"
#include "orbit/interrupt.h"
#include "test_helpers.h"
#include "window_test_support.h"

using namespace orbit;
using orbit::test::random_tokens;

namespace {

double max_gap(const Logits& a, const Logits& b) {
  REQUIRE(a.values.size() == b.values.size());
  double gap = 0;
  for (std::size_t i = 0; i < a.values.size(); ++i) gap = std::max(gap, std::abs(double{a.values[i]} - b.values[i]));
  return gap;
}

// A long user message of story words (about 1.2 tokens a word), after a short system message.
std::vector<ChatMessage> long_conversation(std::mt19937_64& rng, int words) {
  static const char* const kWords[] = {"once",  "upon", "a",   "time",  "there", "was",  "little", "girl",
                                       "named", "lily", "she", "liked", "to",    "play", "in",     "the",
                                       "park",  "with", "her", "dog",   "max",   "one",  "day",    "they"};
  std::string text;
  for (int i = 0; i < words; ++i) text += std::string(i ? " " : "") + kWords[rng() % std::size(kWords)];
  return {{"system", "You tell short stories."}, {"user", text + "."}};
}

// What one engine of its own makes of `make` (a window built from nothing): the window's logits for `query`,
// its critical-path tokens forwarded, and how many times between() was called.
struct Made {
  Logits logits;
  double forward_tokens = 0;
  int64_t between = 0;
  std::string plan;
};

Made made(int64_t piece_tokens, const std::function<std::string(Engine&, Window&)>& make,
          const std::vector<int64_t>& query) {
  auto engine = test::open_stories_small_pages(BackgroundMode::kInline);
  Window w = engine->new_window();
  Made out;
  {
    ForwardPieces pieces(piece_tokens, [&] { ++out.between; });
    out.plan = make(*engine, w);
  }
  out.logits = w.logits(query);
  out.forward_tokens = w.stats().critical_forward_tokens;
  return out;
}

}  // namespace

TEST_CASE("a sync's prefill in pieces makes the window the whole prefill makes", "[window][pieces]") {
  std::mt19937_64 rng(11);
  const std::vector<ChatMessage> messages = long_conversation(rng, 300);
  auto sync = [&](Engine&, Window& w) {
    SyncOptions o;
    o.chunk_min_tokens = 32;
    const SyncReport r = w.sync(messages, o);
    return r.plan.describe();
  };
  const std::vector<int64_t> query = random_tokens(rng, 3);
  const Made whole = made(0, sync, query);
  for (const int64_t size : {int64_t{1}, int64_t{7}, int64_t{64}}) {
    const Made pieces = made(size, sync, query);
    CAPTURE(size);
    CHECK(pieces.between > 0);  // split: the old code has no pieces (and no scope) at all
    CHECK(pieces.plan == whole.plan);
    CHECK(pieces.forward_tokens == whole.forward_tokens);
    CHECK(max_gap(pieces.logits, whole.logits) <= test::kExactWindowTolerance);
  }
  CHECK(whole.between == 0);  // budget 0: whole
}

TEST_CASE("a chunk admitted in pieces: its canonical encode and its prefill in context", "[window][pieces]") {
  std::mt19937_64 rng(12);
  const std::vector<int64_t> lead = random_tokens(rng, 40), doc = random_tokens(rng, 200);
  const std::vector<int64_t> query = random_tokens(rng, 3);
  // Behind nothing the chunk's canonical is encoded (KvStore::canonical); behind a turn it is prefilled in
  // context (the apply env's forward): both go in pieces.
  for (const bool behind_turn : {false, true}) {
    auto admit = [&](Engine& e, Window& w) {
      if (behind_turn) w.add_turn(lead);
      const ApplyReport r = w.admit(e.add_tokens(doc));
      return std::to_string(r.forward_tokens);
    };
    CAPTURE(behind_turn);
    const Made whole = made(0, admit, query);
    const Made pieces = made(16, admit, query);
    CHECK(pieces.between >= 200 / 16 - 1);
    CHECK(pieces.plan == whole.plan);
    CHECK(pieces.forward_tokens == whole.forward_tokens);
    CHECK(max_gap(pieces.logits, whole.logits) <= test::kExactWindowTolerance);
  }
}

TEST_CASE("a between() that throws ends the operation with nothing committed", "[window][pieces]") {
  std::mt19937_64 rng(13);
  auto engine = test::open_stories_small_pages(BackgroundMode::kInline);
  Window w = engine->new_window();
  w.add_turn(random_tokens(rng, 8));
  const uint64_t version = w.version();
  const std::vector<int64_t> turn = random_tokens(rng, 100);
  int calls = 0;
  {
    ForwardPieces pieces(10, [&] {
      if (++calls == 3) throw Interrupted("test");
    });
    CHECK_THROWS_AS(w.add_turn(turn), Interrupted);
  }
  CHECK(calls == 3);
  CHECK(w.version() == version);
  w.add_turn(turn);  // whole now: the window goes on as if never interrupted
  CHECK(w.version() != version);
}
