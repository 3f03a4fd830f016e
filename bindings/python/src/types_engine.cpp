// The store's and the engine's counters, ModelInfo and EngineOptions (types.cpp binds the other value
// objects; init_types calls these). Each mirrors its C++ struct field for field.
#include <pybind11/stl.h>

#include <iomanip>
#include <sstream>

#include "bindings.h"
#include "convert.h"
#include "field_repr.h"
#include "orbit/engine.h"

namespace orbit_py {

namespace {

std::string repr_of(const std::string& s) { return py::repr(py::str(s)); }

}  // namespace

// the store's counters: TierStats, RemoteStats, StoreStats.
void def_store_stats(py::module_& m) {
  using namespace orbit;

  py::class_<TierStats>(m, "TierStats", "Counters of one store tier in this process.")
      .def_readonly("tier", &TierStats::tier, "StoreTier.")
      .def_readonly("enabled", &TierStats::enabled, "Whether the tier is in use.")
      .def_readonly("entries", &TierStats::entries, "Entries held.")
      .def_readonly("bytes", &TierStats::bytes, "Bytes charged against the budget.")
      .def_readonly("budget_bytes", &TierStats::budget_bytes, "Budget.")
      .def_readonly("policy", &TierStats::policy, "Its eviction policy: 'lru' or 'cost-aware'.")
      .def_readonly("pinned_entries", &TierStats::pinned_entries, "Pinned entries.")
      .def_readonly("hits", &TierStats::hits, "Reads served by this tier.")
      .def_readonly("evictions", &TierStats::evictions, "Entries that left under budget pressure.")
      .def_readonly("demotions", &TierStats::demotions, "Entries moved to the next tier down.")
      .def_readonly("promotions", &TierStats::promotions, "Entries copied into this tier on access.")
      .def("__repr__", [](const TierStats& t) {
        std::ostringstream o;
        o << "TierStats(" << store_tier_name(t.tier) << ", enabled=" << (t.enabled ? "True" : "False")
          << ", entries=" << t.entries << ", bytes=" << t.bytes << ", hits=" << t.hits << ")";
        return o.str();
      });

  py::class_<RemoteStats>(m, "RemoteStats", "The remote tier's counters (StoreStats.remote).")
      .def_readonly("enabled", &RemoteStats::enabled, "A remote tier is configured.")
      .def_readonly("url", &RemoteStats::url, "Its URL.")
      .def_readonly("available", &RemoteStats::available, "False while considered down (after a failed call).")
      .def_readonly("hits", &RemoteStats::hits, "Values read and verified.")
      .def_readonly("misses", &RemoteStats::misses,
                    "Absent, corrupt, incomplete, unauthenticated, or skipped while down.")
      .def_readonly("corrupt", &RemoteStats::corrupt, "Values that failed verification (removed, never used).")
      .def_readonly("incomplete", &RemoteStats::incomplete,
                    "Entries whose parts the server evicted (read as misses, their manifests removed).")
      .def_readonly("unauthenticated", &RemoteStats::unauthenticated,
                    "Values sealed under another secret or none (never used, left on the server; the first in a run "
                    "is warned of and set as last_error).")
      .def_readonly("errors", &RemoteStats::errors, "Calls that failed (unreachable, timed out, rejected).")
      .def_readonly("outages", &RemoteStats::outages, "Times the remote went down.")
      .def_readonly("skipped", &RemoteStats::skipped, "Reads answered as a miss at once while down.")
      .def_readonly("internal_reads", &RemoteStats::internal_reads,
                    "The engine's own reads (its stored fidelity calibration), kept out of hits, misses and skipped.")
      .def_readonly("writes", &RemoteStats::writes, "Values written.")
      .def_readonly("write_failures", &RemoteStats::write_failures, "Failed write attempts (the local copy stays).")
      .def_readonly("writes_dropped", &RemoteStats::writes_dropped, "Queued writes dropped.")
      .def_readonly("resent", &RemoteStats::resent,
                    "Writes an earlier run of the store directory left undelivered, re-sent by this open.")
      .def_readonly("resend_backlog", &RemoteStats::resend_backlog,
                    "Such writes left to re-send (0 once done; the next open tries those a close left).")
      .def_readonly("abandoned", &RemoteStats::abandoned,
                    "Undelivered writes given up: their local copies evicted past remote_max_held_fraction of the "
                    "disk budget (never re-sent).")
      .def_readonly("queued", &RemoteStats::queued, "Writes (and removals) waiting now.")
      .def_readonly("removals", &RemoteStats::removals, "Entries removed from the server (erase).")
      .def_readonly("bytes_read", &RemoteStats::bytes_read, "Blob bytes of the hits.")
      .def_readonly("bytes_written", &RemoteStats::bytes_written, "Blob bytes written.")
      .def_readonly("read_seconds", &RemoteStats::read_seconds, "Wall time of the reads that hit.")
      .def_readonly("last_error", &RemoteStats::last_error, "The latest failure, naming the server.")
      .def("__repr__", [](const RemoteStats& r) {
        std::ostringstream o;
        o << "RemoteStats(" << repr_of(r.url) << ", available=" << (r.available ? "True" : "False")
          << ", hits=" << r.hits << ", misses=" << r.misses << ", corrupt=" << r.corrupt << ", errors=" << r.errors
          << ", writes=" << r.writes << ")";
        return o.str();
      });

  py::class_<StoreStats>(m, "StoreStats", "The chunk store's counters (EngineStats.store).")
      .def_readonly("tiers", &StoreStats::tiers, "list[TierStats]: device, host, disk.")
      .def_readonly("canonical_encoding", &StoreStats::canonical_encoding,
                    "BlobEncoding the disk tier writes canonicals in (EngineOptions.cold_tier).")
      .def_readonly("pinned_host", &StoreStats::pinned_host, "Host-tier values live in pinned memory (CUDA engines).")
      .def_readonly("misses", &StoreStats::misses, "Lookups no tier served (the engine's own reads excepted).")
      .def_readonly("internal_reads", &StoreStats::internal_reads,
                    "The engine's own reads (its stored fidelity calibration), kept out of misses and the tiers' hits.")
      .def_readonly("refusals", &StoreStats::refusals, "Puts no tier could admit.")
      .def_readonly("corrupt_reads", &StoreStats::corrupt_reads, "Blobs that failed their checksum.")
      .def_readonly("unreadable_reads", &StoreStats::unreadable_reads,
                    "Blobs the file system refused to read (permission, I/O): misses, the entry kept.")
      .def_readonly("io_errors", &StoreStats::io_errors, "Puts that failed on disk.")
      .def_readonly("demotions_lost", &StoreStats::demotions_lost,
                    "Entries a memory tier let go under its budget that the disk could not take (a failed disk "
                    "write, a disk budget full of pinned entries): gone from the store, recomputed when needed.")
      .def_readonly("disk_degraded", &StoreStats::disk_degraded,
                    "A disk write failed (full, read-only): entries are kept in memory only.")
      .def_readonly("disk_warning", &StoreStats::disk_warning, "The failure, naming the path and the reason.")
      .def_readonly("remote", &StoreStats::remote, "RemoteStats (enabled=False without a remote tier).")
      .def("__repr__", [](const StoreStats& s) {
        std::ostringstream o;
        o << "StoreStats(tiers=" << s.tiers.size() << ", misses=" << s.misses << ", refusals=" << s.refusals
          << ", corrupt_reads=" << s.corrupt_reads << ", io_errors=" << s.io_errors
          << ", demotions_lost=" << s.demotions_lost << ")";
        return o.str();
      });
}

namespace {

using EngineStatsClass = py::class_<orbit::EngineStats>;

// EngineStats: chunks, windows and the KV pool.
void def_engine_pool_stats(EngineStatsClass& c) {
  using orbit::EngineStats;
  c.def_readonly("chunks", &EngineStats::chunks, "Chunks registered.")
      .def_readonly("windows", &EngineStats::windows, "Windows alive.")
      .def_readonly("pool_pages", &EngineStats::pool_pages, "KV pool pages.")
      .def_readonly("pool_free_pages", &EngineStats::pool_free_pages, "Free KV pool pages.")
      .def_readonly("pool_bytes_used", &EngineStats::pool_bytes_used, "Bytes of live pages.")
      .def_readonly("pool_canonical_sets", &EngineStats::pool_canonical_sets,
                    "Chunks whose canonical pages windows read in place (shared canonicals).")
      .def_readonly("pool_canonical_pages", &EngineStats::pool_canonical_pages,
                    "Pages of those canonicals (in pool_bytes_used once, however many windows read them).")
      .def_readonly("pool_placements", &EngineStats::pool_placements,
                    "Placements reading a shared canonical (window instances, forks' included).")
      .def_readonly("pool_patches", &EngineStats::pool_patches,
                    "Distinct patch factors those placements carry (added as they are read).")
      .def_readonly("pool_patch_bytes", &EngineStats::pool_patch_bytes,
                    "Bytes of those patch factors (host memory, not pool pages).");
}

// EngineStats: the forwards run (canonicals, patches, token-forwards by path), the fidelity self-checks, what
// the caches compared with would have forwarded, and the critical path's wall time.
void def_engine_forward_stats(EngineStatsClass& c) {
  using orbit::EngineStats;
  c.def_readonly("canonicals_encoded", &EngineStats::canonicals_encoded, "Forwards of chunks alone.")
      .def_readonly("patches_formed", &EngineStats::patches_formed, "Patches formed.")
      .def_readonly("patch_hits", &EngineStats::patch_hits, "Stored patches reused.")
      .def_readonly("forward_tokens", &EngineStats::forward_tokens,
                    "Token-forwards over all windows' operations and background work (critical + background). The "
                    "reads' query forwards are apart: every forward but the decode steps and the measurements "
                    "(reference_logits, loss_by_instance) is forward_tokens + query_forward_tokens + "
                    "logits_forward_tokens.")
      .def_readonly("critical_forward_tokens", &EngineStats::critical_forward_tokens,
                    "Of forward_tokens: those on the critical path (inside apply(), and the canonicals encoded "
                    "on the caller's thread: precompute's, disposable's when none is stored).")
      .def_readonly("background_forward_tokens", &EngineStats::background_forward_tokens,
                    "Of forward_tokens: those run by background jobs (canonical encodes).")
      .def_readonly("query_forward_tokens", &EngineStats::query_forward_tokens,
                    "Query tokens forwarded by every window's generate (Generation.prompt_forward_tokens) and "
                    "disposable (the query twice) calls, on the critical path, not in forward_tokens: "
                    "critical_forward_tokens + query_forward_tokens is what compares with radix_cache_tokens.")
      .def_readonly("logits_forward_tokens", &EngineStats::logits_forward_tokens,
                    "Query tokens forwarded by every window's logits() calls, on the critical path, not in "
                    "forward_tokens (radix_cache_tokens does not count logits() calls).")
      .def_readonly("check_forward_tokens", &EngineStats::check_forward_tokens,
                    "Of background_forward_tokens: the fidelity self-checks' probe forwards (Window.idle).")
      .def_readonly("fidelity_correction", &EngineStats::fidelity_correction,
                    "What every fidelity prediction is multiplied by, learned from the self-checks' measured / "
                    "predicted KL (in [1, 64]; 1 until a check finds the model predicting too little).")
      .def_readonly("fidelity_checks", &EngineStats::fidelity_checks, "Self-checks counted in fidelity_correction.")
      .def_readonly("prefix_cache_tokens", &EngineStats::prefix_cache_tokens,
                    "What a prefix cache would have forwarded on the critical path for the same window operations "
                    "(summed over windows): compare with critical_forward_tokens.")
      .def_readonly("radix_cache_tokens", &EngineStats::radix_cache_tokens,
                    "What a radix cache would have forwarded for every window's generate and disposable calls: "
                    "compare with critical_forward_tokens + query_forward_tokens.")
      .def_readonly("critical_seconds", &EngineStats::critical_seconds,
                    "Wall time inside apply() (the critical path; background work run inline excluded).");
}

// TableUsage: one of the engine's bounded tables (EngineStats.patch_catalog and the rest).
void def_table_usage(py::module_& m) {
  using orbit::TableUsage;
  py::class_<TableUsage>(m, "TableUsage",
                         "One of the engine's in-memory tables that grow with the distinct content it sees: what it "
                         "holds and its bounds (a bound of 0: not bounded that way; bytes 0: not counted).")
      .def_readonly("entries", &TableUsage::entries)
      .def_readonly("bytes", &TableUsage::bytes)
      .def_readonly("max_entries", &TableUsage::max_entries)
      .def_readonly("max_bytes", &TableUsage::max_bytes)
      .def("__repr__", [](const TableUsage& u) {
        return "TableUsage(entries=" + std::to_string(u.entries) + ", bytes=" + std::to_string(u.bytes) +
               ", max_entries=" + std::to_string(u.max_entries) + ", max_bytes=" + std::to_string(u.max_bytes) + ")";
      });
}

// EngineStats: background work, media lookups, the constraint cache and the store, and __repr__.
void def_engine_work_stats(EngineStatsClass& c) {
  using orbit::EngineStats;
  c.def_readonly("background_seconds", &EngineStats::background_seconds,
                 "Wall time of background jobs (canonical encode + SVD + store).")
      .def_readonly("background_jobs", &EngineStats::background_jobs, "Background jobs completed.")
      .def_readonly("background_pending", &EngineStats::background_pending, "Background jobs queued, not started.")
      .def_readonly("background_failed", &EngineStats::background_failed,
                    "Background jobs that raised (their patch is not stored).")
      .def_readonly("background_error", &EngineStats::background_error,
                    "The last background failure's message ('' if none).")
      .def_readonly("media_found", &EngineStats::media_found, "find_media() calls answered (no encoder needed).")
      .def_readonly("media_missed", &EngineStats::media_missed, "find_media() calls that found no embeddings.")
      .def_readonly("background_pending_bytes", &EngineStats::background_pending_bytes,
                    "The KV the queued background jobs hold (EngineOptions.max_background_bytes bounds it).")
      .def_readonly("background_dropped", &EngineStats::background_dropped,
                    "Queued background jobs dropped past max_background_bytes (their patches not formed).")
      .def_readonly("constraint_cache", &EngineStats::constraint_cache,
                    "ConstraintCacheStats: the compiled constraints generate keeps (tools, response_format).")
      .def_readonly("store", &EngineStats::store, "StoreStats (empty after close()).")
      .def_readonly("patch_catalog", &EngineStats::patch_catalog,
                    "TableUsage: what patches exist for each chunk and context (records; bytes, about 16 MiB).")
      .def_readonly("turn_lengths", &EngineStats::turn_lengths,
                    "TableUsage: the token counts of turns seen, which weigh stale patches' contexts (65,536).")
      .def_readonly("prefix_ledger", &EngineStats::prefix_ledger,
                    "TableUsage: the prefix-cache yardstick's prefixes (65,536).")
      .def_readonly("radix_yardstick", &EngineStats::radix_yardstick,
                    "TableUsage: the radix yardstick's tokens (the pool and host tier's tokens at most).")
      .def_readonly("tokenizer_cache", &EngineStats::tokenizer_cache,
                    "TableUsage: the tokenizer's cache of split words (a Hugging Face BPE's: 10,000 words, 16 MiB).")
      .def_readonly("reuse_index", &EngineStats::reuse_index,
                    "TableUsage: the token sequences exact reuse finds KV by (65,536; bytes: their token ids, 16 MiB).")
      .def("__repr__", [](const EngineStats& s) {
        std::ostringstream o;
        o << "EngineStats(chunks=" << s.chunks << ", windows=" << s.windows << ", pool_pages=" << s.pool_pages
          << ", pool_free_pages=" << s.pool_free_pages << ", canonicals_encoded=" << s.canonicals_encoded
          << ", patches_formed=" << s.patches_formed << ", patch_hits=" << s.patch_hits
          << ", forward_tokens=" << s.forward_tokens << ", critical_forward_tokens=" << s.critical_forward_tokens
          << ", background_forward_tokens=" << s.background_forward_tokens << ", background_jobs=" << s.background_jobs
          << ", background_pending=" << s.background_pending << ")";
        return o.str();
      });
}

// CalibrationReport.
void def_calibration_report(py::module_& m) {
  using orbit::CalibrationReport;
  py::class_<CalibrationReport>(m, "CalibrationReport",
                                "What Engine.calibrate / calibrate_fidelity measured and fitted.")
      .def_readonly("samples", &CalibrationReport::samples, "Timings the cost model was fitted on (0: not fitted).")
      .def_readonly("seconds", &CalibrationReport::seconds, "Wall time of the calibration.")
      .def_readonly("cost_model", &CalibrationReport::cost_model,
                    "The fitted cost coefficients, one line ('' when the cost model was left as it was).")
      .def_readonly("remote_bytes_per_s", &CalibrationReport::remote_bytes_per_s,
                    "The remote tier's read rate the cost model now uses (0: no remote tier, or it was down).")
      .def_readonly("fidelity_samples", &CalibrationReport::fidelity_samples,
                    "Deficits the fidelity model was fitted on.")
      .def_readonly("fidelity_model", &CalibrationReport::fidelity_model,
                    "The fidelity model now used (Engine.fidelity_model_description()), one line.")
      .def_readonly("shortfall_samples", &CalibrationReport::shortfall_samples,
                    "Of fidelity_samples, those measuring dynamic-NTK RoPE's shortfall (content formed in a\n"
                    "shorter window than it is read in); 0 on a model without dynamic scaling (or anchored past\n"
                    "512 tokens).")
      .def_readonly("shortfall_coefficient", &CalibrationReport::shortfall_coefficient,
                    "The shortfall coefficient plans now price with, fitted on those samples (KL per unit of\n"
                    "(change in ln scale)^2 times recency weight); 0 when none were measured (the default 0.29\n"
                    "stays).")
      .def_readonly("stored", &CalibrationReport::stored,
                    "True when the measured deficits were written to the store (Engine's stored_calibration) for\n"
                    "engines opening this model on it later; False without a store_dir or remote, with\n"
                    "stored_calibration=False, or when the store refused the write.")
      .def("__repr__", &fields_repr);
}

}  // namespace

// EngineStats (and its TableUsage) and CalibrationReport.
void def_engine_state(py::module_& m) {
  def_table_usage(m);
  EngineStatsClass stats(m, "EngineStats", "An engine's counters (Engine.stats).");
  def_engine_pool_stats(stats);
  def_engine_forward_stats(stats);
  def_engine_work_stats(stats);
  def_calibration_report(m);
}

// ConstraintCacheOptions(max_entries=, max_bytes=): Python's ints checked before they become size_t.
orbit::ConstraintCacheOptions constraint_cache_options(const IntArg& max_entries_arg, const IntArg& max_bytes_arg) {
  const int64_t max_entries = max_entries_arg.get("ConstraintCacheOptions: max_entries");
  const int64_t max_bytes = max_bytes_arg.get("ConstraintCacheOptions: max_bytes");
  if (max_entries < 0) {
    throw py::value_error("ConstraintCacheOptions: max_entries = " + std::to_string(max_entries) +
                          " must be >= 0 (0 keeps nothing)");
  }
  if (max_bytes < 0) {
    throw py::value_error("ConstraintCacheOptions: max_bytes = " + std::to_string(max_bytes) + " must be >= 0");
  }
  orbit::ConstraintCacheOptions o;
  o.max_entries = static_cast<std::size_t>(max_entries);
  o.max_bytes = static_cast<std::size_t>(max_bytes);
  return o;
}

// ConstraintCacheOptions, ModelInfo and EngineOptions.
void def_model_and_options(py::module_& m) {
  using namespace orbit;

  py::class_<ModelInfo>(m, "ModelInfo", "The engine's model (Engine.model_info).")
      .def_readonly("origin", &ModelInfo::origin, "Path it was loaded from.")
      .def_readonly("architecture", &ModelInfo::architecture, "'llama', 'qwen2', 'qwen2_vl', 'deepseek_v2'.")
      .def_readonly("fingerprint", &ModelInfo::fingerprint, "Model fingerprint (part of every content key).")
      .def_readonly("num_layers", &ModelInfo::num_layers, "Layers.")
      .def_readonly("vocab_size", &ModelInfo::vocab_size, "Vocabulary size (token ids are 0..vocab_size-1).")
      .def_readonly("max_positions", &ModelInfo::max_positions, "Position limit.")
      .def_readonly("position_rows", &ModelInfo::position_rows, "3 for M-RoPE models (grids [3, n]), else 1.")
      .def_readonly("hidden_size", &ModelInfo::hidden_size, "Embedding width (add_embeddings needs [n, hidden_size]).")
      .def_readonly("kv_bytes_per_token", &ModelInfo::kv_bytes_per_token, "KV bytes per token, all layers, float32.")
      .def_readonly("device", &ModelInfo::device, "Where the model runs: 'cpu', 'cuda:0', ...")
      .def_readonly("dtype", &ModelInfo::dtype, "Compute dtype: 'float32', 'bfloat16' or 'float16'.")
      .def_readonly("tokenizer", &ModelInfo::tokenizer,
                    "The tokenizer file in use ('' = none: text calls raise OrbitError).")
      .def_readonly("bos_token", &ModelInfo::bos_token,
                    "The tokenizer's BOS id; -1 when none. It ends a generate run (unless ignore_eos=True).")
      .def_readonly("eos_token", &ModelInfo::eos_token,
                    "The tokenizer's EOS id; -1 when none. It ends a generate run (unless ignore_eos=True).")
      .def("__repr__", [](const ModelInfo& i) {
        std::ostringstream o;
        o << "ModelInfo(" << repr_of(i.origin) << ", architecture=" << repr_of(i.architecture)
          << ", num_layers=" << i.num_layers << ", hidden_size=" << i.hidden_size << ", vocab_size=" << i.vocab_size
          << ", max_positions=" << i.max_positions << ", position_rows=" << i.position_rows << ")";
        return o.str();
      });

  py::class_<ConstraintCacheOptions>(
      m, "ConstraintCacheOptions",
      "Bounds of an engine's cache of compiled constraints (orbit/constraint_cache.h): Engine(constraint_cache=...),\n"
      "read back as EngineOptions.constraint_cache and, with what it holds, Engine.stats.constraint_cache.")
      .def(py::init(&constraint_cache_options), py::kw_only(),
           py::arg("max_entries") = static_cast<int64_t>(ConstraintCacheOptions{}.max_entries),
           py::arg("max_bytes") = static_cast<int64_t>(ConstraintCacheOptions{}.max_bytes),
           "max_entries: constraints kept at most (64; 0 keeps nothing: every call compiles); max_bytes: the bytes\n"
           "they hold at most, grammars and token masks counted (256 MiB; the entry just used is kept even past it).\n"
           "Past either bound the least recently used are dropped first. ValueError naming the field for a\n"
           "negative value.")
      .def_readonly("max_entries", &ConstraintCacheOptions::max_entries, "Constraints kept at most (0 = none).")
      .def_readonly("max_bytes", &ConstraintCacheOptions::max_bytes, "Bytes they hold at most, masks included.")
      .def("__repr__", [](const ConstraintCacheOptions& o) {
        return "ConstraintCacheOptions(max_entries=" + std::to_string(o.max_entries) +
               ", max_bytes=" + std::to_string(o.max_bytes) + ")";
      });

  py::class_<EngineOptions>(m, "EngineOptions", "The options an Engine was opened with (Engine.options).")
      .def_readonly("model", &EngineOptions::model, "Model path.")
      .def_readonly("store_dir", &EngineOptions::store_dir, "Store directory ('' = memory only).")
      .def_readonly("pool_bytes", &EngineOptions::pool_bytes, "KV pool bytes.")
      .def_readonly("page_size", &EngineOptions::page_size, "Tokens per page.")
      .def_readonly("host_budget_bytes", &EngineOptions::host_budget_bytes, "Store host-tier budget.")
      .def_readonly("disk_budget_bytes", &EngineOptions::disk_budget_bytes, "Store disk budget (0 = unlimited).")
      .def_readonly("threads", &EngineOptions::threads, "Intra-op threads (0 = process setting).")
      .def_readonly("remote", &EngineOptions::remote, "Remote tier URL ('' = none).")
      .def_readonly("remote_ttl_seconds", &EngineOptions::remote_ttl_seconds, "Remote entry TTL (0 = never).")
      .def_readonly("remote_max_held_fraction", &EngineOptions::remote_max_held_fraction,
                    "Share of the disk budget held for undelivered remote writes (0..1).")
      .def_readonly("device", &EngineOptions::device, "Device ('cpu', 'cuda', 'cuda:N').")
      .def_readonly("dtype", &EngineOptions::dtype, "Compute dtype ('float32', 'bfloat16', 'float16').")
      .def_readonly("eviction", &EngineOptions::eviction, "Store eviction policy ('lru', 'cost-aware').")
      .def_readonly("cold_tier", &EngineOptions::cold_tier, "How canonicals go to disk ('exact', 'int8').")
      .def_readonly("device_tier_bytes", &EngineOptions::device_tier_bytes, "Device tier bytes (0 = none).")
      .def_readonly("embedding_cache", &EngineOptions::embedding_cache, "Media embeddings kept for find_media().")
      .def_readonly("stored_calibration", &EngineOptions::stored_calibration,
                    "The fidelity calibration read from and written to the store.")
      .def_readonly("window_past", &EngineOptions::window_past,
                    "Windows keep their KV as one contiguous past between reads (CPU engines).")
      .def_readonly("max_idle_chunks", &EngineOptions::max_idle_chunks,
                    "Chunks kept registered beyond those in use (0 = all, for the engine's life).")
      .def_readonly("max_background_bytes", &EngineOptions::max_background_bytes,
                    "The KV queued background jobs may hold before the oldest are dropped (0 = no bound).")
      .def_readonly("background", &EngineOptions::background,
                    "BackgroundMode (where canonicals and patches are formed).")
      .def_readonly("tokenizer", &EngineOptions::tokenizer,
                    "The tokenizer file given ('' = the one found beside the model; model_info.tokenizer is the one "
                    "in use).")
      .def_readonly("constraint_cache", &EngineOptions::constraint_cache,
                    "ConstraintCacheOptions: the bounds of the engine's cache of compiled constraints.")
      .def("__repr__", [](const EngineOptions& o) {
        std::ostringstream s;
        s << "EngineOptions(model=" << repr_of(o.model) << ", store_dir=" << repr_of(o.store_dir)
          << ", pool_bytes=" << o.pool_bytes << ", page_size=" << o.page_size
          << ", host_budget_bytes=" << o.host_budget_bytes << ", disk_budget_bytes=" << o.disk_budget_bytes
          << ", threads=" << o.threads << ", device=" << repr_of(o.device) << ", dtype=" << repr_of(o.dtype)
          << ", background=" << repr_of(background_mode_name(o.background)) << ")";
        return s.str();
      });
}

// what reads return: logprobs, Generation, losses, disposability.

}  // namespace orbit_py
