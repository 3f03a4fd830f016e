// One model-endpoint request's place in the metrics and in the drain (POST /v1/chat/completions,
// /v1/completions, /v1/responses): from its construction the request is in flight (the drain waits for it),
// and it is counted once in orbit_requests_total and leaves the in-flight count (the drain's, and
// orbit_requests_in_flight{endpoint}) once, on every path,
// exceptions included. The route says how it ended (refused before a run, or a run's status and usage); a
// RequestCount destroyed before either (an exception escaped the route or its stream) counts a 500, timed
// when the run had begun, so neither the count nor the drain depends on the route reaching its last line.
//
// Ownership: a whole answer's lives in the handler's frame; a stream's in the state its content provider
// holds, released with the provider when cpp-httplib is done with the answer (sent, or its connection gone).
// Thread-safety: one request's, used by the thread answering it; the counters it updates are atomic.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <utility>

#include "orbit/common/clock.h"
#include "serve/serve_metrics.h"
#include "serve/serve_types.h"

namespace orbit::serve {

class RequestCount {
 public:
  using Clock = std::chrono::steady_clock;

  RequestCount(ServeMetrics& metrics, std::atomic<int64_t>& in_flight, std::string endpoint)
      : metrics_(metrics), in_flight_(in_flight), endpoint_(std::move(endpoint)) {
    ++in_flight_;
    metrics_.enter(endpoint_);  // orbit_requests_in_flight{endpoint}
  }
  RequestCount(const RequestCount&) = delete;
  RequestCount& operator=(const RequestCount&) = delete;
  ~RequestCount() {
    if (!counted_) {  // an exception ended the route or its stream: the answer is cpp-httplib's 500 or cut
      if (running_) {
        metrics_.count_request(endpoint_, 500, seconds_since(t0));
      } else {
        metrics_.count_untimed(endpoint_, 500);
      }
    }
    metrics_.leave(endpoint_);
    --in_flight_;
  }

  // The request's arrival: its latency sample's start.
  const Clock::time_point t0 = Clock::now();

  // Refused before it ran (bad body, unknown model, 503 while draining, ...): counted, not timed.
  void refused(int status) {
    if (counted_) return;
    counted_ = true;
    metrics_.count_untimed(endpoint_, status);
  }
  // Its run begins: from here on it is timed, also if it never reaches ran().
  void running() { running_ = true; }
  // Its run ended with `out`: its status (200 with a result, else the error's), latency and tokens.
  // `whole`: an answer sent in one body, not streamed, which a client that left before it ended (finish_reason
  // "cancelled") never got: 499, nginx's "client closed request", not an answer given. A stream's 200 went out
  // with its head.
  void ran(const RunOutcome& out, bool whole = false) {
    if (counted_) return;
    counted_ = true;
    const bool left = whole && out.result && out.result->finish_reason == "cancelled";
    metrics_.count_request(endpoint_, left ? kClientClosed : out.result ? 200 : out.error.status, seconds_since(t0));
    if (out.result) {
      const RunUsage& u = out.result->usage;
      metrics_.count_tokens(u.prompt_tokens, u.completion_tokens, u.forward_tokens, u.radix_cache_tokens);
    }
  }
  // Ended by an exception the route caught itself (a stream that then wrote its error event): a 500.
  void failed() {
    if (counted_) return;
    counted_ = true;
    metrics_.count_request(endpoint_, 500, seconds_since(t0));
  }
  bool counted() const { return counted_; }

  static constexpr int kClientClosed = 499;

 private:
  ServeMetrics& metrics_;
  std::atomic<int64_t>& in_flight_;
  std::string endpoint_;
  bool running_ = false;
  bool counted_ = false;
};

}  // namespace orbit::serve
