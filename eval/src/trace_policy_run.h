// One policy's replay (replay(), trace_replay.cpp): a fresh Engine holding the trace's chunks, a window per
// branch, every step planned, applied and timed (critical apart from background), checked against a
// re-prefill of the same window, and run beside the prefix-cache yardsticks. The trace's operations are in
// trace_policy_run.cpp; a step's accounting, probe and idle time in trace_policy_step.cpp.
#pragma once

#include <chrono>
#include <cstddef>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "orbit/trace.h"
#include "trace_replay_parts.h"
#include "trace_yardstick.h"

namespace orbit::trace_detail {

// Tokens appended at `generate … append` steps, fixed by the first policy replayed.
using Transcript = std::map<std::size_t, std::vector<int64_t>>;

class PolicyRun {
 public:
  // writes_transcript: this run's answers become the transcript every later run appends.
  PolicyRun(const Trace& trace, const Resolved& resolved, const ReplayOptions& options, const WindowPolicy& policy,
            Transcript* transcript, bool writes_transcript);

  // Every step in order; throws orbit::Error naming the file, the step, its op and the policy.
  PolicyReplay run(std::size_t policy_index, std::size_t policy_count);

 private:
  using Clock = std::chrono::steady_clock;

  struct Branch {
    Window window;
    std::string parent;
    // Why the window lacks an item the trace counts in it (an admit, recall or turn the window refused, here or
    // in the branch it forked from); "" none. The trace's positions (slide's count, evict's turn index) then
    // name other items than the trace means, so such steps are refused instead of applied to them.
    std::string diverged;
  };

  Window& current() { return branches_.at(current_).window; }

  // ---- the trace's operations (trace_policy_run.cpp) ----
  InstanceId instance_of(const std::string& name);
  // Remembers why a chunk did not enter the window, so a later step naming it says so.
  void note_refusal(const std::string& chunk, std::size_t index, const StepResult& r);
  // Marks the current branch diverged (Branch::diverged) when the step that adds an item was refused.
  void note_divergence(std::size_t index, const StepResult& r);
  // Throws naming `field` when the current branch diverged: a position in the trace names no item of it.
  void check_positions(const char* field);
  InstanceId evicted_instance(const TraceStep& s);
  std::vector<InstanceId> reordered(const TraceStep& s);
  void fork_branch(const TraceStep& s, std::size_t i, StepResult* r);
  void end_branch(const TraceStep& s);
  // Decodes; with `append`, adds the query and the answer (the transcript's, when another policy wrote it)
  // as a turn. Returns whether the window changed.
  bool generate(const TraceStep& s, std::size_t i, const std::vector<int64_t>& query, StepResult* r);
  void disposable(const TraceStep& s, std::size_t i, const std::vector<int64_t>& query, StepResult* r);
  // The step's operation on the current window; returns whether it changed the window.
  bool run_op(const TraceStep& s, std::size_t i, const std::vector<int64_t>& query, StepResult* r);

  // ---- a step's accounting (trace_policy_step.cpp) ----
  // Applies a plan: records cost and demands into r. False when the window refused it.
  void apply(const Plan& plan, std::size_t index, StepResult* r);
  // Runs the repairs earlier edits deferred as a plan of their own, before an operation that reads the window
  // (fork, generate, disposable): the window would run the same plan itself, but this way --explain shows it and
  // the step records its predicted KL.
  void flush_deferred(std::size_t index, StepResult* r);
  // The agent's idle time after a model call (the tool it asked for runs): Window::idle (heal, prepared
  // recalls), counted as the step's background. After the step's probe, which measures what the model read.
  void use_idle_time(StepResult* r);
  // The step's counters (critical: before the background runs) and the window after it.
  void account(const EngineStats& before, Clock::time_point t0, StepResult* r);
  StepResult step(std::size_t i);

  const Trace& trace_;
  const Resolved& resolved_;
  const ReplayOptions& options_;
  WindowPolicy policy_;
  Transcript* transcript_;
  bool writes_transcript_;
  std::shared_ptr<Engine> engine_;
  ModelInfo info_;
  std::map<std::string, ChunkRef> refs_;
  std::map<std::string, Branch> branches_;
  std::map<std::string, std::string> refusals_;  // chunk name -> why its last admit/recall was refused
  std::string current_ = "main";
  int64_t peak_ = 0;
  DemandLog demands_;
  std::string fidelity_model_;
  ReplayYardstick yardstick_;
};

}  // namespace orbit::trace_detail
