// The window's tentative tail (window_state.h, TentativeTail): what its last generate forwarded after it,
// tracked so that a heal carries it along (window_ops.h).
#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include <algorithm>

#include "orbit/runtime/reuse.h"
#include "plan/kv_state.h"
#include "window/window_ops.h"

namespace orbit::detail {

namespace {

// Whether the store holds KV for `tokens` computed behind `chain` (what keep_read_for_reuse puts there).
bool stored_behind(const WindowState& state, const std::vector<int64_t>& tokens, const KvState& chain) {
  return state.core->kv().contains(reuse_key(state.core->registry().turn_key(tokens), chain));
}

// Measures the sensitivity of the tail's tokens as a turn (‖KV in context − KV alone‖² / ‖KV in context‖², what
// a prefill-turn measures, PatchJobs::queue_turn_sensitivity) from `in_context`, their KV behind the window
// starting at position `start`, when the window's answers come back as turns of their own, a plan would price
// a keep by it (a KL budget, patches formed on a miss, a context before it) and none is recorded for that
// content. The carry replaces the prefill-turn that measured it: an answer appended as a turn after the carry
// is served by exact reuse, never forwarded, and a turn never measured is priced at the reference sensitivity,
// which can leave the window below the heal threshold where the measured one would not (the idle time after
// the next edit before the turn then leaves it approximate). Returns the tokens forwarded (0 or the tail's).
double measure_tail_sensitivity(const WindowState& state, const std::vector<int64_t>& tokens,
                                const runtime::Content& in_context, int64_t start) {
  const WindowPolicy& policy = state.options.policy;
  if (!state.answers_return_as_turns || !(policy.kl_budget > 0) || policy.on_miss != MissAction::kForm || start == 0) {
    return 0;
  }
  EngineCore& core = *state.core;
  const std::string key = core.registry().turn_key(tokens);
  if (core.kv().chunk_sensitivity(key) >= 0) return 0;  // measured already (this content, any window)
  runtime::ForwardOptions fo;
  fo.logits = runtime::LogitsMode::kNone;
  const runtime::Content alone = core.model().forward(core.registry().input_for_tokens(tokens, 0), nullptr, fo).content;
  core.kv().note_turn_sensitivity(key, runtime::deficit_share(runtime::deficit(in_context, alone), in_context));
  return static_cast<double>(tokens.size());
}

}  // namespace

void keep_tail(WindowState& state, const std::vector<int64_t>& query, const std::vector<int64_t>& answer) {
  state.tail.reset();
  if (!state.options.policy.reuse_computed || query.empty()) return;
  const KvState chain = state.state_chain();
  std::vector<int64_t> read = query;
  read.insert(read.end(), answer.begin(), answer.end());
  // The read forwarded its query at its own end, the window's length plus the query's.
  const int64_t formed = state.tokens() + static_cast<int64_t>(query.size());
  if (!answer.empty() && stored_behind(state, read, chain)) {
    state.tail = TentativeTail{std::move(read), chain, formed};
  } else if (stored_behind(state, query, chain)) {
    state.tail = TentativeTail{query, chain, formed};
  }
}

double carry_tail(WindowState& state, const KvState& before) {
  if (!state.tail.has_value() || state.tail->behind != before || !state.answers_return) return 0;
  const KvState chain = state.state_chain();
  if (chain == before) return 0;
  EngineCore& core = *state.core;
  const std::vector<int64_t>& tokens = state.tail->tokens;
  const int64_t n = static_cast<int64_t>(tokens.size());
  int64_t start = 0;
  const runtime::PastKV past = read_past(state, &start);
  const int64_t limit = core.max_positions();
  if (!state.options.policy.reuse_computed || (limit > 0 && start + n > limit)) {
    state.tail.reset();
    return 0;
  }
  c10::InferenceMode guard;
  const runtime::ForwardInput in = core.registry().input_for_tokens(tokens, start);
  runtime::ForwardOptions fo;
  fo.logits = runtime::LogitsMode::kNone;
  const runtime::ForwardResult r = core.model().forward(in, past.length() > 0 ? &past : nullptr, fo);
  core.kv().put_reusable(reuse_key(core.registry().turn_key(tokens), chain), r.content, chain, state.content_chain(),
                         tokens);
  state.tail->behind = chain;
  state.tail->formed_window = start + n;  // forwarded at once, at its own end
  const double forwarded = static_cast<double>(n) + measure_tail_sensitivity(state, tokens, r.content, start);
  Counters counted;  // idle time: background forwards
  counted.forward_tokens = forwarded;
  counted.background_forward_tokens = forwarded;
  core.usage().count(counted);
  state.forward_tokens += forwarded;
  return forwarded;
}

void settle_tail(WindowState& state) {
  if (!state.tail.has_value()) return;
  const std::vector<int64_t>& tail = state.tail->tokens;
  const auto starts_with_tail = [&](const std::vector<int64_t>& tokens) {
    return tokens.size() >= tail.size() && std::equal(tail.begin(), tail.end(), tokens.begin());
  };
  bool back = false, as_turn = false;
  for (const Entry& e : state.entries) {
    if (e.is_turn ? starts_with_tail(e.turn_tokens)
                  : e.chunk->ref.kind == ChunkKind::kTokens && starts_with_tail(e.chunk->tokens)) {
      back = true;
      as_turn = as_turn || (e.is_turn && e.turn_tokens.size() == tail.size());
    }
  }
  state.answers_return = back;
  state.answers_return_as_turns = as_turn;
  state.tail.reset();
}

}  // namespace orbit::detail
