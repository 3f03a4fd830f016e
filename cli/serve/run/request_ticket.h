// What RequestPath's two halves share of a prepared request (request_path.cpp prepares it, request_run.cpp
// runs it). Private to the request path.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "serve/run/request_path.h"

namespace orbit::serve {

// What the sync under the gate leaves for the decode (RequestPath::sync_chat).
struct RequestPath::ChatSync {
  WindowStats before;  // the window's stats before the sync: the usage counts from there
  SyncReport report;
  double predicted_kl = 0;  // of the repairs the sync deferred, run at once (0 when healed)
  ServingMode mode;         // sessions_.serving: exact (healed) and audited or not
};

// What a completion's admit leaves for its decode (RequestPath::admit_first).
struct RequestPath::CompletionAdmit {
  Window window;       // the completion's own, its prompt but the last token admitted
  WindowStats before;  // the window's stats before the admit: the usage counts from there
};

// What run() needs of a prepared request: a chat request's window, options and plan, or a completion
// request's tokens.
struct RunTicket::Prepared {
  const ChatRequest* chat = nullptr;  // set for a chat request
  WindowSlot slot;
  SyncOptions options;
  SyncPlan plan;  // Window::plan_sync(chat->messages, options) of slot's window at its current version
  std::shared_ptr<const Constraint> constraint;  // what the answer must match; null: free text
  std::string trigger;                           // non-empty: the constraint applies from this text on
  TriggerBlock trigger_block;                    // where the trigger does not count (decode.h's DecodeRequest)
  bool calls_whole = false;                      // AnswerConstraint::calls_whole
  bool in_reasoning = false;  // under a reasoning parser, the answer begins inside the reasoning (reasoning.h)
  std::optional<RequestPath::ChatSync> synced;  // the sync ran (RequestPath::sync_ahead, or run): decode next
  bool left = false;                            // the client left before the sync's (or admit's) turn
  bool replan = false;  // a sync was refused for the pool and waits: `plan` may be stale, the next one plans anew
  const CompletionRequest* completion = nullptr;  // set for a completion request
  std::vector<int64_t> tokens;                    // its prompt, tokenized with BOS (non-empty)
  // Its sampling, max_tokens given or ServeOptions::default_completion_max_tokens (within the context).
  SamplingRequest completion_sampling;
  // The completion's window counted as a request's (declared before `admitted`: released once it is closed).
  SessionTable::OutsideHold held;
  std::optional<RequestPath::CompletionAdmit> admitted;  // its admit ran (sync_ahead, or run): decode next
};

// The prompt a chat request reads: the rendering's tokens and the generation prompt after them.
inline int64_t prompt_tokens(const SyncPlan& plan) {
  return static_cast<int64_t>(plan.tokens.size() + plan.generation_prompt.size());
}

}  // namespace orbit::serve
