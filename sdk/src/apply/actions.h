// Serving actions (docs/ARCHITECTURE.md §4), their apply half: the forwards and store reads that make an
// instance's KV as the plan's step says (PlanStep::how, one ServeActionId). The planning half, and the list of
// actions, is serve_actions.h (torch-free).
//
// apply_action(ApplyInput, step) makes the KV from the step alone (never from the window's policy). When what
// the plan counted on is gone by then (a patch or conditioned KV dropped from the store between plan and
// apply), it falls back to a forward in context and says so (ApplyOutput::done_as).
#pragma once

#include <string>
#include <vector>

#include "plan/serve_actions.h"
#include "window/window_ops.h"
#include "window/window_state.h"

namespace orbit::detail {

// The window being built by apply(): entries made so far, in window order, and their KV as a past.
struct WindowBuild {
  EngineCore& core;
  std::vector<Entry> entries;
  std::vector<runtime::Content> contents;  // filled lazily for kept entries
  std::vector<int64_t> starts;             // each entry's first position
  std::vector<at::Tensor> positions;       // filled lazily from starts by past(): most applies run no forward
  int64_t next_position = 0;
  KvState chain;    // the KV-state chain over the entries built so far
  KvState content;  // their content chain

  explicit WindowBuild(EngineCore& c) : core(c) {}
  ~WindowBuild();  // destroys the entries under the pool lock
  WindowBuild(const WindowBuild&) = delete;
  WindowBuild& operator=(const WindowBuild&) = delete;

  runtime::PastKV past();  // the KV of every entry built so far, with positions
  std::vector<ContextItem> context() const;
  std::vector<InstanceId> context_ids() const;
  std::vector<std::string> context_keys() const;
};

struct ApplyInput {
  EngineCore& core;
  WindowBuild& build;
  const std::string* key = nullptr;  // the instance's content key
  const Entry* old = nullptr;
  const ChunkRecord* chunk = nullptr;
  const std::vector<int64_t>* turn_tokens = nullptr;
  int64_t length = 0;
  int64_t position = 0;
  std::size_t prefix = 0;  // leading turns among build.entries
};

struct ApplyOutput {
  runtime::Content content;                // the instance's new KV (content channel); empty with keep_pages
  bool keep_pages = false;                 // keep the old entry's pages (the keep action)
  bool conditioned = false;                // its KV saw its context (the dependency graph records the edge)
  StepAction done_as = StepAction::kKeep;  // what was done (differs from the plan on a fallback)
  double forward_tokens = 0;               // critical-path token-forwards
  int64_t patch_hits = 0;
  int64_t canonicals_encoded = 0;
  int64_t bytes_moved = 0;
  int64_t background_jobs = 0;
  double encode_tokens = 0;        // of forward_tokens: canonical encodes (counted by EngineCore::canonical)
  bool approximate_reuse = false;  // leading rows loaded from KV computed behind the same content only
};

// Makes the KV of the instance `step` plans into `out`, dispatching on step.how; throws on kEvict.
void apply_action(ApplyInput& in, const PlanStep& step, ApplyOutput& out);

}  // namespace orbit::detail
