// The window's tentative tail (window_state.h, TentativeTail): what its last generate forwarded after it,
// tracked so that a heal carries it along (window_ops.h).
#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include <algorithm>

#include "plan/kv_state.h"
#include "window/window_ops.h"

namespace orbit::detail {

namespace {

// Whether the store holds KV for `tokens` computed behind `chain` (what keep_read_for_reuse puts there).
bool stored_behind(const WindowState& state, const std::vector<int64_t>& tokens, const KvState& chain) {
  return state.core->kv().contains(reuse_key(state.core->registry().turn_key(tokens), chain));
}

}  // namespace

void keep_tail(WindowState& state, const std::vector<int64_t>& query, const std::vector<int64_t>& answer) {
  state.tail.reset();
  if (!state.options.policy.reuse_computed || query.empty()) return;
  const KvState chain = state.state_chain();
  std::vector<int64_t> read = query;
  read.insert(read.end(), answer.begin(), answer.end());
  if (!answer.empty() && stored_behind(state, read, chain)) {
    state.tail = TentativeTail{std::move(read), chain};
  } else if (stored_behind(state, query, chain)) {
    state.tail = TentativeTail{query, chain};
  }
}

double carry_tail(WindowState& state, const KvState& before) {
  if (!state.tail.has_value() || state.tail->behind != before || !state.answers_return) return 0;
  const KvState chain = state.state_chain();
  if (chain == before) return 0;
  EngineCore& core = *state.core;
  const std::vector<int64_t>& tokens = state.tail->tokens;
  const int64_t n = static_cast<int64_t>(tokens.size());
  std::vector<const Entry*> entries;
  for (const Entry& e : state.entries) entries.push_back(&e);
  int64_t start = 0;
  const runtime::PastKV past = read_past(core, entries, &start);
  const int64_t limit = core.config().max_position_embeddings;
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
  Counters counted;  // idle time: background forwards
  counted.forward_tokens = static_cast<double>(n);
  counted.background_forward_tokens = static_cast<double>(n);
  core.usage().count(counted);
  state.forward_tokens += static_cast<double>(n);
  return static_cast<double>(n);
}

void settle_tail(WindowState& state) {
  if (!state.tail.has_value()) return;
  const std::vector<int64_t>& tail = state.tail->tokens;
  const auto starts_with_tail = [&](const std::vector<int64_t>& tokens) {
    return tokens.size() >= tail.size() && std::equal(tail.begin(), tail.end(), tokens.begin());
  };
  bool back = false;
  for (const Entry& e : state.entries) {
    if (e.is_turn ? starts_with_tail(e.turn_tokens)
                  : e.chunk->ref.kind == ChunkKind::kTokens && starts_with_tail(e.chunk->tokens)) {
      back = true;
      break;
    }
  }
  state.answers_return = back;
  state.tail.reset();
}

}  // namespace orbit::detail
