// `orbit serve`: the OpenAI-compatible HTTP server (serve_http.h, serve_core.h).
#include <pthread.h>

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <utility>
#include <vector>

#include "args.h"
#include "commands.h"
#include "device_args.h"
#include "orbit/common/error.h"
#include "orbit/common/utf8.h"
#include "orbit/interrupt.h"
#include "orbit/policy.h"
#include "orbit/store.h"
#include "orbit/sync_memo.h"
#include "orbit/tool_calls.h"
#include "serve/http/serve_http.h"
#include "serve/prepare_fidelity.h"
#include "serve/run/reasoning.h"
#include "serve/serve_core.h"
#include "serve/serve_usage.h"
#include "serve/startup_signals.h"
#include "serve/store_share.h"

namespace orbit::cli {

namespace {

// The most --threads: each is a thread started at once (a value past what the system can start is a
// clean error from HttpFront, but one past int would wrap).
constexpr int64_t kMaxThreads = 4096;
// --min-drain-rate's most, bytes a second (DrainRate's arithmetic holds up to it over a day's window).
constexpr int64_t kMaxDrainRate = int64_t{1} << 30;
// --max-known-sessions' most: a record out of memory holds its id, totals and audits, no conversation
// (SessionTable::let_go), so a million of them stay small beside the windows' KV.
constexpr int64_t kMaxKnownSessions = int64_t{1} << 20;

// The server's signal thread: SIGTERM / SIGINT start the drain, and a second one during the drain ends it at
// once. Returns whether a second one did.
bool wait_for_signal(serve::HttpServer& http, const sigset_t& signals) {
  int received = 0;
  sigwait(&signals, &received);
  std::fprintf(stderr, "orbit serve: signal %d: draining %lld request(s) in flight (send it again to stop now)\n",
               received, static_cast<long long>(http.in_flight()));
  const auto second_signal = [&] {
    const timespec no_wait{0, 0};
    const int again = sigtimedwait(&signals, nullptr, &no_wait);
    if (again <= 0) return false;
    std::fprintf(stderr, "orbit serve: signal %d again: ending the drain now, %lld request(s) still in flight\n", again,
                 static_cast<long long>(http.in_flight()));
    return true;
  };
  return http.drain_and_stop(second_signal);
}

// The text of a --chat-template file; throws orbit::Error naming the file when it cannot be read, is empty or
// is not UTF-8.
std::string read_template(const std::string& path) {
  std::error_code ec;  // a directory opens as an empty stream: name it rather than call it an empty file
  ORBIT_CHECK(!std::filesystem::is_directory(path, ec),
              "serve: --chat-template " << path << ": is a directory, not a file");
  std::ifstream in(path, std::ios::binary);
  ORBIT_CHECK(in.good(), "serve: --chat-template " << path << ": cannot open the file");
  std::ostringstream text;
  text << in.rdbuf();
  ORBIT_CHECK(!in.bad(), "serve: --chat-template " << path << ": cannot read the file");
  ORBIT_CHECK(!text.str().empty(), "serve: --chat-template " << path << ": the file is empty");
  // Its bytes go into every prompt: a tokenizer.json refuses them, and each request would be a 400 blaming
  // its messages.
  ORBIT_CHECK(is_valid_utf8(text.str()), "serve: --chat-template " << path << ": the file is not valid UTF-8");
  return text.str();
}

// A size argument given in KiB (shift 10) or MiB (shift 20), in bytes; one too large for 64-bit bytes is an
// error naming it.
int64_t size_argument(const Args& args, const char* name, int64_t fallback, int64_t min_value, int shift) {
  const int64_t units = args.get_int(name, fallback, min_value);
  ORBIT_CHECK(units <= (INT64_MAX >> shift), "serve: argument '" << name << "' is too large (" << units << ")");
  return units << shift;
}

// --store-disk-mb and --remote-max-held-fraction (o.store_dir and o.remote already read): each refused, naming
// it, when out of range or given where it bounds nothing (no disk tier, no remote, an unlimited disk).
void parse_disk_options(const Args& args, serve::ServeOptions& o) {
  o.disk_budget_bytes = size_argument(args, "--store-disk-mb", 0, 0, 20);
  ORBIT_CHECK(!args.has("--store-disk-mb") || !o.store_dir.empty(),
              "serve: argument '--store-disk-mb' bounds the disk tier of --store DIR, and no --store is given");
  if (!args.has("--remote-max-held-fraction")) return;
  const double fraction = args.get_double("--remote-max-held-fraction", 0.5);
  ORBIT_CHECK(fraction >= 0.0 && fraction <= 1.0,  // NaN fails both
              "serve: argument '--remote-max-held-fraction' must be a fraction in [0, 1], got "
                  << *args.get("--remote-max-held-fraction"));
  ORBIT_CHECK(!o.remote.empty() && !o.store_dir.empty(),
              "serve: argument '--remote-max-held-fraction' bounds what --store's disk keeps for --remote's "
              "undelivered writes, and needs both (missing: "
                  << (o.remote.empty() && o.store_dir.empty() ? "--store and --remote"
                      : o.remote.empty()                      ? "--remote"
                                                              : "--store")
                  << ")");
  ORBIT_CHECK(o.disk_budget_bytes > 0,
              "serve: argument '--remote-max-held-fraction' is a share of --store-disk-mb's budget, and the disk "
              "is unlimited (give --store-disk-mb N)");
  o.remote_max_held_fraction = fraction;
}

// --store-group-commit and --store-pending-mb (after --store): how the stored answers' disk files take writes.
void parse_answer_store_options(const Args& args, serve::ServeOptions& o) {
  const std::string group_commit = args.get_or("--store-group-commit", "on");
  ORBIT_CHECK(group_commit == "on" || group_commit == "off",
              "serve: argument '--store-group-commit' must be on or off, got '" << group_commit << "'");
  o.store_group_commit = group_commit == "on";
  const int64_t pending_mb = args.get_int("--store-pending-mb", 64, 0);
  ORBIT_CHECK(pending_mb <= (int64_t{1} << 20),
              "serve: argument '--store-pending-mb' must be <= 1048576 (a TiB), got " << pending_mb);
  o.store_pending_bytes = pending_mb << 20;
  // Without --store stored answers are kept in memory: no disk sync to share, no write to hold for a retry.
  for (const char* name : {"--store-group-commit", "--store-pending-mb"}) {
    ORBIT_CHECK(!args.has(name) || !o.store_dir.empty(),
                "serve: argument '" << name << "' sets how --store's disk keeps stored answers, and no --store is "
                                    << "given (without it they are kept in memory)");
  }
}

// --audit, --audit-owed-after, --audit-exact and --no-stored-calibration (after --store and --remote), each
// refused where it would do nothing.
void parse_fidelity_options(const Args& args, serve::ServeOptions& o) {
  o.stored_calibration = !args.flag("--no-stored-calibration");
  ORBIT_CHECK(o.stored_calibration || !o.store_dir.empty() || !o.remote.empty(),
              "serve: argument '--no-stored-calibration' keeps the fidelity calibration out of --store and --remote, "
              "and neither is given");
  o.audit_rate = args.get_double("--audit", 0.1);
  ORBIT_CHECK(o.audit_rate >= 0 && o.audit_rate <= 1,
              "serve: argument '--audit' must be a fraction in [0, 1], got " << *args.get("--audit"));
  o.audit_owed_after = args.get_int("--audit-owed-after", 1, 0);
  ORBIT_CHECK(o.audit_rate > 0 || !args.has("--audit-owed-after"),
              "serve: argument '--audit-owed-after' says when an audit is owed, and --audit 0 runs none");
  o.audit_exact = args.flag("--audit-exact");
  ORBIT_CHECK(o.audit_rate > 0 || !o.audit_exact,
              "serve: argument '--audit-exact' says which requests are sampled, and --audit 0 samples none");
}

serve::ServeOptions serve_options(const Args& args) {
  serve::ServeOptions o;
  o.model = args.required("--model");
  // For tests only (ServeOptions::test_fault names each fault). Not an option: no server should run with it.
  if (const char* fault = std::getenv("ORBIT_SERVE_TEST_FAULT"); fault != nullptr && *fault != '\0') {
    const std::string f = fault;
    ORBIT_CHECK(f == "run" || f == "stream_start" || f == "audit" || f == "slow_head" || f == "idle_prefill_waits",
                "serve: ORBIT_SERVE_TEST_FAULT="
                    << f << " is not a fault tests inject (known: run, stream_start, audit, slow_head, "
                    << "idle_prefill_waits)");
    o.test_fault = fault;
  }
  o.model_name = args.get_or("--name", "");
  o.store_dir = args.get_or("--store", "");
  o.remote = args.get_or("--remote", "");
  // Empty, each would be read as left out (no store, no remote tier, the template's call format): the command
  // line says that by leaving it out.
  const std::pair<const char*, const char*> defaults[] = {
      {"--store", "to serve without a store"},
      {"--remote", "to serve without a remote tier"},
      {"--tool-call-format", "to read calls in the chat template's format"}};
  for (const auto& [name, left_out] : defaults) {
    ORBIT_CHECK(args.get_or(name, "-") != "",
                "serve: argument '" << name << "' is empty (leave it out " << left_out << ")");
  }
  o.policy = args.get_or("--policy", "");
  if (const auto spec = args.get("--policy")) {
    try {
      (void)parse_policy(*spec);
    } catch (const Error& e) {
      ORBIT_FAIL("serve: --policy: " << e.what());
    }
  }
  ORBIT_CHECK(!args.has("--name") || !o.model_name.empty(),
              "serve: argument '--name' is empty (leave it out for the model path's last component)");
  o.pool_bytes = size_argument(args, "--pool-mb", 256, 1, 20);
  o.pool_wait_ms = args.get_int("--pool-wait-ms", 30000, 0);
  ORBIT_CHECK(o.pool_wait_ms <= 3600000,
              "serve: argument '--pool-wait-ms' must be at most 3600000 (an hour), got " << o.pool_wait_ms);
  (void)compute_target(args);  // a bad or unavailable --device / --dtype fails here, naming the argument
  o.device = args.get_or("--device", "cpu");
  o.dtype = args.get_or("--dtype", "float32");
  o.device_tier_bytes = size_argument(args, "--device-tier-mb", 0, 0, 20);
  ORBIT_CHECK(o.device_tier_bytes == 0 || o.device.rfind("cuda", 0) == 0,
              "serve: argument '--device-tier-mb' needs --device cuda[:N] (a device tier lives in GPU memory)");
  o.session_budget_bytes = size_argument(args, "--session-budget-mb", 128, 0, 20);
  o.host_budget_bytes = size_argument(args, "--host-budget-mb", 1024, 0, 20);
  o.background_bytes = size_argument(args, "--background-mb", 256, 1, 20);
  parse_disk_options(args, o);
  o.max_sessions = args.get_int("--max-sessions", 64, 1);
  o.anonymous_windows = args.get_int("--anonymous-windows", 64, 1);
  ORBIT_CHECK(o.anonymous_windows <= 4096,
              "serve: argument '--anonymous-windows' must be at most 4096, got " << o.anonymous_windows);
  o.max_known_sessions = args.get_int("--max-known-sessions", 4096, 1);
  ORBIT_CHECK(o.max_known_sessions <= kMaxKnownSessions, "serve: argument '--max-known-sessions' must be at most "
                                                             << kMaxKnownSessions << ", got " << o.max_known_sessions);
  o.max_responses = args.get_int("--max-responses", 4096, 1);
  o.max_chat_completions = args.get_int("--max-chat-completions", 4096, 1);
  parse_answer_store_options(args, o);
  o.max_idle_chunks = args.get_int("--max-idle-chunks", 4096, 1);
  o.sync_memo.max_entries = args.get_int("--sync-memo-entries", 4096, 1);
  ORBIT_CHECK(o.sync_memo.max_entries <= SyncMemoLimits::kMaxEntries,
              "serve: argument '--sync-memo-entries' must be at most " << SyncMemoLimits::kMaxEntries << ", got "
                                                                       << o.sync_memo.max_entries);
  o.sync_memo.max_bytes = size_argument(args, "--sync-memo-mb", 64, 1, 20);
  ORBIT_CHECK(o.sync_memo.max_bytes <= SyncMemoLimits::kMaxBytes, "serve: argument '--sync-memo-mb' must be at most "
                                                                      << (SyncMemoLimits::kMaxBytes >> 20) << ", got "
                                                                      << (o.sync_memo.max_bytes >> 20));
  o.default_max_tokens = args.get_int("--max-tokens", 256, 1);
  if (args.has("--max-tokens")) o.default_completion_max_tokens = o.default_max_tokens;
  o.limits.max_body_bytes = static_cast<std::size_t>(size_argument(args, "--max-body-kb", 4096, 1, 10));
  o.max_unsent_bytes = size_argument(args, "--max-unsent-kb", 4096, 1, 10);
  o.prefill_chunk = args.get_int("--prefill-chunk", 256, 0);
  o.max_batch = args.get_int("--max-batch", 256, 1);
  ORBIT_CHECK(o.max_batch <= 65536, "serve: argument '--max-batch' must be at most 65536, got " << o.max_batch);
  o.limits.max_choices = std::min(o.limits.max_choices, o.max_batch);
  o.limits.max_choices_by_batch = o.limits.max_choices == o.max_batch;
  o.limits.max_answer_logprobs = args.get_int("--max-answer-logprobs", int64_t{1} << 20, 1);
  o.anticipate = !args.flag("--no-anticipate");
  o.deterministic = args.flag("--deterministic");
  parse_fidelity_options(args, o);
  if (const auto file = args.get("--chat-template")) {
    o.chat_template = read_template(*file);
    o.chat_template_origin = "--chat-template " + *file;
  }
  o.tool_call_format = args.get_or("--tool-call-format", "");
  if (!o.tool_call_format.empty()) (void)parse_tool_call_format(o.tool_call_format, "serve: --tool-call-format");
  const std::string reasoning = args.get_or("--reasoning-parser", "none");
  const std::optional<serve::ReasoningFormat> format = serve::reasoning_format_named(reasoning);
  ORBIT_CHECK(format.has_value(), "serve: argument '--reasoning-parser' must be one of "
                                      << serve::reasoning_format_names() << ", got '" << reasoning << "'");
  o.reasoning = *format;
  return o;
}

// The remote tier is optional (down, the server serves on its local tiers and the tier retries on use), so
// an unreachable --remote is no reason to refuse to start; but a typo'd host or port, a wrong password or a
// TLS failure should not wait for the first request to show: one PING at start, bounded by the tier's own
// timeouts, and a warning naming the URL (its password redacted) and the cause, which the tier then
// does not print again at its first use (orbit::ping_remote).
void warn_if_remote_unreachable(const std::string& url) {
  if (url.empty()) return;
  const RemotePing ping = ping_remote(url);
  if (ping.status.is_ok()) return;
  std::fprintf(stderr,
               "orbit serve: warning: --remote %s is unreachable at start (%s); serving on the local tiers, the "
               "remote tier retrying on use\n",
               ping.url.c_str(), ping.status.reason().c_str());
}

// Says on stderr which pages in a browser may read the answers (--allow-origin), nothing when none may.
void announce_cors(const serve::CorsPolicy& cors) {
  if (!cors.enabled()) return;
  std::string who = cors.any() ? "any web page (*)" : "pages from";
  for (std::size_t i = 0; i < cors.origins().size(); ++i) who += (i ? ", " : " ") + cors.origins()[i];
  std::fprintf(stderr, "orbit serve: --allow-origin: %s may call this server from a browser (CORS)\n", who.c_str());
}

// The keys /v1/* requires (api_keys.h): --api-key and --api-key-file, else ORBIT_API_KEY; none: open.
serve::ApiKeys api_keys(const Args& args) {
  std::optional<std::string> env;
  if (const char* value = std::getenv("ORBIT_API_KEY")) env = value;
  return serve::ApiKeys::from(args.get("--api-key"), args.get("--api-key-file"), env);
}

// The options `orbit serve` takes: those with a value, then the flags.
ArgSpec serve_arg_spec() {
  ArgSpec spec{
      {"--model",
       "--host",
       "--port",
       "--policy",
       "--store",
       "--remote",
       "--name",
       "--pool-mb",
       "--session-budget-mb",
       "--host-budget-mb",
       "--background-mb",
       "--store-disk-mb",
       "--remote-max-held-fraction",
       "--max-sessions",
       "--anonymous-windows",
       "--max-known-sessions",
       "--max-responses",
       "--max-chat-completions",
       "--store-group-commit",
       "--store-pending-mb",
       "--max-idle-chunks",
       "--sync-memo-entries",
       "--sync-memo-mb",
       "--max-tokens",
       "--max-body-kb",
       "--threads",
       "--drain-seconds",
       "--chat-template",
       "--tool-call-format",
       "--reasoning-parser",
       "--audit",
       "--device",
       "--dtype",
       "--device-tier-mb"},
      {"--no-anticipate", "--calibrate-fidelity", "--no-stored-calibration", "--deterministic", "--audit-exact"},
      kServeUsage};
  spec.options.insert({"--header-seconds", "--body-seconds", "--keep-alive-seconds", "--allow-origin", "--api-key",
                       "--api-key-file", "--max-unsent-kb", "--pool-wait-ms", "--prefill-chunk", "--stall-seconds",
                       "--max-answer-logprobs", "--min-drain-rate", "--audit-owed-after", "--max-batch"});
  return spec;
}

// The listener's options (address, threads, timeouts, CORS, API keys); throws orbit::Error naming the first
// argument out of range, an --allow-origin it cannot parse or an --api-key-file it cannot read.
serve::HttpOptions parse_http_options(const Args& args) {
  serve::HttpOptions http_options;
  http_options.host = args.get_or("--host", "127.0.0.1");
  const int64_t port_arg = args.get_int("--port", 8000, 0);
  ORBIT_CHECK(port_arg <= 65535, "serve: argument '--port' must be <= 65535, got " << port_arg);
  http_options.port = static_cast<int>(port_arg);
  const int64_t threads = args.get_int("--threads", 64, 2);
  ORBIT_CHECK(threads <= kMaxThreads, "serve: argument '--threads' must be <= " << kMaxThreads << ", got " << threads);
  http_options.threads = static_cast<int>(threads);
  http_options.drain_seconds = static_cast<int>(args.get_int("--drain-seconds", 60, 0));
  http_options.header_seconds = static_cast<int>(args.get_int("--header-seconds", 10, 1));
  http_options.body_seconds = static_cast<int>(args.get_int("--body-seconds", 60, 1));
  http_options.keep_alive_seconds = static_cast<int>(args.get_int("--keep-alive-seconds", 120, 1));
  http_options.stall_seconds = static_cast<int>(args.get_int("--stall-seconds", 60, 1));
  http_options.min_drain_rate = args.get_int("--min-drain-rate", 1024, 0);
  ORBIT_CHECK(http_options.min_drain_rate <= kMaxDrainRate,
              "serve: argument '--min-drain-rate' must be <= " << kMaxDrainRate << " (1 GiB/s), got "
                                                               << http_options.min_drain_rate);
  for (const char* name :
       {"--header-seconds", "--body-seconds", "--keep-alive-seconds", "--drain-seconds", "--stall-seconds"}) {
    ORBIT_CHECK(args.get_int(name, 0) <= 86400,
                "serve: argument '" << name << "' must be <= 86400 (a day), got " << args.get_int(name, 0));
  }
  if (const auto origins = args.get("--allow-origin")) http_options.cors = serve::CorsPolicy::parse(*origins);
  http_options.api_keys = api_keys(args);
  return http_options;
}

// Blocks SIGTERM and SIGINT in this thread, so every thread started from here on blocks them and the signal
// thread (wait_for_signal) takes them; returns that set. SIGPIPE and SIGXFSZ are ignored.
sigset_t block_stop_signals() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);  // a client that left must not end the server
  // A write past the file-size limit (RLIMIT_FSIZE, `ulimit -f`) fails with EFBIG, as on a full disk, and is
  // handled as one (a store write refused or reported), instead of killing the server.
  std::signal(SIGXFSZ, SIG_IGN);
  return signals;
}

// Makes `dir` and the parents it lacks, and returns those it made, deepest first: empty where `dir` existed or
// could not be made (the store's open then says why). mkdir is one atomic step, so of two servers started together
// on a new path only the one whose mkdir made it says it created the store.
std::vector<std::filesystem::path> create_store_directory(const std::string& dir) {
  std::vector<std::filesystem::path> made;
  if (dir.empty()) return made;
  std::error_code ec;
  std::filesystem::path path(dir);
  if (std::any_of(path.begin(), path.end(), [](const std::filesystem::path& c) { return c == ".."; })) {
    // Which directories "a/../b" makes depends on what "a" is (a symbolic link leads elsewhere): made as the store
    // would make it, only the store directory itself taken back.
    const bool existed = std::filesystem::exists(path, ec);
    std::filesystem::create_directories(path, ec);
    if (!existed && std::filesystem::is_directory(path, ec)) made.push_back(path);
    return made;
  }
  path = path.lexically_normal();  // "new/", "new/." and "a/./new" name the directories "new" and "a/new"
  if (!path.has_filename() && path.has_relative_path()) path = path.parent_path();
  std::vector<std::filesystem::path> missing;  // deepest first
  for (std::filesystem::path p = path; !p.empty() && !std::filesystem::exists(p, ec); p = p.parent_path()) {
    missing.push_back(p);
    if (p == p.parent_path()) break;
  }
  for (auto it = missing.rbegin(); it != missing.rend(); ++it) {
    if (!std::filesystem::create_directory(*it, ec)) break;
    made.insert(made.begin(), *it);
  }
  if (made.empty() || made.front() != path) made.clear();  // the store directory itself was not made here
  return made;
}

// A --store directory this start created (and the parents it made for it), taken back when the start ends before
// listening (a model that does not load, a signal) while each is still empty: std::filesystem::remove takes an
// empty directory only, so a store the engine opened meanwhile (its files written), or another server's, stays.
class CreatedStore {
 public:
  explicit CreatedStore(const std::string& dir) : made_(create_store_directory(dir)) {}
  ~CreatedStore() {
    std::error_code ec;
    if (listening_) return;
    for (const std::filesystem::path& p : made_) {  // deepest first; one not empty stops it
      if (!std::filesystem::remove(p, ec)) break;
    }
  }
  CreatedStore(const CreatedStore&) = delete;
  CreatedStore& operator=(const CreatedStore&) = delete;
  bool created() const { return !made_.empty(); }
  void listening() { listening_ = true; }

 private:
  std::vector<std::filesystem::path> made_;  // this start's directories, the store's first
  bool listening_ = false;
};

// The notices before listening, on stderr: a --store directory this start created (a mistyped path is seen
// at once, not as a cache that never warms), other servers on the same store (share), the CORS origins and
// the API keys' count and source. (An unreachable --remote is said before, by run_serve.)
void announce_start(const serve::StoreShare& share, const serve::ServeOptions& options,
                    const serve::HttpOptions& http_options, bool store_created) {
  if (store_created) {
    std::fprintf(stderr, "orbit serve: note: --store %s did not exist: a new, empty store was created there\n",
                 options.store_dir.c_str());
  }
  std::fputs(share.notice(options.store_dir).c_str(), stderr);
  announce_cors(http_options.cors);
  if (http_options.api_keys.enabled()) {
    std::fprintf(stderr, "orbit serve: /v1/* requires an API key (%zu key(s), from %s)\n", http_options.api_keys.size(),
                 http_options.api_keys.source().c_str());
  }
}

// Binds, prints the 'listening on' line on stdout, serves until SIGTERM / SIGINT (taken by a signal thread,
// which drains) or until the listener fails, and returns the exit status: 0 after a full drain, 1 when the
// listener failed or a second signal cut the drain short.
int serve_until_stopped(serve::ServeCore& core, const serve::HttpOptions& http_options, const sigset_t& signals) {
  serve::HttpServer http(core, http_options);
  const int port = http.bind();
  // An IPv6 address is written in brackets in a URL (RFC 3986): http://[::1]:8000.
  const std::string& host = http_options.host;
  const std::string url_host = host.find(':') != std::string::npos ? "[" + host + "]" : host;
  std::printf("orbit serve: model '%s' (%lld-token context, %s, %s), listening on http://%s:%d\n",
              core.model_name().c_str(), static_cast<long long>(core.context_tokens()), core.device().c_str(),
              core.dtype().c_str(), url_host.c_str(), port);
  std::fflush(stdout);
  bool drain_cut = false;
  // A signal may already be pending (the line above told a client the server listens): the signal thread
  // can then drain and stop before http.listen() below has started, which returns at once in that case.
  std::thread signal_thread([&] { drain_cut = wait_for_signal(http, signals); });
  const bool ok = http.listen();
  if (!ok) {
    // The listener failed on its own: end the signal thread's wait by sending it what it waits for.
    kill(getpid(), SIGTERM);
  }
  signal_thread.join();
  std::fprintf(stderr, drain_cut ? "orbit serve: stopped before the drain ended\n" : "orbit serve: stopped\n");
  return ok && !drain_cut ? 0 : 1;
}

}  // namespace

// The listener's options are checked first, so a command line with faults in both is refused naming the
// listener's; the signals are blocked before the engine starts threads (ServeCore). A signal while it starts
// stops it before listening (StartupSignals), at the next of its checks.
int run_serve(int argc, char** argv, int first) {
  const Args args("serve", serve_arg_spec(), argc, argv, first);
  const serve::HttpOptions http_options = parse_http_options(args);
  const sigset_t signals = block_stop_signals();
  const serve::ServeOptions options = serve_options(args);
  CreatedStore store_created(options.store_dir);
  serve::StartupSignals startup(signals);
  serve::ServeCore core(options);
  if (startup.received() != 0) return startup.stopped();
  // The remote's start check comes before the fidelity model, which may ask the remote for a stored
  // calibration: the tier then does not warn again of a cause the check said.
  warn_if_remote_unreachable(options.remote);
  try {
    startup.throw_if_received();
    // The calibration's interruption points (before each arm of a seed) hear a signal within a few forwards.
    const InterruptScope stop_on_signal([&] { return startup.received() != 0; });
    serve::prepare_fidelity_model(core.engine(), options, args.flag("--calibrate-fidelity"),
                                  [&] { startup.throw_if_received(); });
  } catch (const serve::StartupInterrupted&) {
    return startup.stopped();
  } catch (const Interrupted&) {
    return startup.stopped();
  }
  startup.finish();
  if (startup.received() != 0) return startup.stopped();
  const serve::StoreShare share(options.store_dir);  // announces other servers on the same store, until exit
  announce_start(share, options, http_options, store_created.created());
  store_created.listening();
  return serve_until_stopped(core, http_options, signals);
}

}  // namespace orbit::cli
