// Parts of a decode (decode_parts.h).
#include "window/decode_parts.h"

#include <ATen/ATen.h>

#include <optional>

#include "orbit/common/error.h"
#include "window/sampler.h"
#include "window/window_ops.h"

namespace orbit::detail {

void check_query(const WindowState& s, const std::vector<int64_t>& query, const char* what) {
  refuse_in_callback(s, what);  // every read starts here: none from the window's own generate callback
  check_query_tokens(query, s.core->config().vocab_size, what);
  const int64_t limit = s.core->max_positions();
  if (limit <= 0) return;
  int64_t next = 0;  // the query's first position: after every entry's extent
  for (const Entry& e : s.entries) next += e.extent;
  const auto length = static_cast<int64_t>(query.size());
  ORBIT_REFUSE_UNLESS(next + length <= limit, what << ": the query's " << length << " tokens after the window's "
                                                   << next << " positions pass the model's " << limit << " ("
                                                   << window_position_limit_source(s.core->config())
                                                   << "): shorten the query or evict from the window");
}

void check_query_tokens(const std::vector<int64_t>& query, int64_t vocab, const char* what) {
  ORBIT_CHECK(!query.empty(), what << ": empty query (give at least one token)");
  for (std::size_t i = 0; i < query.size(); ++i) {
    ORBIT_CHECK(query[i] >= 0 && query[i] < vocab, what << ": query token " << i << " = " << query[i]
                                                        << " is outside the vocabulary [0, " << vocab << ")");
  }
}

void extend_past(runtime::PastKV& past, const runtime::Content& content, const at::Tensor& positions) {
  if (past.length() == 0) {
    past.layers = content;
    past.positions = positions;
    return;
  }
  if (past.layers.empty()) {  // a paged past with nothing after its pages yet
    past.layers = content;
    past.positions = at::cat({past.positions, positions}, -1);
    return;
  }
  for (std::size_t l = 0; l < past.layers.size(); ++l) {
    past.layers[l].k = at::cat({past.layers[l].k, content[l].k}, 0);
    past.layers[l].v = at::cat({past.layers[l].v, content[l].v}, 0);
  }
  past.positions = at::cat({past.positions, positions}, -1);
}

runtime::Content concat_contents(const std::vector<runtime::Content>& parts) {
  runtime::Content out(parts.front().size());
  for (std::size_t l = 0; l < out.size(); ++l) {
    std::vector<at::Tensor> k, v;
    for (const runtime::Content& p : parts) {
      k.push_back(p[l].k);
      v.push_back(p[l].v);
    }
    out[l].k = at::cat(k, 0);
    out[l].v = at::cat(v, 0);
  }
  return out;
}

bool reuses_query_head(const WindowPolicy& policy) {
  const bool exact_preset = policy.survivors == SurvivorAction::kRecondition && policy.on_miss == MissAction::kForm;
  return policy.reuse_computed && !exact_preset;
}

void reuse_query_head(const WindowState& state, const std::vector<int64_t>& query, runtime::PastKV& past,
                      std::vector<int64_t>& input, int64_t& pos, std::vector<runtime::Content>& head) {
  EngineCore& core = *state.core;
  if (!reuses_query_head(state.options.policy) || query.size() < 2) return;
  const KvState chain = state.state_chain();
  const int64_t limit = static_cast<int64_t>(query.size()) - 1;
  const ReuseIndex::Match m = core.kv().reuse_index().longest(chain, chain, query, limit);
  if (m.tokens <= 0 || !core.kv().contains(m.store_key)) return;
  std::optional<runtime::Content> stored = core.kv().get_conditioned(m.store_key);
  if (!stored.has_value() || stored->empty() || stored->front().k.size(0) < m.tokens) return;
  runtime::Content rows(stored->size());
  for (std::size_t l = 0; l < rows.size(); ++l) {
    rows[l] = {(*stored)[l].k.narrow(0, 0, m.tokens), (*stored)[l].v.narrow(0, 0, m.tokens)};
  }
  extend_past(past, rows, core.registry().positions_for(nullptr, m.tokens, pos));
  head.push_back(std::move(rows));
  input.assign(query.begin() + m.tokens, query.end());
  pos += m.tokens;
}

bool keep_needs_last(const WindowState& state, const std::vector<int64_t>& answer, bool query_run, int64_t end) {
  if (!state.options.policy.reuse_computed || !query_run || answer.empty()) return false;
  const int64_t limit = state.core->max_positions();
  return !(limit > 0 && end + 1 > limit);
}

void keep_read_for_reuse(const WindowState& state, const std::vector<int64_t>& query,
                         const std::vector<int64_t>& answer, const runtime::Content* query_kv,
                         const runtime::Content* turn_kv) {
  EngineCore& core = *state.core;
  if (!state.options.policy.reuse_computed || query_kv == nullptr) return;
  const KvState chain = state.state_chain(), content = state.content_chain();
  core.kv().put_reusable(reuse_key(core.registry().turn_key(query), chain), *query_kv, chain, content, query);
  if (answer.empty() || turn_kv == nullptr) return;
  std::vector<int64_t> turn = query;
  turn.insert(turn.end(), answer.begin(), answer.end());
  core.kv().put_reusable(reuse_key(core.registry().turn_key(turn), chain), *turn_kv, chain, content, turn);
}

}  // namespace orbit::detail

namespace orbit {

void check_generate(const std::vector<int64_t>& query, const GenerateOptions& options, int64_t vocab,
                    bool has_tokenizer) {
  detail::check_query_tokens(query, vocab, "generate");
  detail::Sampler::check_options(options, vocab);
  detail::check_tokenizer_needs(options, has_tokenizer);
}

}  // namespace orbit
