// Decoding several sequences together: one model forward per step over every sequence still running
// (runtime::Model::forward_batch), each sequence a window, the query read after it and its own
// GenerateOptions, exactly as Window::generate would decode it alone (Window::generate is the batch of one).
//
//   orbit::DecodeBatch batch;                        // continuous batching: sequences join between steps
//   const uint64_t a = batch.add({&w1, query1, options1});
//   const uint64_t b = batch.add({&w2, query2, options2});
//   while (!batch.empty()) {
//     for (auto& [id, generation] : batch.step().finished) ...   // one forward over a and b
//   }
//
// or at once: std::vector<Generation> g = orbit::generate_many({{&w1, q1, o1}, {&w2, q2, o2}});
//
// A sequence's first step forwards its query (a prefill of its tokens, ragged beside the others' single
// decode tokens), each later step its last token. Every window's KV is read once per round of additions:
// sequences added between two steps whose windows hold equal KV (the same KV-state chain: the same window
// twice, or a window and its forks) share one read of it, and those with the same query too share the
// query's forward (Generation::prompt_forward_tokens counts it once, for the first). Each sequence keeps
// only its own rows after that: a copy-on-write branch.
//
// What a sequence does besides its forwards is what Window::generate does: the window's deferred repairs
// run at add(); GenerateOptions' callbacks run on the thread that calls step(), in the order the sequences
// were added; at its end the query's and answer's KV is kept for exact reuse (WindowPolicy::reuse_computed:
// the answer's last token forwarded for every sequence ending in a step, again in one forward) and the
// radix yardstick is charged, per window.
//
// Thread-safety: a DecodeBatch is used by one thread at a time. A window with a running sequence must not be
// used (or destroyed) by any thread until that sequence has finished; the same window may run several
// sequences at once. Every window of one batch belongs to one engine.
#pragma once

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "orbit/window.h"

namespace orbit {

namespace detail {
struct DecodeBatchState;
}  // namespace detail

// One sequence to decode: the window, the query read after it and the options (as Window::generate).
struct GenerateRequest {
  const Window* window = nullptr;
  std::vector<int64_t> query;
  GenerateOptions options;
};

// What one DecodeBatch::step did.
struct DecodeStep {
  std::vector<std::pair<uint64_t, Generation>> finished;  // (id from add, its result), in order of addition
  int64_t sequences = 0;  // sequences in the step's forward (a shared query forward counts once)
  int64_t tokens = 0;     // tokens forwarded (queries and decode tokens), the answer-keeping forward excluded
};

class DecodeBatch {
 public:
  DecodeBatch();
  ~DecodeBatch();
  DecodeBatch(DecodeBatch&&) noexcept;
  DecodeBatch& operator=(DecodeBatch&&) noexcept;
  DecodeBatch(const DecodeBatch&) = delete;
  DecodeBatch& operator=(const DecodeBatch&) = delete;

  // Adds a sequence; it runs from the next step on. Checks as Window::generate does (the query, the options;
  // throws orbit::Error naming the field, adding nothing), then runs the window's deferred repairs (throws
  // when they cannot run: the pool is full). Also throws for a null window or one of another engine than the
  // batch's. Returns the sequence's id (unique in this batch).
  uint64_t add(const GenerateRequest& request);

  // One forward over every running sequence, each getting one token (or ending: a stop token, a stop string,
  // max_tokens, the model's positions, its constraint, a callback that returned false). Sequences that end without
  // needing a forward (max_tokens 0, no room left) end here too. Throws orbit::Error when the engine fails (closed, a
  // full pool while keeping answers): every sequence of the batch is then dropped, unfinished.
  DecodeStep step();

  // Holds sequence `id` (true) or releases it (false): a held sequence takes no part in step() (no forward,
  // no token, no end) and keeps its slot, its rows and its place; released, it goes on at the next step as
  // if it had never stopped. So a caller that cannot take a sequence's tokens yet (a server whose client
  // stopped reading) pauses it while the others decode. Throws orbit::Error for an id not running.
  void hold(uint64_t id, bool held);

  int64_t size() const;  // sequences added and not yet finished
  bool empty() const { return size() == 0; }

 private:
  std::unique_ptr<detail::DecodeBatchState> state_;
};

// The most requests one generate_many call takes: Window::kMaxGenerateN, the n generate_n (a generate_many over
// n forks) takes. Every request is a sequence of the one batch, all added before the first step: each holds
// its copy of the query and options, a sampler and text stream, and from its first forward a slot of the
// batch's DecodeCache that grows by a KV row per layer and step; the first step forwards every query at once.
constexpr int64_t kMaxGenerateMany = Window::kMaxGenerateN;

// Decodes every request together (a DecodeBatch run until it is empty); results in request order. Throws
// orbit::Error "generate_many: requests: ..." for more than kMaxGenerateMany requests, before adding any.
std::vector<Generation> generate_many(const std::vector<GenerateRequest>& requests);

}  // namespace orbit
