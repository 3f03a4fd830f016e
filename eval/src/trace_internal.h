// Internals shared by the trace sources: deterministic generators and the window simulation that
// validation and make_trace() use (which chunks are in the window, evicted, which branches live).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
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

struct SimBranch {
  std::vector<SimItem> items;  // window order
  std::set<std::string> evicted;
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

 private:
  const Trace& trace_;
  std::map<std::string, SimBranch> branches_;
  std::string current_ = "main";
  std::function<int64_t(const TokenSource&)> count_;
  int64_t count(const TokenSource& source) const { return count_ ? count_(source) : source_tokens(source); }
  int64_t count(const TraceChunk& chunk) const { return chunk.embeddings ? chunk.media.rows() : count(chunk.tokens); }
};

}  // namespace orbit::trace_detail
