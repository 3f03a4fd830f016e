#include "orbit/engine.h"

#include <optional>

#include "engine/engine_core.h"
#include "orbit/common/error.h"
#include "window/window_state.h"

namespace orbit {

const char* background_mode_name(BackgroundMode mode) noexcept {
  switch (mode) {
    case BackgroundMode::kThread: return "thread";
    case BackgroundMode::kDeferred: return "deferred";
    case BackgroundMode::kInline: return "inline";
  }
  return "?";
}

Engine::Engine(std::shared_ptr<detail::EngineCore> core) : core_(std::move(core)) {}
Engine::~Engine() = default;

std::shared_ptr<Engine> Engine::open(const EngineOptions& options) {
  // In a child of fork() the core is left as it is, never destroyed (EngineLife::forked): its destructor would
  // join threads and close store connections that are the parent's.
  std::shared_ptr<detail::EngineCore> core(new detail::EngineCore(options), [](detail::EngineCore* c) {
    if (!c->life().forked()) delete c;
  });
  {
    const detail::OpHold hold(*core);
    (void)core->load_stored_calibration();  // EngineOptions::stored_calibration
  }
  return std::shared_ptr<Engine>(new Engine(std::move(core)));
}

const EngineOptions& Engine::options() const {
  core_->life().check_open();  // as every call but stats() and closed() after close()
  return core_->options();
}
ModelInfo Engine::model_info() const { return core_->model_info(); }

// Every operation holds the engine (detail::OpHold) for its duration: close() waits for it, and an
// operation begun after close() throws "engine is closed".
ChunkRef Engine::add_tokens(const std::vector<int64_t>& tokens, const ChunkOptions& options) {
  const detail::OpHold hold(*core_);
  return core_->registry().add_tokens(tokens, options);
}
ChunkRef Engine::add_embeddings(const EmbeddingChunk& chunk, const ChunkOptions& options) {
  const detail::OpHold hold(*core_);
  return core_->registry().add_embeddings(chunk, options);
}
std::optional<ChunkRef> Engine::find_media(const MediaLookup& lookup, const ChunkOptions& options) {
  const detail::OpHold hold(*core_);
  return core_->registry().find_media(lookup, options);
}
ChunkRef Engine::chunk(const std::string& key) const {
  const detail::OpHold hold(*core_);
  return core_->registry().record(key)->ref;
}
bool Engine::has_chunk(const std::string& key) const {
  const detail::OpHold hold(*core_);
  return !key.empty() && core_->registry().knows(key);  // knows() looks the key up without touching it
}
std::vector<ChunkRef> Engine::chunks() const {
  const detail::OpHold hold(*core_);
  return core_->registry().chunks();
}

void Engine::precompute(const ChunkRef& chunk) {
  const detail::OpHold hold(*core_);
  (void)core_->kv().canonical(*core_->registry().record(chunk));
}

Window Engine::new_window(const WindowOptions& options) {
  const detail::OpHold hold(*core_);
  ORBIT_CHECK(options.max_bytes >= 0,
              "WindowOptions::max_bytes = " << options.max_bytes << " must be >= 0 (0 = no limit)");
  validate_policy(options.policy);
  auto state = std::make_unique<detail::WindowState>();
  state->core = core_;
  state->id = core_->next_window_id();
  state->options = options;
  if (core_->options().window_past && !core_->model().device().is_cuda())
    state->past = std::make_shared<detail::WindowPast>();
  return Window(std::move(state));
}

// Both answer after close() too: the remote tier's stored calibration is asked (once, when the store
// directory held none: EngineOptions::stored_calibration) only while the engine is open.
std::string Engine::fidelity_model_description() const {
  core_->read_remote_calibration_if_open();
  return core_->fidelity_model().describe();
}
std::string Engine::fidelity_calibration() const {
  core_->read_remote_calibration_if_open();
  return core_->fidelity_calibration();
}

CalibrationReport Engine::calibrate() {
  const detail::OpHold hold(*core_);
  return core_->calibrate();
}

CalibrationReport Engine::calibrate_fidelity(const CalibrationProgress& progress) {
  const detail::OpHold hold(*core_);
  return core_->calibrate_fidelity(progress);
}

int64_t Engine::run_background(double max_seconds) {
  ORBIT_CHECK(max_seconds >= 0, "run_background: max_seconds = " << max_seconds << " must be >= 0");
  const detail::OpHold hold(*core_);
  return core_->jobs().queue().run(max_seconds);
}

bool Engine::observe_fidelity(double measured_kl, double predicted_kl) {
  return core_->note_fidelity_check(measured_kl, predicted_kl, 0);  // a counter: fine after close() too
}

// Answers after close() too (counters only; the store's part stays zero then).
EngineStats Engine::stats() const {
  std::optional<detail::OpHold> hold;
  try {
    hold.emplace(*core_);
  } catch (const Error&) {
    hold.reset();  // closed
  }
  EngineStats s;
  s.chunks = core_->registry().live_chunks();
  s.windows = core_->life().windows();
  const detail::SharedPool::Usage pool = core_->pool().usage();
  s.pool_pages = pool.pages;
  s.pool_free_pages = pool.free;
  s.pool_bytes_used = pool.live * core_->pool().page_bytes();
  const detail::SharedPool::Sharing sharing = core_->pool().sharing();
  s.pool_canonical_sets = sharing.canonical_sets;
  s.pool_canonical_pages = sharing.canonical_pages;
  s.pool_placements = sharing.placements;
  s.pool_patches = sharing.patches;
  s.pool_patch_bytes = sharing.patch_bytes;
  const detail::Counters c = core_->usage().counters();
  s.canonicals_encoded = c.canonicals_encoded;
  s.patches_formed = c.patches_formed;
  s.patch_hits = c.patch_hits;
  s.forward_tokens = c.forward_tokens;
  s.critical_forward_tokens = c.forward_tokens - c.background_forward_tokens;
  s.background_forward_tokens = c.background_forward_tokens;
  s.query_forward_tokens = c.query_forward_tokens;
  s.logits_forward_tokens = c.logits_forward_tokens;
  const detail::EngineCore::FidelityChecks checks = core_->fidelity_checks();
  s.check_forward_tokens = checks.forward_tokens;
  s.fidelity_correction = checks.correction.factor();
  s.fidelity_checks = checks.correction.checks();
  s.prefix_cache_tokens = c.prefix_cache_tokens;
  s.radix_cache_tokens = c.radix_cache_tokens;
  s.critical_seconds = c.critical_seconds;
  s.background_seconds = c.background_seconds;
  s.background_jobs = c.background_jobs;
  s.background_pending = core_->jobs().queue().queued();
  s.background_pending_bytes = core_->jobs().queue().queued_bytes();
  s.background_dropped = core_->jobs().queue().dropped();
  s.background_failed = core_->jobs().queue().failed(&s.background_error);
  s.media_found = c.media_found;
  s.patch_catalog = core_->kv().catalog_usage();
  s.turn_lengths = core_->registry().turn_lengths_usage();
  s.prefix_ledger = core_->usage().prefix_ledger_usage();
  s.radix_yardstick = core_->usage().radix_usage();
  {
    const detail::ReuseIndex& reuse = core_->kv().reuse_index();
    constexpr int64_t kIdBytes = sizeof(int32_t);  // each token id it keeps
    s.reuse_index = {static_cast<int64_t>(reuse.sequences()), static_cast<int64_t>(reuse.tokens_held()) * kIdBytes,
                     static_cast<int64_t>(detail::ReuseIndex::kMaxChains * detail::ReuseIndex::kPerChain),
                     static_cast<int64_t>(detail::ReuseIndex::kMaxTotalTokens) * kIdBytes};
  }
  if (core_->has_tokenizer()) {
    const runtime::Tokenizer::CacheUsage t = core_->tokenizer().cache_usage();
    s.tokenizer_cache = {t.entries, t.bytes, t.max_entries, t.max_bytes};
  }
  s.media_missed = c.media_missed;
  s.constraint_cache = core_->constraint_cache().stats();
  if (hold) s.store = core_->kv().store().stats();
  return s;
}

ConstraintCache& Engine::constraint_cache() { return core_->constraint_cache(); }

CloseReport Engine::close(const CloseOptions& options) {
  ORBIT_CHECK(options.finish_seconds >= 0, "Engine::close: CloseOptions::finish_seconds = "
                                               << options.finish_seconds << " (want seconds >= 0, or infinity)");
  if (core_->life().forked()) return {};  // the parent's to close (EngineLife::forked)
  return core_->close(options);
}
bool Engine::closed() const { return core_->life().closed(); }
bool Engine::in_operation_on_this_thread() const { return core_->life().held_by_this_thread(); }
bool Engine::forked() const { return core_->life().forked(); }

}  // namespace orbit
