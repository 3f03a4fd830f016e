// PatchCatalog: what the engine knows of the patches (and stored conditioned KV) formed for each chunk:
// the context each was formed under, as content keys and as token weights (for stale lookups with a
// divergence score), whether it is exact, its residual and sensitivity once formed; and per chunk the mean
// sensitivity of its known patches (formed here or read from the store), kept current so that planning
// reads it with one lookup. In memory only, rebuilt as patches are formed and read.
//
// Bounded, as the store it describes is: a chunk keeps its newest max_per_chunk patch records and the
// sensitivities of its newest max_per_chunk patches (its mean is theirs), and the catalog as a whole about
// max_bytes (16 MiB by default: some 15,000 chunks, each with a patch formed under three keys; counted as
// glibc's heap blocks hold them, within 1% of the heap it grew by in test_patch_catalog); past that,
// the chunks used least recently (added, formed, read or looked up) are forgotten whole. A forgotten chunk
// reads as one whose patches another process formed: an exact or orbit patch still in the store is found
// there by its key (its residual unknown: the planner's stand-in), a stale lookup finds none of its patches,
// and its sensitivity reads as unknown until a patch of it is formed or read again. So a long-running
// server's distinct chunks do not grow it.
//
// Thread-safety: every method may be called from any thread; one mutex of its own guards all of it, and
// no method calls out while holding it. Plain numbers in and out (no tensors, no runtime types).
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
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
  // A further store key of the formation recorded just before it (its orbit key): the same context and facts, so
  // stale lookups and the patch directory skip it (they count formations); facts() still finds it.
  bool alias = false;
  double residual = -1;     // runtime::Patch::residual once formed (-1: not yet formed, or unknown)
  double sensitivity = -1;  // runtime::Patch::sensitivity once formed (-1: not yet formed, or unknown)
  int64_t rank_k = 0;       // the factors' ranks, as resolved for the chunk (PatchForm's; 0: conditioned KV)
  int64_t rank_v = 0;
};

// What a stale lookup accepts: patches of `variant` whose factors keep at least these ranks (a lower-rank
// patch leaves out more of the deficit than the plan that asks for these ranks prices).
struct PatchShape {
  std::string variant;
  int64_t rank_k = 0;
  int64_t rank_v = 0;
};

class PatchCatalog {
 public:
  static constexpr std::size_t kDefaultMaxBytes = std::size_t{16} << 20;
  static constexpr std::size_t kDefaultMaxPerChunk = 64;
  // max_bytes: what the catalog's records and sensitivities may take, about (>= 1); max_per_chunk: the
  // records, and the sensitivities, one chunk keeps (>= 1; the planner compares a chunk's newest 16 patches).
  explicit PatchCatalog(std::size_t max_bytes = kDefaultMaxBytes, std::size_t max_per_chunk = kDefaultMaxPerChunk);

  // Adds `record` to the chunk's patches unless one with its key is there already. `context_lengths[i]` is
  // the token length of record.context[i] (context_tokens and context_total are filled from them). A record
  // with no context keys but context_tokens (one read back from a patch directory) is kept as given.
  void add(const std::string& chunk_key, PatchRecord record, const std::vector<double>& context_lengths);
  // The chunk's newest `newest` patches formed as factors (residual known), oldest first: what its patch
  // directory in the store keeps (engine/patch_directory.h).
  std::vector<PatchRecord> formed_records(const std::string& chunk_key, std::size_t newest) const;
  // True the first time it is asked for a chunk since the catalog learned of it (or forgot it): the time to
  // read the chunk's patch directory from the store.
  bool claim_directory(const std::string& chunk_key);
  // Records the residual and sensitivity of the patch now stored under `keys` (one formation, however many
  // keys it is stored under); a negative sensitivity is not counted in the chunk's mean.
  void set_formed(const std::string& chunk_key, const std::vector<std::string>& keys, double residual,
                  double sensitivity);
  // Counts the sensitivity of a patch read from the store (formed by another process, or before this engine
  // opened the store) in the chunk's mean, unless it was formed here (counted then); no-op when negative.
  void note_read(const std::string& chunk_key, const std::string& patch_key, double sensitivity);

  // Whether the patch was formed full-rank over an exact context, its residual and its sensitivity (each -1
  // until formed, or unknown); nullopt when the chunk has no patch under that key.
  struct Facts {
    bool exact = false;
    double residual = -1;
    double sensitivity = -1;
  };
  std::optional<Facts> facts(const std::string& chunk_key, const std::string& patch_key) const;

  // The chunk's newest `max_records` patches of `shape` (factors, not conditioned KV), each with the
  // divergence of its context from `context` (key hash → tokens, summing to `context_total`): 1 − Σ min / Σ
  // max over the two multisets of keys weighted by tokens (0 = the same set, 1 = disjoint). Closest first,
  // the newest first on a tie.
  struct Candidate {
    std::string key;
    double divergence = 1;
    int64_t rank_k = 0;  // the ranks its factors keep (at least the asked ones)
    int64_t rank_v = 0;
  };
  std::vector<Candidate> closest(const std::string& chunk_key, const PatchShape& shape,
                                 const std::unordered_map<uint64_t, double>& context, double context_total,
                                 std::size_t max_records) const;

  // The mean sensitivity of the chunk's known patches (or a turn's measured one); -1 when it knows none.
  double sensitivity(const std::string& chunk_key) const;
  // A sensitivity measured without a patch (a live turn's, EngineCore::queue_turn_sensitivity).
  void record_measured_sensitivity(const std::string& key, double sensitivity);
  // The largest sensitivity of any chunk's patch this catalog has recorded (formed or read), forgotten
  // chunks' included: the worst case measured on this engine's model, the prior for a chunk nothing has
  // measured yet (PlanEnv::sensitivity_prior); -1 before any. Turns' measured ones are not counted.
  double worst_patch_sensitivity() const;

  // What it holds: chunks (or turns) known, their records, and the bytes they take (about).
  std::size_t chunks() const;
  std::size_t records() const;
  std::size_t bytes() const;
  std::size_t max_bytes() const { return max_bytes_; }

 private:
  struct Chunk {
    std::vector<PatchRecord> records;                           // oldest first
    std::vector<std::pair<std::string, double>> sensitivities;  // by patch key, oldest first
    double mean = -1;                                           // of `sensitivities`
    bool directory_claimed = false;                             // claim_directory
    std::size_t bytes = 0;                                      // charged for it in bytes_
    std::list<std::string>::iterator at;                        // its place in recency_
  };
  // The chunk's entry, made the most recently used (created when `create`; else null when unknown).
  Chunk* use(const std::string& chunk_key, bool create) const;
  // Adds a patch's sensitivity to its chunk's mean.
  void record_sensitivity(Chunk& chunk, const std::string& patch_key, double sensitivity);
  // Charges the chunk's new size and forgets the least recently used chunks (not `keep`) past max_bytes_.
  void settle(Chunk& keep);

  std::size_t max_bytes_;
  std::size_t max_per_chunk_;
  mutable std::mutex mu_;
  mutable std::unordered_map<std::string, Chunk> chunks_;
  mutable std::list<std::string> recency_;  // chunk keys, most recently used first
  mutable std::size_t bytes_ = 0;           // Σ the chunks' charged bytes
  std::size_t records_ = 0;                 // Σ the chunks' records
  double worst_patch_ = -1;                 // worst_patch_sensitivity()
};

}  // namespace orbit::detail
