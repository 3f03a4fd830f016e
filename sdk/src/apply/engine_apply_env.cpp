// EngineApplyEnv (engine_apply_env.h): the serving actions' reads, forwards and background jobs over the
// engine, behind the window being built.
#include "apply/engine_apply_env.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include <algorithm>

#include "engine/engine_core.h"
#include "engine/engine_plan_env.h"
#include "engine/forward_in_pieces.h"
#include "engine/interruptible.h"
#include "orbit/common/error.h"
#include "orbit/forward_pieces.h"
#include "orbit/runtime/repair.h"
#include "window/window_ops.h"

namespace orbit::detail {

// ---- KV behind the seam ----------------------------------------------------------------------------

int64_t TensorKv::rows() const {
  const runtime::Content& c = model_ != nullptr ? placement_.canonical : content_;
  return c.empty() ? 0 : c.front().k.size(0);
}

int64_t TensorKv::bytes() const { return runtime::content_bytes(model_ != nullptr ? placement_.canonical : content_); }

const runtime::Content& TensorKv::content() const {
  if (model_ == nullptr) return content_;
  if (placement_.patch == nullptr) return placement_.canonical;
  std::lock_guard<std::mutex> lock(mu_);
  if (!made_) {
    content_ = runtime::apply_patch(*model_, placement_.canonical, *placement_.patch);
    made_ = true;
  }
  return content_;
}

Kv make_kv(runtime::Content content) { return std::make_shared<const TensorKv>(std::move(content)); }

const runtime::Content& content_of(const Kv& kv) {
  static const runtime::Content none;
  if (kv == nullptr) return none;
  return static_cast<const TensorKv&>(*kv).content();
}

const TensorKv::Placement* placement_of(const Kv& kv) {
  return kv == nullptr ? nullptr : static_cast<const TensorKv&>(*kv).placement();
}

// ---- the window being built ------------------------------------------------------------------------

WindowBuild::~WindowBuild() {
  core.pool().clear(entries);
  if (kept_past != nullptr && past_taken_) kept_past->put(std::move(past_));
}

WindowPast::Key WindowBuild::past_key(std::size_t i) const {
  return {entries[i].version, starts[i], entries[i].length};
}

void WindowBuild::add_past() {
  // Runs of entries read from their pages (kept ones) are gathered in one copy each (SharedPool::gather_all): a
  // copy per entry cost more than the whole concatenation behind many short entries. Only their rows are keyed
  // for the window's kept past: the others are a forward's rows, not necessarily what their pages hold.
  std::size_t i = past_entries_;
  while (i < entries.size()) {
    std::vector<const Entry*> run;
    std::vector<WindowPast::Key> keys;
    for (std::size_t j = i; j < entries.size() && contents[j].empty(); ++j) {
      run.push_back(&entries[j]);
      keys.push_back(past_key(j));
    }
    if (run.empty()) {
      at::Tensor positions = core.registry().positions_for(entries[i].chunk.get(), entries[i].length, starts[i]);
      past_.append(runtime::PastKV{contents[i], std::move(positions)}, {});
      ++i;
      continue;
    }
    runtime::PastKV piece = core.pool().gather_all(entry_sequences(run));
    piece.positions = entry_positions(core, run, starts[i]);
    past_.append(std::move(piece), keys);
    i += run.size();
  }
  past_entries_ = entries.size();
}

runtime::PastKV WindowBuild::past() {
  if (entries.empty()) return {};
  if (!past_taken_) {
    past_taken_ = true;
    if (kept_past != nullptr) {
      past_ = kept_past->take();
      std::vector<WindowPast::Key> keys;
      for (std::size_t i = 0; i < entries.size() && contents[i].empty(); ++i) keys.push_back(past_key(i));
      past_entries_ = past_.matching(keys);
      past_.keep(past_entries_);
    }
  }
  if (past_entries_ < entries.size()) add_past();
  return past_.view();
}

std::vector<ContextItem> WindowBuild::context() const {
  std::vector<ContextItem> out;
  out.reserve(entries.size());
  for (const Entry& e : entries) out.push_back({e.key, e.version});
  return out;
}

std::vector<InstanceId> WindowBuild::context_ids() const {
  std::vector<InstanceId> out;
  out.reserve(entries.size());
  for (const Entry& e : entries) out.push_back(e.id);
  return out;
}

std::vector<std::string> WindowBuild::context_keys() const {
  std::vector<std::string> out;
  out.reserve(entries.size());
  for (const Entry& e : entries) out.push_back(e.key);
  return out;
}

// ---- the engine's env ------------------------------------------------------------------------------

namespace {

// The serving forwards' options: no logits, and an interruption point before each layer (interruptible.h),
// so one long instance stops part-way; the build, not the window, holds what it computed.
runtime::ForwardOptions no_logits() {
  runtime::ForwardOptions fo;
  fo.logits = runtime::LogitsMode::kNone;
  return interruptible(fo);
}

}  // namespace

ModelLimits EngineApplyEnv::model() const { return model_limits(core_); }

runtime::ForwardInput EngineApplyEnv::input_of(const ApplyTarget& t) const {
  return t.chunk != nullptr ? core_.registry().input_for(*t.chunk, t.position)
                            : core_.registry().input_for_tokens(*t.turn_tokens, t.position);
}

CanonicalRead EngineApplyEnv::canonical(const ChunkRecord& chunk) {
  CanonicalRead read;
  TensorKv::Placement placed;
  placed.key = chunk.ref.key;
  placed.canonical = core_.kv().canonical(chunk, &read.encoded, &read.bytes_read, &read.forwarded_tokens);
  read.kv = std::make_shared<const TensorKv>(core_.model(), std::move(placed));
  return read;
}

std::optional<Kv> EngineApplyEnv::patched(const ChunkRecord& chunk, const Kv& canonical, const std::string& patch_key,
                                          int64_t* patch_bytes) {
  std::optional<runtime::Patch> patch = core_.kv().get_patch(patch_key);
  if (!patch.has_value()) return std::nullopt;
  core_.kv().note_read_patch(chunk.ref.key, patch_key, *patch);
  *patch_bytes = patch->bytes();
  const TensorKv::Placement* base = placement_of(canonical);
  ORBIT_CHECK(base != nullptr && base->key == chunk.ref.key, "apply: a stored patch of chunk "
                                                                 << chunk.ref.key.substr(0, 12)
                                                                 << " applied to KV that is not its canonical");
  ORBIT_CHECK(patch->model_fingerprint == core_.model().fingerprint() && patch->length == canonical->rows(),
              "apply: the patch stored under " << patch_key.substr(0, 12)
                                               << " was formed for another model or a chunk of " << patch->length
                                               << " tokens (the canonical has " << canonical->rows() << ")");
  TensorKv::Placement placed{base->key, base->canonical, std::make_shared<const runtime::Patch>(std::move(*patch))};
  return std::make_shared<const TensorKv>(core_.model(), std::move(placed));
}

std::optional<Kv> EngineApplyEnv::conditioned(const std::string& store_key) {
  std::optional<runtime::Content> stored = core_.kv().get_conditioned(store_key);
  if (!stored.has_value()) return std::nullopt;
  return make_kv(std::move(*stored));
}

void EngineApplyEnv::put_conditioned(const Kv& kv, const std::string& chunk_key, PatchRecord record) {
  core_.kv().put_conditioned(content_of(kv), chunk_key, std::move(record));
}

Kv EngineApplyEnv::forward(const ApplyTarget& target) {
  c10::InferenceMode guard;
  if (in_pieces(target, 0)) {
    return make_kv(forward_pieces(target, build_.entries.empty() ? runtime::PastKV{} : build_.past(), 0));
  }
  const runtime::ForwardInput input = input_of(target);
  runtime::ForwardOptions fo = no_logits();
  fo.rope_window_len = build_.rope_window;
  if (build_.entries.empty()) return make_kv(core_.model().forward(input, nullptr, fo).content);
  const runtime::PastKV past = build_.past();
  return make_kv(core_.model().forward(input, &past, fo).content);
}

// Token ids (a live turn's or a token chunk's) sit at linear positions; an embedding chunk has none.
bool EngineApplyEnv::in_pieces(const ApplyTarget& target, int64_t from) const {
  return target.tokens() != nullptr && goes_in_pieces(target.length - from);
}

runtime::Content EngineApplyEnv::forward_pieces(const ApplyTarget& target, runtime::PastKV past, int64_t from) {
  runtime::ForwardOptions fo = no_logits();
  fo.rope_window_len = build_.rope_window;
  return forward_in_pieces(core_, *target.tokens(), from, target.position, std::move(past), fo);
}

Kv EngineApplyEnv::leading_rows(const Kv& kv, int64_t rows) {
  c10::InferenceMode guard;
  const runtime::Content& all = content_of(kv);
  runtime::Content head(all.size());
  for (std::size_t l = 0; l < head.size(); ++l) head[l] = {all[l].k.narrow(0, 0, rows), all[l].v.narrow(0, 0, rows)};
  return make_kv(std::move(head));
}

Kv EngineApplyEnv::forward_rest(const ApplyTarget& target, const Kv& head_kv) {
  c10::InferenceMode guard;
  const runtime::Content& head = content_of(head_kv);
  const int64_t k = head_kv->rows();
  runtime::PastKV past = build_.entries.empty() ? runtime::PastKV{} : build_.past();
  append_past_rows(past, head, core_.registry().positions_for(nullptr, k, target.position));
  runtime::Content tail;
  if (in_pieces(target, k)) {
    tail = forward_pieces(target, std::move(past), k);
  } else {
    const std::vector<int64_t>& tokens = *target.tokens();
    const std::vector<int64_t> rest(tokens.begin() + k, tokens.end());
    runtime::ForwardOptions fo = no_logits();
    fo.rope_window_len = build_.rope_window;
    tail = core_.model().forward(core_.registry().input_for_tokens(rest, target.position + k), &past, fo).content;
  }
  runtime::Content all(head.size());
  for (std::size_t l = 0; l < all.size(); ++l) {
    all[l] = {at::cat({head[l].k, tail[l].k}, 0), at::cat({head[l].v, tail[l].v}, 0)};
  }
  return make_kv(std::move(all));
}

Kv EngineApplyEnv::recompute(const ApplyTarget& target, const Kv& canonical, int64_t count, bool selective,
                             double* probe_tokens) {
  c10::InferenceMode guard;
  const runtime::ForwardInput input = input_of(target);
  const runtime::PastKV past = build_.past();
  const runtime::Content& c = content_of(canonical);
  // Formed at the plan's rope window like every other forward here (dynamic-NTK RoPE; 0: at its own end).
  const at::Tensor idx = selective ? runtime::cacheblend_select(core_.model(), input, past, c, count, probe_tokens,
                                                                layer_interruption(), build_.rope_window)
                                   : at::arange(count, at::kLong);
  if (!goes_in_pieces(idx.size(0))) {
    return make_kv(
        runtime::recompute_tokens(core_.model(), input, past, c, idx, layer_interruption(), build_.rope_window));
  }
  // In pieces (orbit/forward_pieces.h) of the recomputed tokens, in order: each piece is recomputed over the rows
  // the pieces before it wrote (recompute_tokens returns the cached rows with the recomputed ones written over
  // them), so a token attends to the earlier recomputed tokens' rows at every layer as in one forward of them all.
  ForwardPieces& pieces = *ForwardPieces::current();
  runtime::Content rows = c;
  for (int64_t from = 0; from < idx.size(0); from += pieces.tokens()) {
    if (from > 0) pieces.between();
    const at::Tensor piece = idx.slice(0, from, std::min(idx.size(0), from + pieces.tokens()));
    rows = runtime::recompute_tokens(core_.model(), input, past, rows, piece, layer_interruption(), build_.rope_window);
  }
  return make_kv(std::move(rows));
}

void EngineApplyEnv::queue_form(FormJob f) { build_.forms.push_back(std::move(f)); }

void WindowBuild::queue_forms() {
  for (FormJob& f : forms) {
    PatchJob job;
    job.chunk = f.chunk;
    job.conditioned = content_of(f.conditioned);
    job.form = std::move(f.form);
    core.jobs().queue_patch(std::move(job));
  }
  forms.clear();
}

void EngineApplyEnv::queue_turn_sensitivity(const std::string& key, const std::vector<int64_t>& tokens,
                                            const Kv& conditioned) {
  core_.jobs().queue_turn_sensitivity(key, tokens, content_of(conditioned));
}

}  // namespace orbit::detail
