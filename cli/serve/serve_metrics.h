// The counters `orbit serve` exposes at /metrics, in Prometheus' text format (version 0.0.4).
//
//   orbit_requests_total{endpoint, status}      every answer, once, by endpoint and HTTP status: the model
//                                               endpoints' (chat, completions, responses) at their end,
//                                               streams included (a whole answer whose client left before
//                                               it ended: 499, "client closed request"); every other path's, /health,
//                                               /metrics, 404s of unknown paths, 405s, preflights and the refusals of
//                                               the reading thread (400, 408, 413, 503, ...) as "other" or
//                                               by the path's endpoint
//   orbit_prompt_tokens_total                   prompt tokens (the rendered messages + generation prompt)
//   orbit_completion_tokens_total               tokens generated
//   orbit_forward_tokens_total                  tokens orbit forwarded on the critical path for prompts
//   orbit_radix_cache_tokens_total              what a radix prefix cache (SGLang's, token granular, with the
//                                               same KV memory) would have forwarded for the same prompts: Σ
//                                               usage.orbit.radix_cache_tokens, the engine's yardstick
//                                               (serve_core.h)
//   orbit_idle_forward_tokens_total             tokens forwarded in idle time for prompts yet to come (answers
//                                               prefilled as sessions send them back)
//   orbit_cancelled_total                       requests ended by a client that went away
//   orbit_stalled_clients_total                 answers given up because their client took none of them for
//                                               --stall-seconds, or less than --min-drain-rate over that long
//                                               spent waiting for it (its request ends as cancelled: counted
//                                               above)
//   orbit_slow_clients_total                    of those, the ones given up for --min-drain-rate
//   orbit_requests_in_flight{endpoint}          model-endpoint requests (chat, completions, responses) from
//                                               arrival until their answer ended, whatever ended it (gauge;
//                                               the count SIGTERM's drain waits for: request_count.h)
//   orbit_queue_depth                           requests waiting for their next forward (gauge)
//   orbit_sessions                              sessions known / resident (gauges, label state)
//   orbit_background_jobs, _bytes               background jobs queued for idle time and the KV they hold (gauges;
//   orbit_background_dropped_total              --background-mb bounds the bytes), and those dropped past it
//   orbit_request_seconds{endpoint}             histogram: time from arrival to the last byte of the
//                                               requests that ran on the model (count_request), whatever
//                                               their status; a request refused before it ran (bad JSON,
//                                               unknown model, 408, 413, 503 draining, ...) is not in it
//   orbit_first_token_seconds{endpoint}         histogram: time from arrival to the first generated token
//   orbit_forward_wait_seconds                  histogram: time a forward waited for the gate
//   orbit_audit*, orbit_exact_requests_total, orbit_exact_kv_requests_total
//                                               the fidelity audit's (audit.h: Auditor::render_metrics)
//   orbit_store_write_failures_total{store}     answers to store: true requests given but not written to their
//                                               store (store "chat_completions" or "responses"; the write failed
//                                               after the run: store_write.h)
//   orbit_store_pending{store}                  answers held for a retry of their failed write, and their
//   orbit_store_pending_bytes{store}            bytes (gauges; pending_writes.h)
//   orbit_store_retried_total{store}            held answers a retry wrote
//   orbit_store_dropped_total{store}            answers whose failed write was given up: no room to hold them
//                                               (--store-pending-mb), or held in memory only and still unwritten
//                                               at shutdown
//   orbit_store_pending_journaled{store}        of the answers held, those in the journal (gauge; held_journal.h)
//   orbit_store_recovered_total{store}          answers read back from a journal at start and written since
//   orbit_chat_completions_stored_total,        chat completions written, and the transactions that wrote them
//   orbit_chat_completions_commits_total        (their ratio is the mean group: group_commit.h); without --store
//                                               to the store's in-memory database, so counted too
//   orbit_responses_stored_total,               the same for stored responses (on disk only: without --store
//                                               they are kept in a map, not written, and these stay 0)
//   orbit_responses_commits_total
//   orbit_constraint_cache_entries, _bytes,     the constraints kept for forced calls and JSON answers and the
//   orbit_constraint_cache_budget_bytes         bytes they hold, grammars and token masks counted, against
//                                               their budget (answer_constraint.h: ConstraintCache)
//   orbit_constraint_cache_hits_total,          requests whose tools or schema found their constraint kept, and
//   orbit_constraint_cache_misses_total         those that built it (a tools' check counts as a lookup of its own)
//   orbit_sync_memo_entries{memo},              the message lists Window::sync's process-wide memos keep, and
//   orbit_sync_memo_bytes{memo}                 the bytes they hold (gauges; memo "cuts": their prefixes'
//                                               renders, "encodings": their tokens; orbit/sync_memo.h), against
//                                               --sync-memo-entries and --sync-memo-mb
//
// Thread-safety: every member may be called from any thread.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "orbit/engine.h"
#include "orbit/sync_memo.h"
#include "serve/stored/pending_writes.h"

namespace orbit::serve {

// A Prometheus histogram with fixed buckets in seconds.
class Histogram {
 public:
  static constexpr std::array<double, 14> kBounds = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                                     0.25,  0.5,    1,     2.5,  5,     10,   30};
  void observe(double seconds);
  // Lines for `name` with the given label set ("" or `key="value"`).
  std::string render(const std::string& name, const std::string& labels) const;

 private:
  std::array<int64_t, kBounds.size()> counts_{};  // per bucket, not cumulative
  int64_t count_ = 0;
  double sum_ = 0;
};

// Gauges read at render time (the server's queue and sessions).
struct MetricGauges {
  int64_t queue_depth = 0;
  int64_t sessions = 0;
  int64_t resident_sessions = 0;
  int64_t anonymous_windows = 0;           // kept for requests without a session (session_table.h)
  int64_t resident_anonymous_windows = 0;  // ... whose window is in memory
  int64_t window_past_bytes = 0;           // the resident windows' kept pasts (WindowStats::past_bytes)
  std::string more;  // lines other parts render (the fidelity audit's, audit.h), appended as they are
};

// The engine's memory as /metrics gauges: the chunks registered, the KV pool's pages (total, free) and each enabled
// store tier's entries, bytes and budget (the host tier holds chunks' and answers' KV for reuse up to its budget,
// --host-budget-mb); the store's faults (orbit_store_faults_total{kind}: corrupt_read, unreadable_read, disk_write,
// remote_corrupt, remote_unauthenticated), whether its disk tier is degraded, the remote entries the server evicted
// in part (orbit_store_remote_incomplete_total) and the remote writes given up undelivered
// (orbit_store_remote_abandoned_total: RemoteStats::abandoned).
std::string render_memory_metrics(const EngineStats& stats);

// A store's writes (StoreWrites, group_commit.h: items committed and the commits that held them) as the
// /metrics counters orbit_<store>_stored_total and orbit_<store>_commits_total; `what` names the items
// ("Chat completions") in their help.
std::string render_store_metrics(const std::string& store, const std::string& what, int64_t stored, int64_t commits);

// The stores' held writes (PendingStats, pending_writes.h), by store name, as the /metrics families
// orbit_store_pending, orbit_store_pending_bytes, orbit_store_retried_total, orbit_store_dropped_total,
// orbit_store_pending_journaled and orbit_store_recovered_total.
std::string render_pending_metrics(const std::vector<std::pair<std::string, PendingStats>>& stores);

// The constraint cache's state (answer_constraint.h: ConstraintCache::Usage) for /metrics.
struct ConstraintMetrics {
  int64_t entries = 0;       // gauge
  int64_t bytes = 0;         // gauge
  int64_t budget_bytes = 0;  // gauge
  int64_t hits = 0;          // counter
  int64_t misses = 0;        // counter
};
std::string render_constraint_metrics(const ConstraintMetrics& m);

// Window::sync's memos (orbit/sync_memo.h: sync_memo_usage) as the /metrics gauges orbit_sync_memo_entries{memo}
// and orbit_sync_memo_bytes{memo}.
std::string render_sync_memo_metrics(const SyncMemoUsage& usage);

class ServeMetrics {
 public:
  // A request that ran on the model (a run started, RequestPath::run), answered `status` after `seconds`:
  // in orbit_requests_total and in the endpoint's orbit_request_seconds.
  void count_request(const std::string& endpoint, int status, double seconds);
  // An answer that ran nothing on the model: a refusal before the run (a body that is not valid, a model
  // or session that does not exist, 408, 413, 503 while draining), an unknown path's 404, a 405, a CORS
  // preflight, and every path besides the model endpoints. Counted in orbit_requests_total{endpoint, status}
  // as every answer is, but not in the endpoint's orbit_request_seconds, whose times are its runs'.
  void count_untimed(const std::string& endpoint, int status);
  // A model-endpoint request arrived / its answer ended (RequestCount): orbit_requests_in_flight{endpoint}.
  void enter(const std::string& endpoint);
  void leave(const std::string& endpoint);
  void count_first_token(const std::string& endpoint, double seconds);
  void count_wait(double seconds);
  void count_tokens(int64_t prompt, int64_t completion, double forward, int64_t radix);
  void count_cancelled();
  // HttpFront gave up an answer its client did not read, or read too slowly (`slow`; FrontHooks::stalled).
  void count_stalled(bool slow);
  void count_idle_forward(double tokens);
  // An answer given whose write to `store` ("chat_completions", "responses") failed.
  void count_store_write_failure(const std::string& store);
  // A streamed choice whose answer did not hold a tool call as it was streamed (RunResult::tool_stream_mismatch),
  // by how they differ ("missing", "name", "arguments"): orbit_tool_call_stream_mismatches_total{what}.
  void count_tool_stream_mismatch(const std::string& what);
  std::string render(const MetricGauges& gauges) const;

 private:
  mutable std::mutex mutex_;
  std::map<std::pair<std::string, int>, int64_t> requests_;
  std::map<std::string, Histogram> latency_;
  std::map<std::string, Histogram> first_token_;
  Histogram wait_;
  int64_t prompt_tokens_ = 0;
  int64_t completion_tokens_ = 0;
  double forward_tokens_ = 0;
  int64_t radix_tokens_ = 0;
  int64_t cancelled_ = 0;
  int64_t stalled_ = 0;
  int64_t slow_clients_ = 0;
  std::map<std::string, int64_t> in_flight_ = {{"chat", 0}, {"completions", 0}, {"responses", 0}};
  double idle_forward_tokens_ = 0;
  std::map<std::string, int64_t> store_write_failures_ = {{"chat_completions", 0}, {"responses", 0}};
  std::map<std::string, int64_t> tool_stream_mismatches_ = {{"missing", 0}, {"name", 0}, {"arguments", 0}};
};

}  // namespace orbit::serve
