// ApplyEnv: what applying a plan's step needs from the engine, behind one interface, as PlanEnv
// (plan/plan_env.h) is for planning it. The serving actions' apply halves (actions.h) decide from the step
// alone what to read, forward, store and queue; an ApplyEnv does it: the engine's (EngineApplyEnv,
// engine_apply_env.h) over the model, the store and the window being built, or a fake in tests
// (tests/cpp/test_apply_decisions.cpp), which run the decisions without a model or torch.
//
// Torch-free: KV crosses this interface as Kv, an opaque handle to one instance's rows of the content
// channel (every layer's K and V), which only the implementation can read.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "plan/kv_state.h"
#include "plan/patch_catalog.h"
#include "plan/plan_env.h"
#include "plan/window_meta.h"

namespace orbit::detail {

// Rows of KV (content channel) an action read or made, opaque to the actions.
class KvRows {
 public:
  virtual ~KvRows() = default;
  virtual int64_t rows() const = 0;   // tokens
  virtual int64_t bytes() const = 0;  // what reading them moved
};
using Kv = std::shared_ptr<const KvRows>;

// The instance a step serves, at the next position of the window being built.
struct ApplyTarget {
  std::string key;                                    // its content key
  ChunkPtr chunk;                                     // a chunk, or null for a live turn
  const std::vector<int64_t>* turn_tokens = nullptr;  // a live turn's tokens
  int64_t length = 0;                                 // tokens (or embedding rows)
  int64_t position = 0;                               // its first position
  bool has_old = false;                               // the window holds it already (its pages can be kept)
  // Its token ids (a turn's or a token chunk's); null for an embedding chunk.
  const std::vector<int64_t>* tokens() const {
    if (chunk == nullptr) return turn_tokens;
    return chunk->ref.kind == ChunkKind::kTokens ? &chunk->tokens : nullptr;
  }
};

// A patch to form in the background from a first sight's conditioned KV, and where to store it.
struct FormJob {
  ChunkPtr chunk;
  Kv conditioned;  // KV(B|C)
  PatchForm form;
};

// What reading a chunk's canonical did (ApplyEnv::canonical).
struct CanonicalRead {
  Kv kv;                         // its rows (a placement of the canonical, for the engine's env)
  bool encoded = false;          // not in the store: made now (and stored)
  int64_t forwarded_tokens = 0;  // tokens the encode forwarded: 0 for a read, at most the chunk's length
  int64_t bytes_read = 0;        // what the read moved (the canonical, or an encode's loaded leading rows)
};

class ApplyEnv {
 public:
  virtual ~ApplyEnv() = default;

  // ---- the window being built (the entries served so far, in window order) ----
  virtual bool context_empty() const = 0;
  virtual std::vector<std::string> context_keys() const = 0;
  virtual KvState chain() const = 0;      // the KV-state chain over them
  virtual ModelLimits model() const = 0;  // widths (a patch's full rank)

  // ---- stored values ----
  // The chunk's canonical: from the store, else encoded and stored (CanonicalRead says which, and what
  // the encode forwarded: its tokens after the leading run loaded from KV stored behind nothing).
  virtual CanonicalRead canonical(const ChunkRecord& chunk) = 0;
  // `canonical` with the patch stored under `patch_key` applied; nullopt when the store no longer holds it.
  // *patch_bytes: the patch's size.
  virtual std::optional<Kv> patched(const ChunkRecord& chunk, const Kv& canonical, const std::string& patch_key,
                                    int64_t* patch_bytes) = 0;
  // KV stored under `store_key` (conditioned KV, or KV stored for exact reuse); nullopt when absent.
  virtual std::optional<Kv> conditioned(const std::string& store_key) = 0;
  virtual void put_conditioned(const Kv& kv, const std::string& chunk_key, PatchRecord record) = 0;

  // ---- forwards (critical path) ----
  // The instance forwarded in context, behind the window built so far.
  virtual Kv forward(const ApplyTarget& target) = 0;
  // The first `rows` rows of `kv`.
  virtual Kv leading_rows(const Kv& kv, int64_t rows) = 0;
  // The instance with its leading head->rows() rows given (loaded KV) and the rest of its tokens forwarded
  // behind the build and them; all its rows.
  virtual Kv forward_rest(const ApplyTarget& target, const Kv& head) = 0;
  // `canonical` with `count` of its tokens recomputed in context: the first ones (EPIC), or the ones whose
  // KV deviates most (CacheBlend, selective: *probe_tokens then says what choosing them cost).
  virtual Kv recompute(const ApplyTarget& target, const Kv& canonical, int64_t count, bool selective,
                       double* probe_tokens) = 0;

  // ---- background work ----
  virtual void queue_form(FormJob job) = 0;
  // A live turn's sensitivity, measured from its KV in context (a background forward of it alone).
  virtual void queue_turn_sensitivity(const std::string& key, const std::vector<int64_t>& tokens,
                                      const Kv& conditioned) = 0;
};

}  // namespace orbit::detail
