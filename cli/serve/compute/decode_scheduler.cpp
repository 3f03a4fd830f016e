#include "serve/compute/decode_scheduler.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <climits>
#include <cstdio>
#include <map>
#include <sstream>

#ifdef __linux__
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <ctime>
#endif

#include "orbit/common/error.h"
#include "serve/serve_context.h"

namespace orbit::serve {

namespace {

// Upper bounds of the batch-size histogram's buckets (sequences per step's forward).
constexpr std::array<int64_t, 8> kBatchBounds = {1, 2, 4, 8, 16, 32, 64, 128};

}  // namespace

#ifdef __linux__
void StepSignal::wait(uint32_t seen, int wait_ms) {
  // Counted before the generation is read again, and raise() reads the count after moving it on (both
  // sequentially consistent): a raise either sees this waiter or moved the generation before the futex's own
  // check, so no wake is lost.
  waiters_.fetch_add(1);
  long woken = -1;
  if (generation_.load() == seen && wait_ms > 0) {
    timespec timeout{wait_ms / 1000, static_cast<long>(wait_ms % 1000) * 1000000L};
    woken =
        syscall(SYS_futex, reinterpret_cast<uint32_t*>(&generation_), FUTEX_WAIT_PRIVATE, seen, &timeout, nullptr, 0);
  }
  waiters_.fetch_sub(1);
  // Woken: perhaps by a raise that moved the other waiters onto relay_ (the kernel wakes this thread only once
  // they are there), which are woken here, off the raising thread. Those return here too and find relay_
  // empty (a system call that wakes nobody).
  if (woken == 0) {
    syscall(SYS_futex, reinterpret_cast<uint32_t*>(&relay_), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr, nullptr, 0);
  }
}

void StepSignal::raise() {
  const uint32_t now = generation_.fetch_add(1) + 1;
  const int waiting = waiters_.load();
  if (waiting == 0) return;
  auto* word = reinterpret_cast<uint32_t*>(&generation_);
  // One waiter woken, the others requeued onto relay_ for it to wake (wait() above): a futex wake costs the
  // waking thread a scheduler wake-up per thread, which at 16 sessions was about 8% of the decode thread's
  // time. Refused (EAGAIN) when another raise moved the generation meanwhile: then all woken here.
  if (waiting > 1 && syscall(SYS_futex, word, FUTEX_CMP_REQUEUE_PRIVATE, 1, static_cast<long>(INT_MAX),
                             reinterpret_cast<uint32_t*>(&relay_), now) >= 0) {
    return;
  }
  syscall(SYS_futex, word, FUTEX_WAKE_PRIVATE, INT_MAX, nullptr, nullptr, 0);
}
#else
void StepSignal::wait(uint32_t seen, int wait_ms) {
  std::unique_lock<std::mutex> lock(mutex_);
  waiters_.fetch_add(1);
  changed_.wait_for(lock, std::chrono::milliseconds(wait_ms), [&] { return generation_.load() != seen; });
  waiters_.fetch_sub(1);
}

void StepSignal::raise() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    generation_.fetch_add(1);
  }
  changed_.notify_all();
}
#endif

int64_t event_bytes(const DecodeEvent& event) {
  int64_t bytes = static_cast<int64_t>(sizeof(DecodeEvent) + event.delta.size());
  if (event.logprobs) {
    bytes += static_cast<int64_t>((1 + event.logprobs->top.size()) * sizeof(TokenLogprob) +
                                  event.logprobs->chosen.bytes.size());
    for (const TokenLogprob& t : event.logprobs->top) bytes += static_cast<int64_t>(t.bytes.size());
  }
  return bytes;
}

void DecodeJob::post(DecodeEvent event) {
  std::lock_guard<std::mutex> lock(mutex_);
  events_.push_back(std::move(event));
}

// Raises after the lock: once the request's thread sees the job done it may drop it (and, being the last
// owner, destroy it), so nothing of the job is touched after the lock is released; the signal is the
// scheduler's.
void DecodeJob::finish(std::optional<Generation> g, std::string error) {
  StepSignal& signal = signal_;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ended_ = g.has_value();
    result_ = std::move(g);
    error_ = std::move(error);
    done_ = true;
  }
  signal.raise();
}

std::optional<Generation> DecodeJob::take_result() {
  std::lock_guard<std::mutex> lock(mutex_);
  std::optional<Generation> out = std::move(result_);
  result_.reset();
  return out;
}

bool DecodeJob::ended() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return ended_;
}

std::string DecodeJob::error() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return error_;
}

DecodeJob::~DecodeJob() {
  // Taken once more before the members go: the last reads of another thread (under this lock) happen before.
  std::lock_guard<std::mutex> lock(mutex_);
}

bool DecodeJob::drain(std::vector<DecodeEvent>& out) {
  const bool any = !events_.empty();
  for (DecodeEvent& e : events_) out.push_back(std::move(e));
  events_.clear();
  return done_ || any;
}

bool DecodeJob::take(std::vector<DecodeEvent>& out, int wait_ms) {
  // The generation is read before the job: a post or finish after this check is followed by a raise that
  // moves it on, so the wait below cannot miss it.
  const uint32_t seen = signal_.seen();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (drain(out) || wait_ms <= 0) return done_;
  }
  signal_.wait(seen, wait_ms);
  std::lock_guard<std::mutex> lock(mutex_);
  drain(out);
  return done_;
}

void DecodeScheduler::submit(const std::vector<std::shared_ptr<DecodeJob>>& jobs) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) {
      for (const auto& job : jobs) job->finish(std::nullopt);
      return;
    }
    if (jobs.empty()) return;
    pending_.push_back(jobs);
    pending_jobs_ += static_cast<int64_t>(jobs.size());
    if (!thread_.joinable()) thread_ = std::thread([this] { loop(); });
  }
  wake_.notify_all();
}

void DecodeScheduler::wake() {
  { std::lock_guard<std::mutex> lock(mutex_); }  // a wait_for_work between its check and its sleep sees the change
  wake_.notify_all();
}

void DecodeScheduler::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

bool DecodeScheduler::wait_for_work(std::vector<std::shared_ptr<DecodeJob>>& joining) {
  std::unique_lock<std::mutex> lock(mutex_);
  wake_.wait(lock, [&] { return stopping_ || joinable() || steppable(); });
  take_joinable(joining);
  return !stopping_;
}

namespace {

bool all_cancelled(const std::vector<std::shared_ptr<DecodeJob>>& group) {
  return std::all_of(group.begin(), group.end(), [](const auto& job) { return job->cancelled(); });
}

}  // namespace

// A group larger than --max-batch (none is: a request's n is refused above it) joins an empty batch alone.
bool DecodeScheduler::joinable() const {
  if (pending_.empty()) return false;
  const std::size_t room = static_cast<std::size_t>(context_.options.max_batch);
  if (running_.empty() || running_.size() + pending_.front().size() <= room) return true;
  return std::any_of(pending_.begin(), pending_.end(), all_cancelled);
}

// The groups whose runs were all cancelled leave the queue wherever they are (their requests wait for their
// end); the others join in order while they fit.
void DecodeScheduler::take_joinable(std::vector<std::shared_ptr<DecodeJob>>& joining) {
  const std::size_t room = static_cast<std::size_t>(context_.options.max_batch);
  bool blocked = false;
  for (auto it = pending_.begin(); it != pending_.end();) {
    const std::size_t after = running_.size() + joining.size() + it->size();
    const bool fits = !blocked && (after <= room || (running_.empty() && joining.empty()));
    if (!fits && !all_cancelled(*it)) {
      blocked = true;
      ++it;
      continue;
    }
    pending_jobs_ -= static_cast<int64_t>(it->size());
    joining.insert(joining.end(), it->begin(), it->end());
    it = pending_.erase(it);
  }
}

// A queued group that does not fit beside the running sequences (none of its runs cancelled): room is wanted.
bool DecodeScheduler::room_wanted() const { return !pending_.empty() && !joinable(); }

bool DecodeScheduler::steppable() const {
  if (!running_.empty() && room_wanted()) return true;  // no sequence is held then (apply_holds)
  return std::any_of(running_.begin(), running_.end(), [](const Running& r) { return !r.job->wants_hold(); });
}

bool DecodeScheduler::steppable_now() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return steppable();
}

// A request's backlog is read once per pass, so that its choices are held and released together and stay in
// step: its thread hands a choice's k-th token on only after every choice's (k-1)-th (choice_order.h), and a
// choice held behind the others would hold back what the others posted. While a queued request waits for room
// in the batch no sequence is held: a held one would keep its slot for as long as its client does not read (six
// clients that stop reading n=64 answers filled the 256 slots, and every other request waited for them), so it
// decodes on, its output kept for its client beyond --max-unsent-kb, until it ends and frees its slot.
void DecodeScheduler::apply_holds() {
  int64_t held = 0, new_holds = 0;
  bool make_room = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    make_room = room_wanted();
  }
  std::map<const OutputBacklog*, bool> over;
  for (Running& r : running_) {
    const OutputBacklog* backlog = r.job->backlog();
    bool want = false;
    if (backlog != nullptr && !r.job->cancelled() && !make_room) {
      const auto [it, fresh] = over.try_emplace(backlog, false);
      if (fresh) it->second = backlog->over();
      want = it->second;
    }
    if (want != r.held) {
      batch_.hold(r.id, want);
      r.held = want;
      new_holds += want ? 1 : 0;
    }
    held += r.held ? 1 : 0;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  held_now_ = held;
  holds_ += new_holds;
}

// A held sequence takes no forward until its client reads, so a batch of held sequences alone (and no job
// waiting to join) gives the gate's idle work its turn; the next step holds it off again (loop()). The step
// that follows a client's read waits at most for the idle slice under way, as a request that arrives does.
void DecodeScheduler::release_idle_if_held_only() {
  if (holding_idle_ && !steppable_now() && !has_pending()) context_.gate.hold_idle(holding_idle_ = false);
}

bool DecodeScheduler::has_pending() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return joinable();
}

// Ends every sequence and job here without touching their windows (the gate is closed, or the thread stops).
void DecodeScheduler::drop_all(std::vector<std::shared_ptr<DecodeJob>>& joining) {
  if (holding_idle_) context_.gate.hold_idle(holding_idle_ = false);
  for (Running& r : running_) r.job->finish(std::nullopt);
  for (auto& job : joining) job->finish(std::nullopt);
  running_.clear();
  joining.clear();
  batch_ = DecodeBatch();
  std::lock_guard<std::mutex> lock(mutex_);
  running_now_ = 0;
  held_now_ = 0;
}

// Jobs whose client left before they joined end here. Each job's flag is read once: a request thread may cancel
// at any moment, and a job taken out as cancelled but not finished (or finished but kept to join) leaves its
// request waiting forever, or hands the batch a window its request already let go.
void DecodeScheduler::end_cancelled(std::vector<std::shared_ptr<DecodeJob>>& joining) {
  std::size_t kept = 0;
  for (std::size_t i = 0; i < joining.size(); ++i) {
    if (joining[i]->cancelled()) {
      joining[i]->finish(std::nullopt);
    } else if (kept++ != i) {
      joining[kept - 1] = std::move(joining[i]);
    }
  }
  joining.resize(kept);
}

void DecodeScheduler::loop() {
  std::vector<std::shared_ptr<DecodeJob>> joining;
  while (wait_for_work(joining)) {
    end_cancelled(joining);
    apply_holds();  // a sequence whose client has not taken its output takes no forward (OutputBacklog)
    if (joining.empty() && !steppable_now()) {
      release_idle_if_held_only();
      continue;
    }
    if (!context_.enter_gate(kDecodeLane, [this] { return context_.closing.load() || stopping_.load(); })) {
      drop_all(joining);  // closed or stopping: nothing may touch the windows any more
      continue;
    }
    if (!holding_idle_) context_.gate.hold_idle(holding_idle_ = true);  // no idle work between steps
    std::vector<Outcome> ended;
    {
      GateHold hold(context_.gate);
      ended = run_step(joining);
    }
    signal_.raise();  // the step's tokens to every request thread waiting, once the gate is free
    if (running_.empty() && !has_pending()) context_.gate.hold_idle(holding_idle_ = false);
    // After the gate and idle work are free: a run that returns finds the server idle.
    for (Outcome& o : ended) o.job->finish(std::move(o.generation), std::move(o.error));
    apply_holds();  // before the wait: the sequences it will not wake for are held (and counted) now
    release_idle_if_held_only();
  }
  drop_all(joining);
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& group : pending_) {
    for (auto& job : group) job->finish(std::nullopt);
  }
  pending_.clear();
  pending_jobs_ = 0;
}

std::vector<DecodeScheduler::Outcome> DecodeScheduler::run_step(std::vector<std::shared_ptr<DecodeJob>>& joining) {
  std::vector<Outcome> ended;
  for (auto& job : joining) {
    try {
      running_.push_back({batch_.add(job->request()), job, false});
    } catch (const std::exception& e) {
      ended.push_back({job, std::nullopt, e.what()});  // refused (the options) or its repairs could not run
    }
  }
  joining.clear();
  if (running_.empty()) return ended;
  DecodeStep step;
  try {
    step = batch_.step();
  } catch (const std::exception& e) {
    // The batch dropped every sequence: each request answers the engine's failure.
    for (Running& r : running_) ended.push_back({r.job, std::nullopt, e.what()});
    running_.clear();
    batch_ = DecodeBatch();
    std::fprintf(stderr, "orbit serve: a decode step failed: %s\n", e.what());
    return ended;
  }
  for (auto& [id, g] : step.finished) {
    const auto it = std::find_if(running_.begin(), running_.end(), [&](const Running& r) { return r.id == id; });
    ended.push_back({it->job, std::move(g), ""});
    running_.erase(it);
  }
  count_step(step);
  return ended;
}

void DecodeScheduler::count_step(const DecodeStep& step) {
  std::lock_guard<std::mutex> lock(mutex_);
  running_now_ = static_cast<int64_t>(running_.size());
  if (step.sequences == 0) return;
  ++steps_;
  tokens_ += step.tokens;
  if (batch_sizes_.empty()) batch_sizes_.assign(kBatchBounds.size() + 1, 0);
  std::size_t b = 0;
  while (b < kBatchBounds.size() && step.sequences > kBatchBounds[b]) ++b;
  ++batch_sizes_[b];
  batch_size_sum_ += static_cast<double>(step.sequences);
}

std::string DecodeScheduler::render_metrics() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::ostringstream out;
  out << "# HELP orbit_decode_steps_total Batched decode steps run (one model forward each).\n"
      << "# TYPE orbit_decode_steps_total counter\norbit_decode_steps_total " << steps_ << "\n"
      << "# HELP orbit_decode_tokens_total Tokens the decode steps forwarded (queries and decode tokens).\n"
      << "# TYPE orbit_decode_tokens_total counter\norbit_decode_tokens_total " << tokens_ << "\n"
      << "# HELP orbit_decode_batch_sequences Sequences in one decode step's forward.\n"
      << "# TYPE orbit_decode_batch_sequences histogram\n";
  int64_t cumulative = 0;
  for (std::size_t b = 0; b < kBatchBounds.size(); ++b) {
    cumulative += batch_sizes_.empty() ? 0 : batch_sizes_[b];
    out << "orbit_decode_batch_sequences_bucket{le=\"" << kBatchBounds[b] << "\"} " << cumulative << "\n";
  }
  cumulative += batch_sizes_.empty() ? 0 : batch_sizes_.back();
  out << "orbit_decode_batch_sequences_bucket{le=\"+Inf\"} " << cumulative << "\n"
      << "orbit_decode_batch_sequences_sum " << batch_size_sum_ << "\n"
      << "orbit_decode_batch_sequences_count " << cumulative << "\n"
      << "# HELP orbit_decode_running Sequences in the decode batch now.\n"
      << "# TYPE orbit_decode_running gauge\norbit_decode_running " << running_now_ << "\n"
      << "# HELP orbit_decode_held Sequences in the decode batch held because their client has not taken "
         "their output.\n"
      << "# TYPE orbit_decode_held gauge\norbit_decode_held " << held_now_ << "\n"
      << "# HELP orbit_decode_holds_total Times a sequence was held for its client (its unsent output over "
         "--max-unsent-kb).\n"
      << "# TYPE orbit_decode_holds_total counter\norbit_decode_holds_total " << holds_ << "\n"
      << "# HELP orbit_decode_prefill_yields_total Decode steps run between two pieces of a sync's prefill "
         "(--prefill-chunk).\n"
      << "# TYPE orbit_decode_prefill_yields_total counter\norbit_decode_prefill_yields_total "
      << context_.gate.yields() << "\n"
      << "# HELP orbit_prefill_guests_total Short syncs of other sessions run between two pieces of a sync's "
         "prefill (--prefill-chunk).\n"
      << "# TYPE orbit_prefill_guests_total counter\norbit_prefill_guests_total " << context_.gate.guests() << "\n"
      << "# HELP orbit_decode_waiting Sequences queued to join the decode batch: at its next step, or once "
         "others end (--max-batch).\n"
      << "# TYPE orbit_decode_waiting gauge\norbit_decode_waiting " << pending_jobs_ << "\n";
  return out.str();
}

}  // namespace orbit::serve
