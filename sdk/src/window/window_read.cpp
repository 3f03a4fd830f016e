// Reading a window: logits, the disposability test and the re-prefill reference (generation is a
// DecodeBatch of one: decode_batch.cpp). Nothing here changes the window or the store. The forwards of the
// calls a caller makes (logits' query, disposable's greedy decodes, the reference forward of reference_logits
// and loss_by_instance and loss_by_instance's per-instance reads) have an interruption point before each layer
// (engine/interruptible.h): one stopped there returns nothing, and the call throws before it counts or
// returns anything, the window as it was (the repairs run_deferred committed before the read stay).
#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <cmath>

#include "engine/forward_in_pieces.h"
#include "engine/interruptible.h"
#include "orbit/common/error.h"
#include "orbit/forward_pieces.h"
#include "orbit/runtime/fidelity.h"
#include "window/decode_parts.h"
#include "window/window_ops.h"

namespace orbit {

using detail::check_query;
using detail::Entry;
using detail::WindowState;

namespace {

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

// Logits of `tokens` after `past` (which ends at position `start`) in the calling thread's ForwardPieces scope's
// pieces (orbit/forward_pieces.h), its between() before each piece but the first: each piece is forwarded behind
// `past` and the pieces before it (their rows appended to a copy of it: the window's pages are not written), so
// a row's logits are the whole forward's up to float rounding (test_forward_pieces). All rows' logits in order,
// or the last piece's last.
at::Tensor run_pieces(const detail::EngineCore& core, runtime::PastKV past, int64_t start,
                      const std::vector<int64_t>& tokens, bool all_rows, const runtime::ForwardOptions& fo) {
  ForwardPieces& pieces = *ForwardPieces::current();
  const int64_t n = static_cast<int64_t>(tokens.size()), size = pieces.tokens();
  std::vector<at::Tensor> rows;
  for (int64_t at = 0; at < n; at += size) {
    if (at > 0) pieces.between();
    const int64_t end = std::min(n, at + size);
    const std::vector<int64_t> piece(tokens.begin() + at, tokens.begin() + end);
    const runtime::ForwardInput in = core.registry().input_for_tokens(piece, start + at);
    runtime::ForwardOptions piece_fo = fo;
    piece_fo.logits = all_rows || end == n ? fo.logits : runtime::LogitsMode::kNone;
    piece_fo.return_content = end < n;  // the next piece reads its rows
    runtime::ForwardResult r = core.model().forward(in, past.length() > 0 ? &past : nullptr, piece_fo);
    if (end < n) detail::append_past_rows(past, r.content, in.positions);
    if (all_rows || end == n) rows.push_back(r.logits);
  }
  return all_rows ? at::cat(rows, 0) : rows.back();
}

// Logits of `tokens` after `past` (which ends at position `start`). With `stoppable`, an interruption point
// before each layer (engine/interruptible.h): a stopped forward returns nothing, and nothing here is written, so
// the caller's window is as it was. With `pieces` (logits' query), in the pieces of a ForwardPieces scope
// (run_pieces) where the thread has one.
at::Tensor run(const detail::EngineCore& core, const runtime::PastKV& past, int64_t start,
               const std::vector<int64_t>& tokens, bool all_rows, bool stoppable = false, bool pieces = false) {
  c10::InferenceMode guard;
  runtime::ForwardOptions fo;
  fo.logits = all_rows ? runtime::LogitsMode::kAll : runtime::LogitsMode::kLast;
  fo.return_content = false;
  if (stoppable) fo = detail::interruptible(fo);
  if (pieces && detail::goes_in_pieces(static_cast<int64_t>(tokens.size()))) {
    return run_pieces(core, past, start, tokens, all_rows, fo);
  }
  runtime::ForwardInput in = core.registry().input_for_tokens(tokens, start);
  return core.model().forward(in, past.length() > 0 ? &past : nullptr, fo).logits;
}

// Greedy decode of `steps` tokens after `query`, over `past` ending at `start`. first_logits receives
// the distribution of the first answer token. Every forward (the query's, each step's) stops between layers.
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
    fo = detail::interruptible(fo);
    runtime::ForwardResult r = core.model().forward(in, past.length() > 0 ? &past : nullptr, fo);
    if (i == 0 && first_logits != nullptr) *first_logits = r.logits;
    const int64_t next = r.logits.argmax(-1).item<int64_t>();
    out.push_back(next);
    detail::extend_past(past, r.content, in.positions);
    pos += static_cast<int64_t>(input.size());
    input = {next};
  }
  return out;
}

// disposable's greedy decodes feed the query and all but the last answer token after the window's positions:
// refused up front, naming answer_tokens, where they run past the model's positions.
void check_answer_room(const detail::WindowState& state, const std::vector<int64_t>& query, int64_t answer_tokens) {
  const int64_t limit = state.core->max_positions();
  if (limit <= 0) return;
  int64_t extent = 0;
  for (const Entry& e : state.entries) extent += e.extent;
  const int64_t room = limit - extent - static_cast<int64_t>(query.size()) + 1;
  ORBIT_CHECK(answer_tokens <= room,
              "disposable: answer_tokens = " << answer_tokens << " does not fit: the window's " << extent
                                             << " positions and the query's " << query.size()
                                             << " tokens leave room for at most " << std::max<int64_t>(room, 0)
                                             << " answer tokens in the model's " << limit << " positions");
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
  const runtime::PastKV past = read_past(state, &start);
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
  const runtime::PastKV past = detail::read_past(*state_, &start);
  // The query's forward stops between layers, and goes in pieces under a ForwardPieces scope; one stopped (a
  // between() that threw too) counts nothing.
  const Logits out = to_logits(run(*state_->core, past, start, query, all_rows, true, true));
  detail::charge_logits_read(*state_, static_cast<int64_t>(query.size()));
  return out;
}

namespace {

// One forward of the whole window (every instance's own tokens or embeddings at its positions) and the
// query after it: the re-prefill every fidelity measure compares against. The logits of the query's rows
// ([q, vocab]); with `content`, also the KV of every row (the window's first, the query's last). Stops between
// layers (an interruption point before each).
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
    positions.push_back(core.registry().positions_for(e.chunk.get(), e.length, pos));
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
  fo = detail::interruptible(fo);
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
      loss.measured_kl = runtime::mean_kl(ref.logits, run(core, mixed, start, query, true, true));
      loss.predicted_kl = e.predicted_kl;
      out.push_back(std::move(loss));
    }
    row += n;
    position += e.extent;
  }
  return out;
}

InstanceKV Window::kv(InstanceId instance) const {
  const detail::OpHold hold(*state_->core);
  const Entry& e = state_->entry(instance, "kv");
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
  check_answer_room(*state_, query, answer_tokens);
  ORBIT_CHECK(!state_->entry(instance, "disposable").is_turn,
              "disposable: instance " << instance << " is a live turn (it has no canonical to fall back to)");
  detail::run_deferred(*state_, "disposable");                  // after the checks: a refused call changes nothing
  const Entry& target = state_->entry(instance, "disposable");  // (the repairs replaced the entries)
  detail::EngineCore& core = *state_->core;
  int64_t start = 0;
  const runtime::PastKV with = detail::gather_past(core, all_entries(*state_), &start);
  // The same past with the target's rows replaced by its canonical (the conditioning switched off).
  runtime::PastKV without = with;
  // A canonical not stored yet is encoded here: the caller waits for that forward, so it counts on this
  // window's critical path as KvStore::canonical counts it on the engine's.
  int64_t encoded_tokens = 0;
  const runtime::Content canonical = core.kv().canonical(*target.chunk, nullptr, nullptr, &encoded_tokens);
  state_->forward_tokens += static_cast<double>(encoded_tokens);
  state_->critical_forward_tokens += static_cast<double>(encoded_tokens);
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
  // Both greedy decodes (with and without the conditioning) forwarded the whole query first.
  detail::charge_radix_cache(*state_, query, r.answer, 2 * static_cast<int64_t>(query.size()));
  r.kl_first = runtime::mean_kl(first_with, first_without);
  return r;
}

}  // namespace orbit
