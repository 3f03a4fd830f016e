#include "serve/serve_metrics.h"

#include <sstream>

namespace orbit::serve {

namespace {

std::string number(double x) {
  std::ostringstream out;
  out.precision(12);
  out << x;
  return out.str();
}

std::string with_label(const std::string& labels, const std::string& extra) {
  if (labels.empty()) return "{" + extra + "}";
  return "{" + labels + "," + extra + "}";
}

}  // namespace

void Histogram::observe(double seconds) {
  std::size_t i = 0;
  while (i < kBounds.size() && seconds > kBounds[i]) ++i;
  if (i < kBounds.size()) ++counts_[i];
  ++count_;
  sum_ += seconds;
}

std::string Histogram::render(const std::string& name, const std::string& labels) const {
  std::ostringstream out;
  int64_t cumulative = 0;
  for (std::size_t i = 0; i < kBounds.size(); ++i) {
    cumulative += counts_[i];
    out << name << "_bucket" << with_label(labels, "le=\"" + number(kBounds[i]) + "\"") << " " << cumulative << "\n";
  }
  out << name << "_bucket" << with_label(labels, "le=\"+Inf\"") << " " << count_ << "\n";
  const std::string plain = labels.empty() ? "" : "{" + labels + "}";
  out << name << "_sum" << plain << " " << number(sum_) << "\n";
  out << name << "_count" << plain << " " << count_ << "\n";
  return out.str();
}

void ServeMetrics::count_request(const std::string& endpoint, int status, double seconds) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++requests_[{endpoint, status}];
  latency_[endpoint].observe(seconds);
}

void ServeMetrics::count_untimed(const std::string& endpoint, int status) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++requests_[{endpoint, status}];
}

void ServeMetrics::enter(const std::string& endpoint) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++in_flight_[endpoint];
}

void ServeMetrics::leave(const std::string& endpoint) {
  std::lock_guard<std::mutex> lock(mutex_);
  --in_flight_[endpoint];
}

void ServeMetrics::count_first_token(const std::string& endpoint, double seconds) {
  std::lock_guard<std::mutex> lock(mutex_);
  first_token_[endpoint].observe(seconds);
}

void ServeMetrics::count_wait(double seconds) {
  std::lock_guard<std::mutex> lock(mutex_);
  wait_.observe(seconds);
}

void ServeMetrics::count_tokens(int64_t prompt, int64_t completion, double forward, int64_t radix) {
  std::lock_guard<std::mutex> lock(mutex_);
  prompt_tokens_ += prompt;
  completion_tokens_ += completion;
  forward_tokens_ += forward;
  radix_tokens_ += radix;
}

void ServeMetrics::count_idle_forward(double tokens) {
  std::lock_guard<std::mutex> lock(mutex_);
  idle_forward_tokens_ += tokens;
}

void ServeMetrics::count_store_write_failure(const std::string& store) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++store_write_failures_[store];
}

std::string render_store_metrics(const std::string& store, const std::string& what, int64_t stored, int64_t commits) {
  const std::string stored_name = "orbit_" + store + "_stored_total";
  const std::string commits_name = "orbit_" + store + "_commits_total";
  std::ostringstream out;
  out << "# HELP " << stored_name << " " << what << " written to their store.\n"
      << "# TYPE " << stored_name << " counter\n"
      << stored_name << " " << stored << "\n"
      << "# HELP " << commits_name << " Transactions that wrote them (one sync of the disk each).\n"
      << "# TYPE " << commits_name << " counter\n"
      << commits_name << " " << commits << "\n";
  return out.str();
}

std::string render_pending_metrics(const std::vector<std::pair<std::string, PendingStats>>& stores) {
  struct Family {
    const char* name;
    const char* type;
    const char* help;
    int64_t PendingStats::*value;
  };
  static const Family kFamilies[] = {
      {"orbit_store_pending", "gauge", "Answers given whose store write failed, held in memory for a retry.",
       &PendingStats::held},
      {"orbit_store_pending_bytes", "gauge", "Bytes of the answers held for a retry.", &PendingStats::bytes},
      {"orbit_store_retried_total", "counter", "Held answers a retry wrote to their store.", &PendingStats::retried},
      {"orbit_store_dropped_total", "counter",
       "Answers whose failed write was given up (no room to hold them, or unwritten at shutdown).",
       &PendingStats::dropped},
      {"orbit_store_pending_journaled", "gauge",
       "Of the answers held, those whose record is in the store's journal of held answers (they survive a crash).",
       &PendingStats::journaled},
      {"orbit_store_recovered_total", "counter",
       "Answers read back from a journal of held answers at start and written to their store since.",
       &PendingStats::recovered}};
  std::ostringstream out;
  for (const Family& f : kFamilies) {
    out << "# HELP " << f.name << " " << f.help << "\n# TYPE " << f.name << " " << f.type << "\n";
    for (const auto& [store, stats] : stores) out << f.name << "{store=\"" << store << "\"} " << stats.*f.value << "\n";
  }
  return out.str();
}

void ServeMetrics::count_tool_stream_mismatch(const std::string& what) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++tool_stream_mismatches_[what];
}

void ServeMetrics::count_cancelled() {
  std::lock_guard<std::mutex> lock(mutex_);
  ++cancelled_;
}

void ServeMetrics::count_stalled(bool slow) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++stalled_;
  slow_clients_ += slow ? 1 : 0;
}

namespace {

// The engine's bounded tables (EngineStats::patch_catalog and the rest): what each holds and its bound, entries
// and bytes (a table not counted one way is left out of that gauge).
void render_engine_tables(std::ostringstream& out, const EngineStats& stats) {
  const std::pair<const char*, const TableUsage*> tables[] = {
      {"patch_catalog", &stats.patch_catalog},     {"turn_lengths", &stats.turn_lengths},
      {"prefix_ledger", &stats.prefix_ledger},     {"radix_yardstick", &stats.radix_yardstick},
      {"tokenizer_cache", &stats.tokenizer_cache}, {"reuse_index", &stats.reuse_index}};
  out << "# HELP orbit_engine_table_entries Entries an engine table holds (patch_catalog: patch records; "
         "turn_lengths: turns' token counts; prefix_ledger: the prefix-cache yardstick's prefixes; radix_yardstick: "
         "the radix yardstick's tokens; tokenizer_cache: split words; reuse_index: the token sequences exact reuse "
         "finds "
         "KV by), and its bound (limit=\"max\"; 0 or absent: none).\n# TYPE orbit_engine_table_entries gauge\n";
  for (const auto& [table, u] : tables) {
    out << "orbit_engine_table_entries{table=\"" << table << "\"} " << u->entries << "\n";
    if (u->max_entries > 0)
      out << "orbit_engine_table_entries{table=\"" << table << "\",limit=\"max\"} " << u->max_entries << "\n";
  }
  out << "# HELP orbit_engine_table_bytes Bytes an engine table counts against its bound (limit=\"max\"), for the "
         "tables bounded in bytes.\n# TYPE orbit_engine_table_bytes gauge\n";
  for (const auto& [table, u] : tables) {
    if (u->max_bytes <= 0) continue;
    out << "orbit_engine_table_bytes{table=\"" << table << "\"} " << u->bytes << "\n"
        << "orbit_engine_table_bytes{table=\"" << table << "\",limit=\"max\"} " << u->max_bytes << "\n";
  }
}

}  // namespace

std::string render_memory_metrics(const EngineStats& stats) {
  std::ostringstream out;
  render_engine_tables(out, stats);
  out << "# HELP orbit_chunks Chunks registered (messages' chunks kept, --max-idle-chunks, and those in use).\n"
      << "# TYPE orbit_chunks gauge\norbit_chunks " << stats.chunks << "\n";
  out << "# HELP orbit_pool_pages The KV pool's pages (windows' KV), and those free.\n# TYPE orbit_pool_pages gauge\n"
      << "orbit_pool_pages{state=\"total\"} " << stats.pool_pages << "\n"
      << "orbit_pool_pages{state=\"free\"} " << stats.pool_free_pages << "\n";
  out << "# HELP orbit_background_jobs Background jobs queued for idle time (patches to form from first sights).\n"
      << "# TYPE orbit_background_jobs gauge\norbit_background_jobs " << stats.background_pending << "\n"
      << "# HELP orbit_background_bytes The KV the queued background jobs hold (--background-mb bounds it).\n"
      << "# TYPE orbit_background_bytes gauge\norbit_background_bytes " << stats.background_pending_bytes << "\n"
      << "# HELP orbit_background_dropped_total Queued background jobs dropped past --background-mb (their patches "
         "not formed).\n# TYPE orbit_background_dropped_total counter\norbit_background_dropped_total "
      << stats.background_dropped << "\n";
  const std::pair<const char*, const char*> gauges[] = {
      {"orbit_store_entries", "Entries a store tier holds (chunks' canonicals, patches, answers' KV)."},
      {"orbit_store_bytes", "Bytes a store tier holds against its budget."},
      {"orbit_store_budget_bytes", "A store tier's budget (0: unlimited)."}};
  for (const auto& [name, help] : gauges) {
    out << "# HELP " << name << " " << help << "\n# TYPE " << name << " gauge\n";
    for (const TierStats& t : stats.store.tiers) {
      if (!t.enabled) continue;
      const std::string_view metric(name);
      const int64_t value = metric == "orbit_store_entries" ? t.entries
                            : metric == "orbit_store_bytes" ? t.bytes
                                                            : t.budget_bytes;
      out << name << "{tier=\"" << store_tier_name(t.tier) << "\"} " << value << "\n";
    }
  }
  const StoreStats& st = stats.store;
  out << "# HELP orbit_store_faults_total Store faults: blobs found corrupt on read (recomputed when needed), blobs "
         "the "
         "file system refused to read (kept, recomputed while unreadable), "
         "disk writes that failed, remote values that failed verification, remote values sealed under another "
         "secret or none.\n# TYPE orbit_store_faults_total counter\n"
      << "orbit_store_faults_total{kind=\"corrupt_read\"} " << st.corrupt_reads << "\n"
      << "orbit_store_faults_total{kind=\"unreadable_read\"} " << st.unreadable_reads << "\n"
      << "orbit_store_faults_total{kind=\"disk_write\"} " << st.io_errors << "\n"
      << "orbit_store_faults_total{kind=\"remote_corrupt\"} " << st.remote.corrupt << "\n"
      << "orbit_store_faults_total{kind=\"remote_unauthenticated\"} " << st.remote.unauthenticated << "\n"
      << "# HELP orbit_store_remote_incomplete_total Remote entries whose parts the server evicted (its memory "
         "policy), read as misses.\n# TYPE orbit_store_remote_incomplete_total counter\n"
      << "orbit_store_remote_incomplete_total " << st.remote.incomplete << "\n"
      << "# HELP orbit_store_demotions_lost_total Entries a memory tier let go under its budget that the disk could "
         "not take (a failed disk write, a disk budget full of pinned entries): gone from the store, recomputed when "
         "needed.\n# TYPE orbit_store_demotions_lost_total counter\norbit_store_demotions_lost_total "
      << st.demotions_lost << "\n"
      << "# HELP orbit_store_disk_degraded 1 while the disk tier's writes fail (entries kept in memory only).\n"
      << "# TYPE orbit_store_disk_degraded gauge\norbit_store_disk_degraded " << (st.disk_degraded ? 1 : 0) << "\n"
      << "# HELP orbit_store_remote_abandoned_total Remote writes given up undelivered: their disk copies evicted "
         "past the share of the disk budget held for the remote (the remote down or behind).\n"
      << "# TYPE orbit_store_remote_abandoned_total counter\norbit_store_remote_abandoned_total " << st.remote.abandoned
      << "\n";
  return out.str();
}

std::string render_constraint_metrics(const ConstraintMetrics& m) {
  std::ostringstream out;
  out << "# HELP orbit_constraint_cache_entries Constraints kept for forced calls and JSON answers (and tools' "
         "checks).\n# TYPE orbit_constraint_cache_entries gauge\norbit_constraint_cache_entries "
      << m.entries << "\n"
      << "# HELP orbit_constraint_cache_bytes Bytes the kept constraints hold: grammars, token masks, keys.\n"
      << "# TYPE orbit_constraint_cache_bytes gauge\norbit_constraint_cache_bytes " << m.bytes << "\n"
      << "# HELP orbit_constraint_cache_budget_bytes The constraint cache's byte budget.\n"
      << "# TYPE orbit_constraint_cache_budget_bytes gauge\norbit_constraint_cache_budget_bytes " << m.budget_bytes
      << "\n"
      << "# HELP orbit_constraint_cache_hits_total Lookups (a request's tools or schema) that found their "
         "constraint kept.\n# TYPE orbit_constraint_cache_hits_total counter\norbit_constraint_cache_hits_total "
      << m.hits << "\n"
      << "# HELP orbit_constraint_cache_misses_total Lookups that built their constraint (a refusal too).\n"
      << "# TYPE orbit_constraint_cache_misses_total counter\norbit_constraint_cache_misses_total " << m.misses << "\n";
  return out.str();
}

std::string render_sync_memo_metrics(const SyncMemoUsage& usage) {
  const std::pair<const char*, const SyncMemoCount*> memos[] = {{"cuts", &usage.cuts}, {"encodings", &usage.encodings}};
  std::ostringstream out;
  out << "# HELP orbit_sync_memo_entries Message lists a sync memo keeps (cuts: their prefixes' renders, "
         "encodings: their tokens), at most --sync-memo-entries.\n# TYPE orbit_sync_memo_entries gauge\n";
  for (const auto& [memo, count] : memos)
    out << "orbit_sync_memo_entries{memo=\"" << memo << "\"} " << count->entries << "\n";
  out << "# HELP orbit_sync_memo_bytes Bytes a sync memo's lists hold (their containers' capacity), at most "
         "--sync-memo-mb.\n# TYPE orbit_sync_memo_bytes gauge\n";
  for (const auto& [memo, count] : memos)
    out << "orbit_sync_memo_bytes{memo=\"" << memo << "\"} " << count->bytes << "\n";
  return out.str();
}

std::string ServeMetrics::render(const MetricGauges& gauges) const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::ostringstream out;
  out << "# HELP orbit_requests_total Requests answered, by endpoint and HTTP status.\n"
      << "# TYPE orbit_requests_total counter\n";
  for (const auto& [key, n] : requests_) {
    out << "orbit_requests_total{endpoint=\"" << key.first << "\",status=\"" << key.second << "\"} " << n << "\n";
  }
  auto counter = [&](const char* name, const char* help, const std::string& value) {
    out << "# HELP " << name << " " << help << "\n# TYPE " << name << " counter\n" << name << " " << value << "\n";
  };
  counter("orbit_prompt_tokens_total", "Prompt tokens (rendered messages and generation prompt).",
          std::to_string(prompt_tokens_));
  counter("orbit_completion_tokens_total", "Tokens generated.", std::to_string(completion_tokens_));
  counter("orbit_forward_tokens_total", "Prompt tokens orbit forwarded on the critical path.", number(forward_tokens_));
  counter("orbit_radix_cache_tokens_total",
          "Prompt tokens a radix prefix cache with the same KV memory would have forwarded.",
          std::to_string(radix_tokens_));
  counter("orbit_idle_forward_tokens_total", "Tokens forwarded in idle time for prompts yet to come.",
          number(idle_forward_tokens_));
  counter("orbit_cancelled_total", "Requests cancelled because the client went away.", std::to_string(cancelled_));
  counter("orbit_stalled_clients_total",
          "Answers given up because their client took none of them for --stall-seconds, or less than "
          "--min-drain-rate over that long spent waiting for it.",
          std::to_string(stalled_));
  counter("orbit_slow_clients_total", "Answers given up because their client took less than --min-drain-rate.",
          std::to_string(slow_clients_));
  out << "# HELP orbit_store_write_failures_total Answers given whose write to the store they asked for failed.\n"
      << "# TYPE orbit_store_write_failures_total counter\n";
  for (const auto& [store, n] : store_write_failures_) {
    out << "orbit_store_write_failures_total{store=\"" << store << "\"} " << n << "\n";
  }
  out << "# HELP orbit_tool_call_stream_mismatches_total Streamed answers that did not hold a tool call as it was "
         "streamed (the stream ended with an error), by how they differ.\n"
      << "# TYPE orbit_tool_call_stream_mismatches_total counter\n";
  for (const auto& [what, n] : tool_stream_mismatches_) {
    out << "orbit_tool_call_stream_mismatches_total{what=\"" << what << "\"} " << n << "\n";
  }
  out << "# HELP orbit_requests_in_flight Requests to a model endpoint from arrival until their answer ended.\n"
      << "# TYPE orbit_requests_in_flight gauge\n";
  for (const auto& [endpoint, n] : in_flight_) {
    out << "orbit_requests_in_flight{endpoint=\"" << endpoint << "\"} " << n << "\n";
  }
  out << "# HELP orbit_queue_depth Requests waiting for their next forward.\n# TYPE orbit_queue_depth gauge\n"
      << "orbit_queue_depth " << gauges.queue_depth << "\n";
  out << "# HELP orbit_sessions Sessions known, and those whose window is in memory.\n# TYPE orbit_sessions gauge\n"
      << "orbit_sessions{state=\"known\"} " << gauges.sessions << "\n"
      << "orbit_sessions{state=\"resident\"} " << gauges.resident_sessions << "\n";
  out << "# HELP orbit_anonymous_windows Windows kept for requests without a session, and those in memory.\n"
      << "# TYPE orbit_anonymous_windows gauge\n"
      << "orbit_anonymous_windows{state=\"known\"} " << gauges.anonymous_windows << "\n"
      << "orbit_anonymous_windows{state=\"resident\"} " << gauges.resident_anonymous_windows << "\n";
  out << "# HELP orbit_window_past_bytes Host memory the windows in memory keep as one contiguous copy of their KV "
         "between reads (the engine's window_past), as of each window's last request.\n"
      << "# TYPE orbit_window_past_bytes gauge\norbit_window_past_bytes " << gauges.window_past_bytes << "\n";
  out << "# HELP orbit_request_seconds Time from a request's arrival to its last byte.\n"
      << "# TYPE orbit_request_seconds histogram\n";
  for (const auto& [endpoint, h] : latency_) out << h.render("orbit_request_seconds", "endpoint=\"" + endpoint + "\"");
  out << "# HELP orbit_first_token_seconds Time from a request's arrival to its first generated token.\n"
      << "# TYPE orbit_first_token_seconds histogram\n";
  for (const auto& [endpoint, h] : first_token_) {
    out << h.render("orbit_first_token_seconds", "endpoint=\"" + endpoint + "\"");
  }
  out << "# HELP orbit_forward_wait_seconds Time a forward waited for the engine.\n"
      << "# TYPE orbit_forward_wait_seconds histogram\n"
      << wait_.render("orbit_forward_wait_seconds", "") << gauges.more;
  return out.str();
}

}  // namespace orbit::serve
