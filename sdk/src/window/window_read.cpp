// Reading a window: logits, generation, the disposability test and the re-prefill reference. Nothing
// here changes the window or the store.
#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include <chrono>
#include <cmath>
#include <optional>

#include "orbit/common/error.h"
#include "orbit/runtime/fidelity.h"
#include "window/sampler.h"
#include "window/window_ops.h"

namespace orbit {

using detail::Entry;
using detail::WindowState;

namespace {

void check_query(const WindowState& s, const std::vector<int64_t>& query, const char* what) {
  ORBIT_CHECK(!query.empty(), what << ": empty query (give at least one token)");
  const int64_t vocab = s.core->config().vocab_size;
  for (std::size_t i = 0; i < query.size(); ++i) {
    ORBIT_CHECK(query[i] >= 0 && query[i] < vocab, what << ": query token " << i << " = " << query[i]
                                                        << " is outside the vocabulary [0, " << vocab << ")");
  }
}

std::vector<const Entry*> all_entries(const WindowState& s) {
  std::vector<const Entry*> out;
  for (const Entry& e : s.entries) out.push_back(&e);
  return out;
}

Logits to_logits(const at::Tensor& t) {
  const at::Tensor c = t.to(at::kCPU, at::kFloat).contiguous();
  Logits out;
  out.rows = c.size(0);
  out.vocab = c.size(1);
  out.values.assign(c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
  return out;
}

// Logits of `tokens` after `past` (which ends at position `start`).
at::Tensor run(const detail::EngineCore& core, const runtime::PastKV& past, int64_t start,
               const std::vector<int64_t>& tokens, bool all_rows) {
  c10::InferenceMode guard;
  runtime::ForwardInput in = core.registry().input_for_tokens(tokens, start);
  runtime::ForwardOptions fo;
  fo.logits = all_rows ? runtime::LogitsMode::kAll : runtime::LogitsMode::kLast;
  fo.return_content = false;
  return core.model().forward(in, past.length() > 0 ? &past : nullptr, fo).logits;
}

// Appends the KV of tokens just run (content at `positions`) to `past`.
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

// Greedy decode of `steps` tokens after `query`, over `past` ending at `start`. first_logits receives
// the distribution of the first answer token.
std::vector<int64_t> greedy(const detail::EngineCore& core, runtime::PastKV past, int64_t start,
                            const std::vector<int64_t>& query, int64_t steps, at::Tensor* first_logits) {
  c10::InferenceMode guard;
  std::vector<int64_t> out;
  std::vector<int64_t> input = query;
  int64_t pos = start;
  for (int64_t i = 0; i < steps; ++i) {
    runtime::ForwardInput in = core.registry().input_for_tokens(input, pos);
    runtime::ForwardOptions fo;
    fo.logits = runtime::LogitsMode::kLast;
    runtime::ForwardResult r = core.model().forward(in, past.length() > 0 ? &past : nullptr, fo);
    if (i == 0 && first_logits != nullptr) *first_logits = r.logits;
    const int64_t next = r.logits.argmax(-1).item<int64_t>();
    out.push_back(next);
    extend_past(past, r.content, in.positions);
    pos += static_cast<int64_t>(input.size());
    input = {next};
  }
  return out;
}

// The rows of several forwards' KV, in order, as one content.
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

// Exact reuse of a read (WindowPolicy::reuse_computed): the KV of the query, and of the query followed by
// the answer, behind the window's KV states, kept where a live turn with those tokens will look for it.
// `parts` holds the KV of every forward generate ran (the query first, in `query_parts` pieces: the rows
// reused for its head, if any, then its forward; then each answer token but the last), `past` the window
// and those, ending at position `end`; the last answer token's KV is computed here (one more decode step)
// so that an appended answer forwards nothing.
void keep_read_for_reuse(const WindowState& state, const std::vector<int64_t>& query,
                         const std::vector<int64_t>& answer, std::vector<runtime::Content> parts,
                         std::size_t query_parts, const runtime::PastKV& past, int64_t end) {
  detail::EngineCore& core = *state.core;
  if (!state.options.policy.reuse_computed || parts.empty()) return;
  const detail::KvState chain = state.state_chain(), content = state.content_chain();
  if (parts.size() < query_parts) return;  // the query's forward did not run (max_tokens 0, no room)
  const runtime::Content query_kv =
      query_parts == 1 ? parts.front() : concat_contents({parts.begin(), parts.begin() + 2});
  core.kv().put_reusable(detail::reuse_key(core.registry().turn_key(query), chain), query_kv, chain, content, query);
  const int64_t limit = core.config().max_position_embeddings;
  if (answer.empty() || (limit > 0 && end + 1 > limit)) return;
  runtime::ForwardInput in = core.registry().input_for_tokens({answer.back()}, end);
  runtime::ForwardOptions fo;
  fo.logits = runtime::LogitsMode::kNone;
  parts.push_back(core.model().forward(in, &past, fo).content);
  std::vector<int64_t> turn = query;
  turn.insert(turn.end(), answer.begin(), answer.end());
  core.kv().put_reusable(detail::reuse_key(core.registry().turn_key(turn), chain), concat_contents(parts), chain,
                         content, turn);
}

// Exact reuse of a read's query: its leading tokens (all but the last, whose logits the first answer token
// needs) when KV computed behind the window's very KV states holds them (ReuseIndex): loaded onto `past`,
// `input` and `pos` then start after them. Returns how many parts of `parts` the query's KV spans (1, or 2
// with the loaded head first).
std::size_t reuse_query_head(const WindowState& state, const std::vector<int64_t>& query, runtime::PastKV& past,
                             std::vector<int64_t>& input, int64_t& pos, std::vector<runtime::Content>& parts) {
  detail::EngineCore& core = *state.core;
  if (!state.options.policy.reuse_computed || query.size() < 2) return 1;
  const detail::KvState chain = state.state_chain();
  const int64_t limit = static_cast<int64_t>(query.size()) - 1;
  const detail::ReuseIndex::Match m = core.kv().reuse_index().longest(chain, chain, query, limit);
  if (m.tokens <= 0 || !core.kv().contains(m.store_key)) return 1;
  std::optional<runtime::Content> stored = core.kv().get_conditioned(m.store_key);
  if (!stored.has_value() || stored->empty() || stored->front().k.size(0) < m.tokens) return 1;
  runtime::Content head(stored->size());
  for (std::size_t l = 0; l < head.size(); ++l) {
    head[l] = {(*stored)[l].k.narrow(0, 0, m.tokens), (*stored)[l].v.narrow(0, 0, m.tokens)};
  }
  extend_past(past, head, core.registry().positions_for(nullptr, m.tokens, pos));
  parts.push_back(std::move(head));
  input.assign(query.begin() + m.tokens, query.end());
  pos += m.tokens;
  return 2;
}

}  // namespace

int64_t Logits::argmax(int64_t i) const {
  ORBIT_CHECK(i >= 0 && i < rows, "Logits::argmax: row " << i << " outside [0, " << rows << ")");
  const float* r = row(i);
  int64_t best = 0;
  for (int64_t j = 1; j < vocab; ++j) {
    if (r[j] > r[best]) best = j;
  }
  return best;
}

namespace detail {

Logits probe_logits(const WindowState& state, const std::vector<int64_t>& probe) {
  check_query(state, probe, "self-check probe");
  int64_t start = 0;
  const runtime::PastKV past = read_past(*state.core, all_entries(state), &start);
  return to_logits(run(*state.core, past, start, probe, true));
}

double probe_kl(const Logits& exact, const Logits& approx) {
  ORBIT_CHECK(
      exact.rows == approx.rows && exact.vocab == approx.vocab && exact.rows > 0,
      "probe_kl: logits of " << exact.rows << "x" << exact.vocab << " against " << approx.rows << "x" << approx.vocab);
  c10::InferenceMode guard;
  const auto as_tensor = [](const Logits& l) {
    return at::from_blob(const_cast<float*>(l.values.data()), {l.rows, l.vocab}, at::kFloat);
  };
  return runtime::mean_kl(as_tensor(exact), as_tensor(approx));
}

}  // namespace detail

Logits Window::logits(const std::vector<int64_t>& query, bool all_rows) const {
  const detail::OpHold hold(*state_->core);
  check_query(*state_, query, "logits");
  detail::run_deferred(*state_, "logits");
  int64_t start = 0;
  const runtime::PastKV past = detail::read_past(*state_->core, all_entries(*state_), &start);
  return to_logits(run(*state_->core, past, start, query, all_rows));
}

namespace {

// One forward of the whole window (every instance's own tokens or embeddings at its positions) and the
// query after it: the re-prefill every fidelity measure compares against. The logits of the query's rows
// ([q, vocab]); with `content`, also the KV of every row (the window's first, the query's last).
runtime::ForwardResult reference_forward(const WindowState& state, const std::vector<int64_t>& query, bool content) {
  const detail::EngineCore& core = *state.core;
  std::vector<at::Tensor> embeds, positions;
  int64_t pos = 0;
  for (const Entry& e : state.entries) {
    if (e.is_turn) {
      embeds.push_back(core.model().embed(e.turn_tokens));
    } else if (e.chunk->ref.kind == ChunkKind::kTokens) {
      embeds.push_back(core.model().embed(e.chunk->tokens));
    } else {
      embeds.push_back(e.chunk->tensors->embeddings);
    }
    positions.push_back(core.registry().positions_for(e.chunk, e.length, pos));
    pos += e.extent;
  }
  embeds.push_back(core.model().embed(query));
  positions.push_back(core.registry().positions_for(nullptr, static_cast<int64_t>(query.size()), pos));
  runtime::ForwardInput in;
  in.embeddings = at::cat(embeds, 0);
  in.positions = at::cat(positions, -1);
  runtime::ForwardOptions fo;
  fo.logits = runtime::LogitsMode::kAll;
  fo.return_content = content;
  runtime::ForwardResult r = core.model().forward(in, nullptr, fo);
  const int64_t q = static_cast<int64_t>(query.size());
  r.logits = r.logits.narrow(0, r.logits.size(0) - q, q);
  return r;
}

double squared_norm(const at::Tensor& t) { return t.to(at::kDouble).pow(2).sum().item<double>(); }

}  // namespace

Logits Window::reference_logits(const std::vector<int64_t>& query, bool all_rows) const {
  const detail::OpHold hold(*state_->core);
  check_query(*state_, query, "reference_logits");
  c10::InferenceMode guard;
  const at::Tensor rows = reference_forward(*state_, query, false).logits;
  return to_logits(all_rows ? rows : rows.narrow(0, rows.size(0) - 1, 1));
}

std::vector<InstanceLoss> Window::loss_by_instance(const std::vector<int64_t>& query) const {
  const detail::OpHold hold(*state_->core);
  check_query(*state_, query, "loss_by_instance");
  detail::run_deferred(*state_, "loss_by_instance");
  detail::EngineCore& core = *state_->core;
  c10::InferenceMode guard;
  const runtime::ForwardResult ref = reference_forward(*state_, query, true);
  int64_t start = 0;
  const runtime::PastKV held = detail::gather_past(core, all_entries(*state_), &start);
  const int64_t total = held.length();
  std::vector<InstanceLoss> out;
  if (total == 0) return out;
  // The re-prefill's KV of the window's rows, beside the held KV (both [T, ...] per layer, same layout).
  std::vector<runtime::LayerKV> exact(held.layers.size());
  for (std::size_t l = 0; l < held.layers.size(); ++l) {
    exact[l].k = ref.content[l].k.narrow(0, 0, total).to(held.layers[l].k.dtype());
    exact[l].v = ref.content[l].v.narrow(0, 0, total).to(held.layers[l].v.dtype());
  }
  const std::vector<uint64_t> contexts = state_->context_hashes();
  int64_t row = 0, position = 0;
  for (std::size_t i = 0; i < state_->entries.size(); ++i) {
    const Entry& e = state_->entries[i];
    const int64_t n = e.length;
    double diff = 0, norm = 0;
    for (std::size_t l = 0; l < exact.size(); ++l) {
      for (bool is_k : {true, false}) {
        const at::Tensor want = (is_k ? exact[l].k : exact[l].v).narrow(0, row, n);
        const at::Tensor got = (is_k ? held.layers[l].k : held.layers[l].v).narrow(0, row, n);
        diff += squared_norm(got.to(at::kDouble) - want.to(at::kDouble));
        norm += squared_norm(want);
      }
    }
    const double change = norm > 0 ? std::sqrt(diff / norm) : 0.0;
    if (change > 1e-6) {
      // Every instance exact but this one, as held.
      runtime::PastKV mixed;
      mixed.positions = held.positions;
      mixed.layers.resize(exact.size());
      for (std::size_t l = 0; l < exact.size(); ++l) {
        mixed.layers[l].k = exact[l].k.clone();
        mixed.layers[l].v = exact[l].v.clone();
        mixed.layers[l].k.narrow(0, row, n).copy_(held.layers[l].k.narrow(0, row, n));
        mixed.layers[l].v.narrow(0, row, n).copy_(held.layers[l].v.narrow(0, row, n));
      }
      InstanceLoss loss;
      loss.instance = e.id;
      loss.label = e.is_turn ? std::string("turn") : e.chunk->ref.label;
      loss.position = position;
      loss.length = n;
      loss.formed_by = e.formed_by;
      loss.match = e.match;
      loss.context_changed = e.formed_on != contexts[i];
      loss.kv_change = change;
      loss.measured_kl = runtime::mean_kl(ref.logits, run(core, mixed, start, query, true));
      loss.predicted_kl = e.predicted_kl;
      out.push_back(std::move(loss));
    }
    row += n;
    position += e.extent;
  }
  return out;
}

Generation Window::generate(const std::vector<int64_t>& query, const GenerateOptions& options) const {
  const detail::OpHold hold(*state_->core);
  check_query(*state_, query, "generate");
  detail::Sampler sampler = detail::make_sampler(*state_->core, options, query);  // checks the options
  detail::run_deferred(*state_, "generate");  // after the checks: a refused call changes nothing
  {
    // A model call: what a prefix cache would compute for it (an edit since the last forward, say).
    detail::Counters charged;
    charged.prefix_cache_tokens = detail::charge_prefix_cache(*state_);
    state_->core->usage().count(charged);
  }
  const auto t0 = std::chrono::steady_clock::now();
  const detail::EngineCore& core = *state_->core;
  const int64_t limit = core.config().max_position_embeddings;
  int64_t start = 0;
  runtime::PastKV past = detail::read_past(*state_->core, all_entries(*state_), &start);
  Generation g;
  g.stop_reason = "max_tokens";
  std::vector<int64_t> input = query;
  int64_t pos = start;
  c10::InferenceMode guard;
  std::vector<runtime::Content> parts;  // the KV of every forward (exact reuse)
  const std::size_t query_parts = reuse_query_head(*state_, query, past, input, pos, parts);
  const bool done_before = sampler.finished();  // e.g. a constraint to an empty literal
  for (int64_t i = 0; i < options.max_tokens && !done_before; ++i) {
    if (limit > 0 && pos + static_cast<int64_t>(input.size()) > limit) {
      g.stop_reason = "position_limit";
      break;
    }
    runtime::ForwardInput in = core.registry().input_for_tokens(input, pos);
    runtime::ForwardOptions fo;
    fo.logits = runtime::LogitsMode::kLast;
    runtime::ForwardResult r = core.model().forward(in, past.length() > 0 ? &past : nullptr, fo);
    if (i == 0) g.prompt_forward_tokens = static_cast<int64_t>(input.size());
    // Tokens the run may still emit after this one: max_tokens, and the positions left for their forwards.
    int64_t left = options.max_tokens - i - 1;
    if (limit > 0) left = std::min(left, limit - pos - static_cast<int64_t>(input.size()));
    detail::SamplerStep step = sampler.next(r.logits, left);
    if (!step.has_token()) {
      g.stop_reason = step.stop_reason;
      break;
    }
    const int64_t next = step.token;
    g.tokens.push_back(next);
    if (step.logprobs.has_value()) g.logprobs.push_back(std::move(*step.logprobs));
    parts.push_back(r.content);
    extend_past(past, r.content, in.positions);
    pos += static_cast<int64_t>(input.size());
    input = {next};
    if (sampler.is_stop_token(next)) {
      g.stop_reason = "stop_token";
      break;
    }
    if (options.on_logprobs && !g.logprobs.empty()) options.on_logprobs(g.logprobs.back());
    if (options.on_token && !options.on_token(next, static_cast<int64_t>(g.tokens.size()) - 1)) {
      g.stop_reason = "cancelled";
      break;
    }
    if (sampler.finished()) {
      g.stop_reason = "constraint_complete";
      break;
    }
  }
  if (sampler.constrained() && (done_before || (g.stop_reason == "max_tokens" && sampler.complete()))) {
    g.stop_reason = "constraint_complete";
  }
  keep_read_for_reuse(*state_, query, g.tokens, std::move(parts), query_parts, past, pos);
  detail::charge_radix_cache(*state_, query, g.tokens);
  if (core.has_tokenizer()) g.text = core.tokenizer().decode(g.tokens, query.back());
  g.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return g;
}

InstanceKV Window::kv(InstanceId instance) const {
  const detail::OpHold hold(*state_->core);
  const Entry& e = state_->entry(instance);
  const runtime::Content c = detail::entry_content(*state_->core, e);
  InstanceKV out;
  out.length = e.length;
  for (std::size_t l = 0; l < c.size(); ++l) {
    const at::Tensor k = c[l].k.to(at::kCPU, at::kFloat).contiguous();
    const at::Tensor v = c[l].v.to(at::kCPU, at::kFloat).contiguous();
    if (l == 0) {
      out.k_shape.assign(k.sizes().begin() + 1, k.sizes().end());
      out.v_shape.assign(v.sizes().begin() + 1, v.sizes().end());
    }
    out.k.emplace_back(k.data_ptr<float>(), k.data_ptr<float>() + k.numel());
    out.v.emplace_back(v.data_ptr<float>(), v.data_ptr<float>() + v.numel());
  }
  const std::vector<runtime::PageId> pages = state_->core->pool().pages(*e.kv);
  out.pages.assign(pages.begin(), pages.end());
  return out;
}

DisposabilityReport Window::disposable(InstanceId instance, const std::vector<int64_t>& query,
                                       int64_t answer_tokens) const {
  const detail::OpHold hold(*state_->core);
  check_query(*state_, query, "disposable");
  ORBIT_CHECK(answer_tokens >= 1, "disposable: answer_tokens = " << answer_tokens << " must be >= 1");
  ORBIT_CHECK(!state_->entry(instance).is_turn,
              "disposable: instance " << instance << " is a live turn (it has no canonical to fall back to)");
  detail::run_deferred(*state_, "disposable");    // after the checks: a refused call changes nothing
  const Entry& target = state_->entry(instance);  // (the repairs replaced the entries)
  detail::EngineCore& core = *state_->core;
  int64_t start = 0;
  const runtime::PastKV with = detail::gather_past(core, all_entries(*state_), &start);
  // The same past with the target's rows replaced by its canonical (the conditioning switched off).
  runtime::PastKV without = with;
  const runtime::Content canonical = core.kv().canonical(*target.chunk);
  int64_t offset = 0;
  for (const Entry& e : state_->entries) {
    if (e.id == instance) break;
    offset += e.length;
  }
  for (std::size_t l = 0; l < without.layers.size(); ++l) {
    at::Tensor k = without.layers[l].k.clone();
    at::Tensor v = without.layers[l].v.clone();
    k.narrow(0, offset, target.length).copy_(canonical[l].k);
    v.narrow(0, offset, target.length).copy_(canonical[l].v);
    without.layers[l] = {k, v};
  }
  DisposabilityReport r;
  r.instance = instance;
  at::Tensor first_with, first_without;
  r.answer = greedy(core, with, start, query, answer_tokens, &first_with);
  r.answer_without = greedy(core, without, start, query, answer_tokens, &first_without);
  r.disposable = r.answer == r.answer_without;
  detail::charge_radix_cache(*state_, query, r.answer);
  r.kl_first = runtime::mean_kl(first_with, first_without);
  return r;
}

}  // namespace orbit
