// What the parts of ServeCore share (serve_core.h): the engine and its model, the options, the policy every
// window runs, the fair gate, the metrics and the decode batch. ServeCore owns one; the session table, the request path
// and the idle worker hold a reference to it.
//
// Thread-safety: every member may be used from any thread (Engine, FairGate, ServeMetrics and DecodeScheduler
// are thread-safe; the rest is set before the parts start and never changes, except `closing`).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "orbit/engine.h"
#include "orbit/tool_calls.h"
#include "serve/compute/compute_thread.h"
#include "serve/compute/decode_scheduler.h"
#include "serve/compute/fair_gate.h"
#include "serve/run/answer_constraint.h"
#include "serve/serve_metrics.h"
#include "serve/serve_types.h"
#include "serve/sessions/audit.h"

namespace orbit::serve {

struct ServeContext {
  // Opens the engine (throws orbit::Error naming the model or option at fault): background work deferred,
  // run by the idle worker only while no request waits.
  explicit ServeContext(const ServeOptions& options);

  ServeOptions options;
  std::string model_name;  // options.model_name, else the model path's last component
  std::shared_ptr<Engine> engine;
  ModelInfo info;
  WindowPolicy policy;  // every window's
  ChatOptions chat;     // every request's template (options.chat_template) before its tools
  ToolCallFormat tool_format = ToolCallFormat::kHermes;  // how answers' tool calls are read (and forced)
  std::unique_ptr<ConstraintCache> constraints;          // forced calls and JSON answers, in tool_format
  FairGate gate;
  ServeMetrics metrics;
  Auditor auditor;                   // options.audit_rate's fidelity audits (audit.h)
  std::atomic<bool> closing{false};  // close() has begun: checks answer 503
  ComputeThread compute;             // where requests' forwards run (compute_thread.h)
  // Where a guest sync's forwards run (FairGate::yield_to_guest): the compute thread is blocked meanwhile in the
  // yield of the sync it came between the pieces of. One more OpenMP team, used only then.
  ComputeThread guest_compute;
  // Continuous batching: every run's decode steps in one batch, one forward per step (decode_scheduler.h).
  // Last, so it stops (its thread joined) before the parts it uses go.
  DecodeScheduler decoder{*this};

  Window new_window() const;
  // Waits for the gate on `lane` and counts the wait in the metrics; false: cancelled or closed. `guest_tokens`:
  // FairGate::enter's.
  bool enter_gate(const std::string& lane, const std::function<bool()>& cancelled,
                  int64_t guest_tokens = FairGate::kNoGuest);
};

// The gate for a scope, on one lane: enter() waits for it (counting the wait), leave() gives it back, and
// the destructor gives it back when it is still held. `guest_tokens` >= 0 offers the turn as a guest between
// the pieces of another lane's sync (FairGate::enter). One thread only.
class GateTurn {
 public:
  GateTurn(ServeContext& context, std::string lane, std::function<bool()> cancelled,
           int64_t guest_tokens = FairGate::kNoGuest)
      : context_(context), lane_(std::move(lane)), cancelled_(std::move(cancelled)), guest_tokens_(guest_tokens) {}
  ~GateTurn() { leave(); }
  GateTurn(const GateTurn&) = delete;
  GateTurn& operator=(const GateTurn&) = delete;

  bool enter() { return held_ = context_.enter_gate(lane_, cancelled_, guest_tokens_); }  // false: cancelled, closed
  void leave() {
    if (held_) context_.gate.leave();
    held_ = false;
  }
  bool held() const { return held_; }

 private:
  ServeContext& context_;
  std::string lane_;
  std::function<bool()> cancelled_;
  int64_t guest_tokens_;
  bool held_ = false;
};

}  // namespace orbit::serve
