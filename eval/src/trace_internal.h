// Internals shared by the trace sources: deterministic generators and the window simulation that
// validation and make_trace() use (which chunks are in the window, evicted, which branches live).
#pragma once

#include <cstdint>
#include <ext/pb_ds/assoc_container.hpp>
#include <ext/pb_ds/tree_policy.hpp>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "orbit/trace.h"

namespace orbit::trace_detail {

// The per-instance losses of `steps` (ReplayOptions::attribute) grouped by served_as(), most instances first.
std::vector<LossAgreement> loss_agreement(const std::vector<StepResult>& steps);

// A stable default seed for a name (FNV-1a, shifted into int64 range).
uint64_t name_seed(const std::string& name);

// splitmix64: the same stream on every platform and standard library (std::*_distribution is not).
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t next();
  int64_t below(int64_t n);  // uniform in [0, n), n >= 1
  double uniform();          // [0, 1)
  double normal();           // N(0, 1), Box-Muller

 private:
  uint64_t state_;
};

// `count` ids uniform in [3, vocab) (0..2 are BOS/EOS-like specials in llama2.c vocabularies).
std::vector<int64_t> random_tokens(int64_t count, uint64_t seed, int64_t vocab);
// rows × hidden floats, N(0, std²).
std::vector<float> random_embeddings(const EmbeddingSource& source, int64_t hidden);

// Tokens a source yields at most (sampling may stop early at the position limit).
int64_t source_tokens(const TokenSource& source);
int64_t chunk_tokens(const TraceChunk& chunk);

struct SimItem {
  bool turn = false;
  std::string chunk;   // chunk name (chunks)
  int64_t tokens = 0;  // upper bound
};

// The names of a branch's evicted chunks, in order, shared with its forks until one of them changes them: a fork
// copies a pointer, not every chunk evicted so far (forking each step of a long trace was quadratic in its
// length). An order-statistics tree, so a generator picks the k-th name with a prefix without listing them.
class EvictedNames {
 public:
  using Tree = __gnu_pbds::tree<std::string, __gnu_pbds::null_type, std::less<std::string>, __gnu_pbds::rb_tree_tag,
                                __gnu_pbds::tree_order_statistics_node_update>;
  std::size_t count(const std::string& name) const { return names_ && names_->find(name) != names_->end() ? 1 : 0; }
  void insert(const std::string& name) {
    if (!count(name)) own().insert(name);
  }
  void erase(const std::string& name) {
    if (count(name)) own().erase(name);
  }
  const Tree& names() const { return names_ ? *names_ : empty(); }
  // How many names start with `prefix`, and the k-th of them in order (k below that count).
  std::size_t count_prefixed(const std::string& prefix) const;
  const std::string& prefixed(const std::string& prefix, std::size_t k) const;

 private:
  Tree& own();
  static const Tree& empty();
  std::shared_ptr<Tree> names_;
};

struct SimBranch {
  std::vector<SimItem> items;  // window order
  EvictedNames evicted;
  std::string parent;  // "" for main
  // After `place` the chunk order depends on the policy's stored patches, so `items` keeps the order
  // before it and slide (which evicts by window order) is refused until a reorder fixes the order.
  int64_t placed_at = -1;  // the step of that place, or -1 when the order is known
};

// The window as a trace drives it, without a model. apply() throws orbit::Error naming the file, the
// step index and op, and the field for a step that cannot apply to the simulated state.
class TraceSim {
 public:
  explicit TraceSim(const Trace& trace);
  void apply(const TraceStep& step, std::size_t index);
  // How many tokens a token source yields; default source_tokens (an upper bound for text). make_trace
  // sets the model's tokenizer here so its generated windows use the model's positions exactly.
  void set_counter(std::function<int64_t(const TokenSource&)> count) { count_ = std::move(count); }

  const std::string& current_name() const { return current_; }
  const SimBranch& current() const { return branches_.at(current_); }
  const std::map<std::string, SimBranch>& branches() const { return branches_; }
  int64_t tokens() const;  // the current window, upper bound
  int64_t turns() const;
  std::vector<std::string> chunks_in_window() const;  // window order
  // The trace's chunk `name` (nullptr when absent), by an index of its chunks extended as they are appended
  // (Trace::find_chunk scans them all: make_trace looked one up per step).
  const TraceChunk* chunk(const std::string& name) const;

 private:
  const Trace& trace_;
  std::map<std::string, SimBranch> branches_;
  std::string current_ = "main";
  std::function<int64_t(const TokenSource&)> count_;
  mutable std::unordered_map<std::string, std::size_t> chunk_at_;  // name -> index in trace_.chunks
  mutable std::size_t indexed_ = 0;                                // chunks indexed so far
  int64_t count(const TokenSource& source) const { return count_ ? count_(source) : source_tokens(source); }
  int64_t count(const TraceChunk& chunk) const { return chunk.embeddings ? chunk.media.rows() : count(chunk.tokens); }
};

}  // namespace orbit::trace_detail
