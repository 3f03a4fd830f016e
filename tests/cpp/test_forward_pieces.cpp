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

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

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

TEST_CASE("an operation interrupted after a step forwarded counts that step's forward in the engine",
          "[window][pieces]") {
  std::mt19937_64 rng(15);
  auto engine = test::open_stories_small_pages(BackgroundMode::kInline);
  WindowOptions options;
  options.policy = parse_policy("prefix");  // the eviction's repair re-prefills every turn behind it, one step each
  Window w = engine->new_window(options);
  w.add_turn(random_tokens(rng, 8));
  w.add_turn(random_tokens(rng, 30));
  w.add_turn(random_tokens(rng, 100));
  w.evict(w.instances().front().id);  // its repair deferred to the next forwarding operation
  const uint64_t version = w.version();
  const double window_before = w.stats().forward_tokens;
  const double engine_before = engine->stats().forward_tokens;
  int calls = 0;
  {
    // Pieces of 10 tokens: the 30-token turn's forward ends before the 8th piece, inside the 100-token turn's.
    ForwardPieces pieces(10, [&] {
      if (++calls == 8) throw Interrupted("test");
    });
    CHECK_THROWS_AS(w.flush(), Interrupted);
  }
  CHECK(w.version() == version);  // nothing committed, nothing counted in the window
  CHECK(w.stats().forward_tokens == window_before);
  CHECK(engine->stats().forward_tokens == engine_before + 30);  // the step served before the interrupt ran
}

TEST_CASE("a read's query forward in pieces gives the whole forward's logits", "[window][pieces]") {
  std::mt19937_64 rng(14);
  auto engine = test::open_stories_small_pages(BackgroundMode::kInline);
  Window w = engine->new_window();
  w.add_turn(random_tokens(rng, 60));
  const std::vector<int64_t> query = random_tokens(rng, 50);
  const Logits whole = w.logits(query, true), whole_last = w.logits(query);
  for (const int64_t size : {int64_t{1}, int64_t{7}, int64_t{16}, int64_t{49}}) {
    CAPTURE(size);
    int64_t between = 0;
    Logits pieces, pieces_last;
    {
      ForwardPieces scope(size, [&] { ++between; });
      pieces = w.logits(query, true);
      pieces_last = w.logits(query);
    }
    CHECK(between == 2 * ((50 + size - 1) / size - 1));  // split: the old code forwards the query whole
    REQUIRE(pieces.rows == whole.rows);
    CHECK(pieces_last.rows == 1);
    const double gap = max_gap(pieces, whole), gap_last = max_gap(pieces_last, whole_last);
    CAPTURE(gap, gap_last);
    UNSCOPED_INFO("query in pieces of " << size << ": max |logit gap| " << gap << ", last row " << gap_last);
    CHECK(gap <= test::kExactWindowTolerance);
    CHECK(gap_last <= test::kExactWindowTolerance);
  }
  // A between() that throws ends the read: nothing returned, and the next read is the whole one.
  {
    ForwardPieces scope(10, [] { throw Interrupted("test"); });
    CHECK_THROWS_AS(w.logits(query), Interrupted);
  }
  CHECK(max_gap(w.logits(query), whole_last) == 0);
}

TEST_CASE("a token-selective recompute in pieces recomputes what it recomputes whole", "[window][pieces]") {
  std::mt19937_64 rng(15);
  const std::vector<int64_t> lead = random_tokens(rng, 30), doc = random_tokens(rng, 120);
  const std::vector<int64_t> query = random_tokens(rng, 3);
  // The chunk's canonical is encoded first (behind nothing, whole), so the admit behind the turn is the policy's
  // recompute over it (first-k: its first 100 tokens; CacheBlend: the 72 that deviate most, after its probe).
  for (const auto& [policy, recomputed] :
       {std::pair<const char*, int64_t>{"firstk:100", 100}, {"cacheblend:0.6", 72}}) {
    auto admitted = [&](int64_t size) {
      auto engine = test::open_stories_small_pages(BackgroundMode::kInline);
      const ChunkRef chunk = engine->add_tokens(doc);
      engine->new_window().admit(chunk);
      WindowOptions wo;
      wo.policy = parse_policy(policy);
      Window w = engine->new_window(wo);
      w.add_turn(lead);
      Made out;
      const Plan plan = w.plan_admit(chunk);
      CHECK(plan.count(StepAction::kRecompute) == 1);
      {
        ForwardPieces pieces(size, [&] { ++out.between; });
        const Result<ApplyReport> r = w.apply(plan);
        REQUIRE(r.is_ok());
        out.plan = plan.describe();
      }
      out.logits = w.logits(query);
      out.forward_tokens = w.stats().critical_forward_tokens;
      return out;
    };
    CAPTURE(policy);
    const Made whole = admitted(0);
    for (const int64_t size : {int64_t{1}, int64_t{16}, int64_t{50}}) {
      CAPTURE(size);
      const Made pieces = admitted(size);
      CHECK(pieces.between == (recomputed + size - 1) / size - 1);  // the old code recomputes them in one forward
      CHECK(pieces.plan == whole.plan);
      CHECK(pieces.forward_tokens == whole.forward_tokens);
      const double gap = max_gap(pieces.logits, whole.logits);
      CAPTURE(gap);
      CHECK(gap <= test::kExactWindowTolerance);
    }
  }
}

}  // namespace ORBIT_TEST_FILE
