#include "serve/serve_core.h"

#include <chrono>
#include <cstdio>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

#include "orbit/common/error.h"
#include "orbit/sync_memo.h"

namespace orbit::serve {

using nlohmann::json;

namespace {

// The engine has made the store directory by now (EngineOptions::store_dir is created when missing).
ResponseStoreOptions response_store_options(const ServeOptions& o) {
  ORBIT_CHECK(o.max_responses >= 1, "serve: max_responses must be at least 1 (got " << o.max_responses << ")");
  ResponseStoreOptions r;
  r.capacity = static_cast<std::size_t>(o.max_responses);
  r.group_commit = o.store_group_commit;
  r.pending_bytes = static_cast<std::size_t>(o.store_pending_bytes);
  if (!o.store_dir.empty()) r.path = o.store_dir + "/serve-responses.sqlite";
  return r;
}

ChatStoreOptions chat_store_options(const ServeOptions& o) {
  ORBIT_CHECK(o.max_chat_completions >= 1,
              "serve: max_chat_completions must be at least 1 (got " << o.max_chat_completions << ")");
  ChatStoreOptions c;
  c.capacity = static_cast<std::size_t>(o.max_chat_completions);
  c.group_commit = o.store_group_commit;
  c.pending_bytes = static_cast<std::size_t>(o.store_pending_bytes);
  if (!o.store_dir.empty()) c.path = o.store_dir + "/serve-chat-completions.sqlite";
  return c;
}

}  // namespace

ServeCore::ServeCore(const ServeOptions& options)
    : context_(options),
      sessions_(context_, [this] { idle_.notify(); }),
      requests_(context_, sessions_),
      idle_(context_, sessions_),
      responses_(response_store_options(options)),
      chat_completions_(chat_store_options(options)),
      store_retry_({[this] { chat_completions_.retry_pending(false); }, [this] { responses_.retry_pending(false); }},
                   kStoreRetryPeriod) {
  idle_.start();
}

ServeCore::~ServeCore() { close(); }

RunTicket ServeCore::prepare_chat(const ChatRequest& request, const std::string& session) {
  return requests_.prepare_chat(request, session);
}

RunTicket ServeCore::prepare_completion(const CompletionRequest& request) {
  return requests_.prepare_completion(request);
}

RunOutcome ServeCore::run(RunTicket& ticket, const RunSink& sink) {
  if (context_.options.test_fault == "run") {  // ServeOptions::test_fault: tests only
    throw std::runtime_error("fault injected before the run (ORBIT_SERVE_TEST_FAULT=run, for tests only)");
  }
  RunOutcome out = requests_.run(ticket, sink);
  run_owed_audit();
  if (context_.options.deterministic) idle_.run_now();  // the window released: its idle work, before the answer ends
  return out;
}

// An audit idle time did not reach (back-to-back requests leave none) is owed (audit.h): run here, once the run
// has decoded its answer, on a gate turn of its own, so the client's first token does not wait for its two reads.
// It measures the fork its own request was answered from, whenever it runs. A failure (say the pool cannot hold
// the re-prefill) costs the audit, logged and counted, not the request.
void ServeCore::run_owed_audit() {
  if (!context_.auditor.owed()) return;
  GateTurn turn(context_, "~audit", {});
  if (!turn.enter()) return;  // the server closes
  try {
    context_.compute.run([this] { sessions_.audit_one(true); });
  } catch (const std::exception& e) {
    std::fprintf(stderr, "orbit serve: an owed audit failed (its request goes on): %s\n", e.what());
  }
}

RunOutcome ServeCore::chat(const ChatRequest& request, const std::string& session, const RunSink& sink) {
  RunTicket ticket = prepare_chat(request, session);
  return run(ticket, sink);
}

RunOutcome ServeCore::complete(const CompletionRequest& request, const RunSink& sink) {
  RunTicket ticket = prepare_completion(request);
  return run(ticket, sink);
}

json ServeCore::models() const {
  return {{"object", "list"},
          {"data", json::array({{{"id", context_.model_name},
                                 {"object", "model"},
                                 {"created", 0},
                                 {"owned_by", "orbit"},
                                 {"context_length", context_.info.max_positions}}})}};
}

MetricGauges ServeCore::gauges() {
  MetricGauges g = sessions_.counts();
  g.queue_depth = context_.gate.waiting();
  const ConstraintCache::Usage constraints = context_.constraints->usage();
  const StoreWrites chat = chat_completions_.writes();
  const StoreWrites responses = responses_.writes();
  const std::vector<std::pair<std::string, PendingStats>> pending = {{"chat_completions", chat_completions_.pending()},
                                                                     {"responses", responses_.pending()}};
  g.more = context_.auditor.render_metrics() + context_.decoder.render_metrics() + idle_.render_metrics() +
           render_memory_metrics(context_.engine->stats()) +
           render_store_metrics("chat_completions", "Chat completions", chat.items, chat.commits) +
           render_store_metrics("responses", "Responses", responses.items, responses.commits) +
           render_pending_metrics(pending) +
           render_constraint_metrics(ConstraintMetrics{
               static_cast<int64_t>(constraints.entries), static_cast<int64_t>(constraints.bytes),
               static_cast<int64_t>(context_.constraints->max_bytes()), constraints.hits, constraints.misses}) +
           render_sync_memo_metrics(sync_memo_usage());
  return g;
}

CloseReport ServeCore::close(const CloseOptions& engine_close) {
  std::lock_guard<std::mutex> lock(close_mutex_);
  if (closed_) return {};
  context_.closing = true;
  idle_.stop();
  context_.gate.close();
  // Wait for the forward in flight: the gate is free once its holder leaves.
  while (context_.gate.busy()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  context_.decoder.stop();  // what it still holds ends as cancelled; it can no longer touch a window
  sessions_.close_all();
  const CloseReport report = close_engine(engine_close);
  // No request is left to store an answer: the held writes get their last try, and what is still held is
  // named on stderr: kept in the store's journal for the next start, or (held in memory only) lost.
  store_retry_.stop();
  const std::size_t lost = chat_completions_.drain_pending() + responses_.drain_pending();
  if (lost > 0) std::fprintf(stderr, "orbit serve: stored answers not written before shutdown: %zu\n", lost);
  closed_ = true;
  return report;
}

CloseReport ServeCore::close_engine(const CloseOptions& options) {
  const EngineStats before = context_.engine->stats();
  const bool kept = !context_.options.store_dir.empty() || !context_.options.remote.empty();
  if (kept && before.background_pending > 0 && options.finish_seconds > 0) {
    std::fprintf(stderr,
                 "orbit serve: finishing %lld queued background job(s) for the store (at most %g s; send the signal "
                 "again to drop them)\n",
                 static_cast<long long>(before.background_pending), options.finish_seconds);
  }
  const CloseReport report = context_.engine->close(options);
  if (kept && report.dropped > 0) {
    std::fprintf(stderr,
                 "orbit serve: dropped %lld queued background job(s) unfinished (--drain-seconds ran out, or the "
                 "signal came again); their patches are formed again when a later run needs them\n",
                 static_cast<long long>(report.dropped));
  }
  return report;
}

}  // namespace orbit::serve
