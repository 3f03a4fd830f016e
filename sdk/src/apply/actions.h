// Serving actions (docs/ARCHITECTURE.md §4), their apply half: what to read, forward, store and queue to make
// an instance's KV as the plan's step says (PlanStep::how, one ServeActionId), done through an ApplyEnv
// (apply_env.h). The planning half, and the list of actions, is plan/serve_actions.h. Both are torch-free:
// the decisions here are tested without a model (tests/cpp/test_apply_decisions.cpp).
//
// apply_action(ApplyInput, step) makes the KV from the step alone (never from the window's policy). When what
// the plan counted on is gone by then (a patch or conditioned KV dropped from the store between plan and
// apply), it falls back to a forward in context and says so (ApplyOutput::done_as).
#pragma once

#include "apply/apply_env.h"
#include "plan/serve_actions.h"

namespace orbit::detail {

struct ApplyInput {
  ApplyEnv& env;
  ApplyTarget target;
};

struct ApplyOutput {
  Kv content;                              // the instance's new KV (content channel); null with keep_pages
  bool keep_pages = false;                 // keep the old entry's pages (the keep action)
  bool conditioned = false;                // its KV saw its context (the dependency graph records the edge)
  StepAction done_as = StepAction::kKeep;  // what was done (differs from the plan on a fallback)
  double forward_tokens = 0;               // critical-path token-forwards
  int64_t patch_hits = 0;
  int64_t canonicals_encoded = 0;
  int64_t bytes_moved = 0;
  int64_t background_jobs = 0;
  int64_t patches_queued = 0;  // of background_jobs: patch formations (not a turn's sensitivity measurement)
  double encode_tokens = 0;    // of forward_tokens: canonical encodes (counted by KvStore::canonical)
  // Leading rows loaded from KV computed behind the same content only, or (PlanStep::reused_formed_window) at
  // another window length: the entry's state is its own and it is not stored for exact reuse.
  bool approximate_reuse = false;
};

// Makes the KV of the instance `step` plans into `out`, dispatching on step.how; throws on kEvict.
void apply_action(ApplyInput& in, const PlanStep& step, ApplyOutput& out);

}  // namespace orbit::detail
