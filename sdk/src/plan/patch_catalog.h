// PatchCatalog: what the engine knows of the patches (and stored conditioned KV) formed for each chunk:
// the context each was formed under, as content keys and as token weights (for stale lookups with a
// divergence score), whether it is exact, its residual and sensitivity once formed; and per chunk the mean
// sensitivity of its known patches (formed here or read from the store), kept current so that planning
// reads it with one lookup. In memory only, rebuilt as patches are formed and read.
//
// Thread-safety: every method may be called from any thread; one mutex of its own guards all of it, and
// no method calls out while holding it. Plain numbers in and out (no tensors, no runtime types).
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace orbit::detail {

// A patch (or stored conditioned KV) as the catalog remembers it.
// A patch to form from a chunk's conditioned KV: the context it saw, where it is stored, its variant and ranks.
struct PatchForm {
  std::vector<std::string> context;     // ordered content keys of the context C
  std::vector<std::string> store_keys;  // exact key first, then the orbit key when new
  std::string variant;
  int64_t rank_k = 0;
  int64_t rank_v = 0;
  bool deep_only = false;
  double deep_energy = 0.9;
  bool full_rank = false;
  bool exact = false;  // formed over an exact context
};

struct PatchRecord {
  std::string key;
  std::vector<std::string> context;  // ordered content keys of the antecedents it was formed under
  // That context as (key hash, tokens), repeats merged (PatchCatalog::add fills it from the keys' lengths).
  std::vector<std::pair<uint64_t, double>> context_tokens;
  double context_total = 0;
  std::string variant;
  bool conditioned = false;  // whole conditioned KV (prefix-cache policy), not factors
  bool exact = false;        // full rank and formed over an exact context
  double residual = -1;      // runtime::Patch::residual once formed (-1: not yet formed, or unknown)
  double sensitivity = -1;   // runtime::Patch::sensitivity once formed (-1: not yet formed, or unknown)
};

class PatchCatalog {
 public:
  // Adds `record` to the chunk's patches unless one with its key is there already. `context_lengths[i]` is
  // the token length of record.context[i] (context_tokens and context_total are filled from them).
  void add(const std::string& chunk_key, PatchRecord record, const std::vector<double>& context_lengths);
  // Records the residual and sensitivity of the patch now stored under `keys` (one formation, however many
  // keys it is stored under); a negative sensitivity is not counted in the chunk's mean.
  void set_formed(const std::string& chunk_key, const std::vector<std::string>& keys, double residual,
                  double sensitivity);
  // Counts the sensitivity of a patch read from the store (formed by another process, or before this engine
  // opened the store) in the chunk's mean, unless it was formed here (counted then); no-op when negative.
  void note_read(const std::string& chunk_key, const std::string& patch_key, double sensitivity);

  // Whether the patch was formed full-rank over an exact context, and its residual (-1 until formed, or
  // unknown); nullopt when the chunk has no patch under that key.
  struct Facts {
    bool exact = false;
    double residual = -1;
  };
  std::optional<Facts> facts(const std::string& chunk_key, const std::string& patch_key) const;

  // The chunk's newest `max_records` patches of `variant` (factors, not conditioned KV), each with the
  // divergence of its context from `context` (key hash → tokens, summing to `context_total`): 1 − Σ min / Σ
  // max over the two multisets of keys weighted by tokens (0 = the same set, 1 = disjoint). Closest first,
  // the newest first on a tie.
  struct Candidate {
    std::string key;
    double divergence = 1;
  };
  std::vector<Candidate> closest(const std::string& chunk_key, const std::string& variant,
                                 const std::unordered_map<uint64_t, double>& context, double context_total,
                                 std::size_t max_records) const;

  // The mean sensitivity of the chunk's known patches (or a turn's measured one); -1 when it knows none.
  double sensitivity(const std::string& chunk_key) const;
  // A sensitivity measured without a patch (a live turn's, EngineCore::queue_turn_sensitivity).
  void record_measured_sensitivity(const std::string& key, double sensitivity);

 private:
  // Adds a patch's sensitivity to its chunk's mean (mu_ held).
  void record_sensitivity(const std::string& chunk_key, const std::string& patch_key, double sensitivity);

  mutable std::mutex mu_;
  std::unordered_map<std::string, std::vector<PatchRecord>> records_;
  // Per chunk key: the sensitivity of each patch formed here or read from the store (by patch key), and
  // their mean.
  struct Sensitivity {
    std::unordered_map<std::string, double> by_patch;
    double mean = -1;
  };
  std::unordered_map<std::string, Sensitivity> sensitivity_;
  // Keys record_measured_sensitivity added (live turns), oldest first: the kMaxMeasured newest are kept (an
  // older turn is measured again if it comes back), so distinct turns do not grow the catalog without bound.
  static constexpr std::size_t kMaxMeasured = std::size_t{1} << 16;
  std::deque<std::string> measured_order_;
};

}  // namespace orbit::detail
