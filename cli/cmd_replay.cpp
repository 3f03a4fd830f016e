// `orbit replay`: replay a trace under a policy and the baselines side by side (orbit/trace.h).
//
//   orbit replay TRACE --model PATH [--policy SPEC[,SPEC...]] [--json OUT|-] [--explain] [--attribute]
//                [--no-fidelity] [--patch-capacity BYTES] [--page-size N] [--device cpu|cuda[:N]] [--dtype
//                float32|bfloat16|float16]
//                [--calibrate | --calibrate-fidelity] [--quiet]
//
// Prints a per-step table (critical-path forward tokens, critical-path milliseconds, measured KL and the
// plan's predicted KL per policy), totals (critical-path and background forward tokens and seconds), the
// ratios of each chosen policy against re-prefill, prefix cache and blind reuse (critical-path forward
// tokens and time, and totals), and the offline bound of its patch demands. --calibrate fits each
// engine's cost and fidelity models first (Engine::calibrate), which `:kl=X` policies plan with;
// --calibrate-fidelity the fidelity model only (Engine::calibrate_fidelity: no timing, same plans every run).
// --attribute measures each approximate instance's own KL after every probed step (Window::loss_by_instance) and
// prints, per way of serving, how the fidelity model's predictions compare. --json writes the full report
// (replay_report_json) to OUT ("-": stdout, and the table is not printed). Progress goes to stderr. Ctrl-C stops
// the replay before its next step (exit status 130, nothing printed or written but where it stopped).
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "args.h"
#include "commands.h"
#include "device_args.h"
#include "orbit/common/atomic_file.h"
#include "orbit/common/error.h"
#include "orbit/interrupt.h"
#include "orbit/policy.h"
#include "orbit/trace.h"

namespace orbit::cli {

namespace {

// How --json OUT is named in messages.
const char* const kJsonReport = "the replay report (--json)";

const char* kReplayUsage =
    "usage: orbit replay TRACE --model PATH [--policy SPEC[,SPEC...]] [--json OUT|-] [--explain] [--attribute]\n"
    "                    [--no-fidelity] [--patch-capacity BYTES] [--page-size N] [--device D] [--dtype T] "
    "[--calibrate | --calibrate-fidelity] [--quiet]\n"
    "                    [--host-budget BYTES] [--eviction lru|cost-aware] [--device-tier BYTES] [--repeat N]\n"
    "                    [--yardstick-tokens N]\n"
    "  Replays a window-operation trace (orbit-trace/1) under each policy and the baselines (reprefill, prefix,\n"
    "  blind), each on its own engine: per step forward tokens, milliseconds and KL vs. re-prefill; totals,\n"
    "  ratios and the offline bound of the policy's patch demands.\n"
    "  TRACE / --trace FILE     the trace (positional or named, not both)\n"
    "  --model PATH             a llama2.c .bin or a Hugging Face directory (text traces need a tokenizer)\n"
    "  --policy SPECS           comma-separated policies, e.g. default,patch:16,patch:16:exact (default: 'default',\n"
    "                           the default policy, patch:16 with a per-step KL budget; every form below)\n"
    "  --json OUT|-             write the full report as JSON to OUT (an existing file is replaced, but never\n"
    "                           the trace or the model); '-' prints it instead of the table\n"
    "  --explain                print every step's plan (a read after deferred edits: the repairs it runs)\n"
    "  --attribute              after every probed step, measure each approximate instance's own KL (that\n"
    "                           instance alone as held, the rest exact) beside its predicted KL; the totals say\n"
    "                           per way of serving how far the fidelity model's predictions are off\n"
    "  --no-fidelity            skip the two fidelity forwards per step (cost only)\n"
    "  --patch-capacity BYTES   patch-cache capacity for the offline bound (0: none kept; default: the host budget)\n"
    "  --page-size N            tokens per KV page of the replay engines (default 16)\n"
    "  --yardstick-tokens N     KV budget of the bounded prefix-cache yardsticks (radix_tokens,\n"
    "                           block_cache_tokens), in tokens (0, the default: the replay engine's KV pool)\n"
    "  --device D               cpu (default), cuda or cuda:N;  --dtype T   float32 (default), bfloat16, float16\n"
    "  --calibrate              calibrate each engine first (cost model and the fidelity model :kl= budgets use)\n"
    "  --calibrate-fidelity     fit only the fidelity model on this model first (seeded, nothing timed: the\n"
    "                           same plans every run; the defaults are the bundled stories260K's fit)\n"
    "  --host-budget BYTES      the store's host tier in every replay engine (default 1 GiB): where patches live\n"
    "  --eviction POLICY        the store's eviction policy: lru (default) or cost-aware (recompute saved per byte)\n"
    "  --device-tier BYTES      a device tier of canonicals in GPU memory (default 0 = none; needs --device cuda)\n"
    "  --repeat N               replay every policy N times, interleaved, and report each step's fastest time\n"
    "                           (wall time is noisy; tokens and KL come from the first round; default 1;\n"
    "                           not with --calibrate)\n"
    "  --quiet                  no progress on stderr\n"
    "Ctrl-C stops the replay before its next step, saying where (exit status 130; no report is printed or\n"
    "written: its ratios need every policy's whole run); a second Ctrl-C ends it at once.\n";

// The usage, then the policy specs --policy takes (orbit/policy.h's policy_spec_help(), which `orbit serve
// --help` points at for its own --policy), so the CLI alone says what a spec may be.
std::string replay_usage() {
  return std::string(kReplayUsage) + "policies (--policy; orbit serve's --policy takes the same):\n" +
         policy_spec_help();
}

std::string ratio(double a, double b) {
  if (b == 0) return a == 0 ? "1.00x" : "n/a";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3fx", a / b);
  return buf;
}

std::string kl_text(const StepResult& s) {
  if (!s.fidelity) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2e", s.fidelity->kl);
  return buf;
}

std::string pkl_text(const StepResult& s) {
  if (s.predicted_kl < 0) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1e", s.predicted_kl);
  return buf;
}

std::string short_name(const std::string& policy, std::size_t width) {
  return policy.size() <= width ? policy : policy.substr(0, width);
}

void print_table(const ReplayReport& r, bool explain) {
  constexpr std::size_t kCol = 33;
  std::printf("%4s %-10s %-8s", "step", "op", "branch");
  for (const PolicyReplay& p : r.policies)
    std::printf(" | %-*s", static_cast<int>(kCol), short_name(p.policy, kCol).c_str());
  std::printf("\n%4s %-10s %-8s", "", "", "");
  for (std::size_t k = 0; k < r.policies.size(); ++k)
    std::printf(" | %7s %7s %9s %7s", "crit", "crit-ms", "KL", "pred");
  std::printf("\n");
  for (std::size_t i = 0; i < r.steps; ++i) {
    const StepResult& first = r.policies.front().steps[i];
    std::printf("%4zu %-10s %-8s", i, trace_op_name(first.op), short_name(first.branch, 8).c_str());
    for (const PolicyReplay& p : r.policies) {
      const StepResult& s = p.steps[i];
      std::printf(" | %7.0f %7.2f %9s %7s", s.critical_forward_tokens, 1e3 * s.critical_seconds, kl_text(s).c_str(),
                  pkl_text(s).c_str());
    }
    std::printf("\n");
    for (const PolicyReplay& p : r.policies) {
      const StepResult& s = p.steps[i];
      // The status names its kind ("refused: admit refused: ...", "out_of_capacity: turn refused: ...").
      if (s.status != "ok") std::printf("       [%s] %s\n", p.policy.c_str(), s.status.c_str());
      if (explain && !s.plan.empty()) {
        std::printf("       [%s] ", p.policy.c_str());
        const std::string plan = s.plan.substr(0, s.plan.find_last_not_of('\n') + 1);
        for (char c : plan) {
          std::putchar(c);
          if (c == '\n') std::printf("       ");
        }
        std::printf("\n");
      }
      if (explain && !s.losses.empty()) {
        std::printf("       [%s] each approximate instance alone (measured vs predicted KL):\n", p.policy.c_str());
        for (const InstanceLoss& l : s.losses) {
          std::printf("         #%llu %s @%lld: %.1e vs %.1e, KV changed %.1e (%s)\n",
                      static_cast<unsigned long long>(l.instance), l.label.c_str(), static_cast<long long>(l.position),
                      l.measured_kl, l.predicted_kl, l.kv_change, served_as(l).c_str());
        }
      }
    }
  }
}

// What a policy's totals row says after its columns: steps refused, and steps the probe did not fit behind (the
// KL and top-1 are over the others only).
std::string notes(const PolicyTotals& t) {
  std::string out;
  if (t.refused > 0) out += "  (" + std::to_string(t.refused) + " refused)";
  if (t.probe_unfit_steps > 0) {
    out += "  (" + std::to_string(t.probe_unfit_steps) + " steps not measured: window + probe past the positions)";
  }
  return out;
}

void print_totals(const ReplayReport& r) {
  std::printf("\n%-34s %9s %9s %9s %8s %8s %11s %11s %6s %6s %10s %10s %10s %6s\n", "policy", "crit-fwd", "fwd-tok",
              "full-pf", "crit-s", "bg-s", "bytes-moved", "peak-dev-B", "formed", "hits", "mean-KL", "pred-KL",
              "max-KL", "top1");
  for (const PolicyReplay& p : r.policies) {
    const PolicyTotals& t = p.totals;
    // With no step measured (--no-fidelity, or every window past the model's positions) there is no KL:
    // print n/a rather than a 0 that reads as "exact".
    char kl[16] = "n/a", pred_kl[16] = "n/a", max_kl[16] = "n/a", top1[16] = "n/a";
    if (t.mean_predicted_steps > 0) std::snprintf(pred_kl, sizeof pred_kl, "%.3e", t.mean_predicted_kl);
    if (t.fidelity_steps > 0) {
      std::snprintf(kl, sizeof kl, "%.3e", t.mean_kl);
      std::snprintf(max_kl, sizeof max_kl, "%.3e", t.max_kl);
      std::snprintf(top1, sizeof top1, "%.3f", t.mean_top1);
    }
    std::printf("%-34s %9.0f %9.0f %9.0f %8.4f %8.4f %11lld %11lld %6lld %6lld %10s %10s %10s %6s%s\n",
                (p.policy + (p.baseline ? " (baseline)" : "")).c_str(), t.critical_forward_tokens, t.forward_tokens,
                t.full_prefill_tokens, t.critical_seconds, t.background_seconds, static_cast<long long>(t.bytes_moved),
                static_cast<long long>(t.peak_device_bytes), static_cast<long long>(t.patches_formed),
                static_cast<long long>(t.patch_hits), kl, pred_kl, max_kl, top1, notes(t).c_str());
  }
  std::printf(
      "\nfidelity model vs measured KL (steps where both > %.0e): pred/meas = geometric mean of predicted /\n"
      "measured; miss = the typical factor one step's prediction is off by\n",
      kKlFloor);
  for (const PolicyReplay& p : r.policies) {
    if (p.totals.predicted_steps == 0) continue;
    std::printf("  %-34s steps %3lld  pred/meas %8.2f  miss x%.2f\n", p.policy.c_str(),
                static_cast<long long>(p.totals.predicted_steps), p.totals.kl_prediction_bias,
                p.totals.kl_prediction_spread);
  }
  if (!r.policies.empty()) std::printf("  model: %s\n", r.policies.front().fidelity_model.c_str());
  bool attributed = false;
  for (const PolicyReplay& p : r.policies) {
    if (p.totals.loss_agreement.empty()) continue;
    if (!attributed) {
      std::printf(
          "\neach approximate instance alone (--attribute), by how it was served: mean measured and predicted KL;\n"
          "pred/meas and miss over the instances where both > %.0e\n",
          kKlFloor);
      attributed = true;
    }
    std::printf("  %s\n", p.policy.c_str());
    for (const LossAgreement& g : p.totals.loss_agreement) {
      char bias[32] = "-", spread[32] = "-";
      if (g.compared > 0) {
        std::snprintf(bias, sizeof bias, "%.2f", g.bias);
        std::snprintf(spread, sizeof spread, "x%.2f", g.spread);
      }
      std::printf("    %-28s instances %4lld  measured %.2e  predicted %.2e  pred/meas %8s  miss %s\n",
                  g.served_as.c_str(), static_cast<long long>(g.instances), g.mean_measured_kl, g.mean_predicted_kl,
                  bias, spread);
    }
  }
  std::printf(
      "crit-fwd: token-forwards on the critical path (plan + apply); fwd-tok: those plus the background work\n"
      "(canonical encodes, patch forming, and Window::idle's heals and prepared recalls after generate steps);\n"
      "full-pf: a full re-prefill of the window after every mutating step (no cache at all); crit-s / bg-s: wall\n"
      "seconds of each; KL: mean over probe rows of KL(re-prefill || window) after each step, nats; pred-KL: the\n"
      "plans' predicted KL (fidelity model) over the same measured steps (with --no-fidelity, over every step).\n");
}

void print_ratios(const ReplayReport& r) {
  const PolicyReplay* reprefill = r.find("reprefill");
  const PolicyReplay* prefix = r.find("prefix");
  const PolicyReplay* blind = r.find("blind");
  for (const PolicyReplay& p : r.policies) {
    if (p.baseline) continue;
    std::printf("\n%s vs. the baselines (ratio = %s / baseline):\n", p.policy.c_str(), p.policy.c_str());
    std::printf("  %-12s %14s %10s %14s %10s\n", "baseline", "critical fwd", "crit time", "total fwd", "time");
    for (const PolicyReplay* b : {reprefill, prefix, blind}) {
      if (b == nullptr || b == &p) continue;
      std::printf("  %-12s %14s %10s %14s %10s\n", b->policy.c_str(),
                  ratio(p.totals.critical_forward_tokens, b->totals.critical_forward_tokens).c_str(),
                  ratio(p.totals.critical_seconds, b->totals.critical_seconds).c_str(),
                  ratio(p.totals.forward_tokens, b->totals.forward_tokens).c_str(),
                  ratio(p.totals.seconds, b->totals.seconds).c_str());
    }
    // A full re-prefill after every mutating step: all of it on the critical path, none in the background.
    std::printf("  %-12s %14s %10s %14s %10s\n", "full-prefill",
                ratio(p.totals.critical_forward_tokens, p.totals.full_prefill_tokens).c_str(), "-",
                ratio(p.totals.forward_tokens, p.totals.full_prefill_tokens).c_str(), "-");
    // The yardstick every saving is stated against: the radix cache over the same reads (tokens only).
    std::printf("  %-12s %14s %10s %14s %10s   (%.0f tokens over %lld reads; unbounded %.0f, 16-token blocks %.0f)\n",
                "radix cache", ratio(p.totals.critical_forward_tokens, p.totals.radix_tokens).c_str(), "-",
                ratio(p.totals.forward_tokens, p.totals.radix_tokens).c_str(), "-", p.totals.radix_tokens,
                static_cast<long long>(p.totals.yardstick_reads), p.totals.radix_unbounded_tokens,
                p.totals.block_cache_tokens);
    // The same radix cache read at model calls alone, as a server computes: the honest peer for a saving.
    std::printf("  %-12s %14s %10s %14s %10s   (%.0f tokens, read at the model calls alone, as a server reads)\n",
                "radix@calls", ratio(p.totals.critical_forward_tokens, p.totals.radix_call_tokens).c_str(), "-",
                ratio(p.totals.forward_tokens, p.totals.radix_call_tokens).c_str(), "-", p.totals.radix_call_tokens);
    if (p.offline) {
      const OfflineReport& o = *p.offline;
      std::printf(
          "  offline bound over its %lld patch demands (%lld distinct, capacity %lld bytes): formations online %lld "
          "(%.0f tokens), compulsory %lld (%.0f), Belady %lld (%.0f), LRU %lld (%.0f); the radix cache forwards %.0f "
          "for the same reads\n",
          static_cast<long long>(o.demands), static_cast<long long>(o.distinct_patches),
          static_cast<long long>(o.capacity_bytes), static_cast<long long>(o.online_formations), o.online_form_tokens,
          static_cast<long long>(o.compulsory_formations), o.compulsory_form_tokens,
          static_cast<long long>(o.belady_formations), o.belady_form_tokens, static_cast<long long>(o.lru_formations),
          o.lru_form_tokens, p.totals.radix_tokens);
    }
  }
}

// The replay's options from its arguments (the trace aside), each checked in turn: a bad one throws naming it.
ReplayOptions replay_options(const Args& args) {
  ReplayOptions o;
  o.engine.model = args.required("--model");
  o.engine.page_size = args.get_int("--page-size", 16, 1);
  // EngineOptions::page_size's own bound, refused here (before the model loads) naming the argument.
  ORBIT_CHECK(o.engine.page_size <= EngineOptions::kMaxPageSize,
              "replay: argument '--page-size' must be <= " << EngineOptions::kMaxPageSize
                                                           << " (tokens a KV page holds), got " << o.engine.page_size);
  o.yardstick_tokens = args.get_int("--yardstick-tokens", 0, 0);
  o.engine.device = args.get_or("--device", "cpu");
  o.engine.dtype = args.get_or("--dtype", "float32");
  (void)compute_target(args);  // a bad or unavailable --device / --dtype fails here, naming the argument
  o.engine.host_budget_bytes = args.get_int("--host-budget", o.engine.host_budget_bytes, 0);
  o.engine.eviction = args.get_or("--eviction", "lru");
  ORBIT_CHECK(o.engine.eviction == "lru" || o.engine.eviction == "cost-aware",
              "replay: argument '--eviction' is '" << o.engine.eviction << "' (known: lru, cost-aware)");
  o.engine.device_tier_bytes = args.get_int("--device-tier", 0, 0);
  ORBIT_CHECK(o.engine.device_tier_bytes == 0 || o.engine.device.rfind("cuda", 0) == 0,
              "replay: argument '--device-tier' needs --device cuda[:N] (a device tier lives in GPU memory)");
  o.policies = split_commas(args.get("--policy").value_or("default"));
  for (std::size_t i = 0; i < o.policies.size(); ++i) {
    ORBIT_CHECK(!o.policies[i].empty(), "replay: argument '--policy' ('" << args.get("--policy").value_or("")
                                                                         << "'): policy " << i + 1
                                                                         << " is empty (a stray comma? the policies "
                                                                            "are separated by single commas)");
  }
  for (const std::string& spec : o.policies) {
    try {
      (void)parse_policy(spec);
    } catch (const Error& e) {
      ORBIT_FAIL("--policy: " << e.what());
    }
  }
  check_policy_columns(o.policies, "replay: argument '--policy'");
  o.explain = args.flag("--explain");
  o.attribute = args.flag("--attribute");
  ORBIT_CHECK(!o.attribute || !args.flag("--no-fidelity"),
              "replay: argument '--attribute' needs the fidelity probes ('--no-fidelity' turns them off)");
  o.calibrate = args.flag("--calibrate");
  o.calibrate_fidelity = args.flag("--calibrate-fidelity");
  ORBIT_CHECK(!o.calibrate || !o.calibrate_fidelity,
              "replay: arguments '--calibrate' and '--calibrate-fidelity' exclude each other (--calibrate fits the "
              "fidelity model too)");
  o.fidelity = !args.flag("--no-fidelity");
  if (args.has("--patch-capacity")) {
    o.patch_capacity_bytes = args.get_int("--patch-capacity", 0);
    ORBIT_CHECK(*o.patch_capacity_bytes >= 0,
                "replay: argument '--patch-capacity' must be >= 0, got " << *o.patch_capacity_bytes);
  }
  ORBIT_CHECK(!args.has("--patch-capacity") ||
                  std::any_of(o.policies.begin(), o.policies.end(),
                              [](const std::string& spec) { return forms_patches(parse_policy(spec)); }),
              "replay: argument '--patch-capacity' sizes the offline bound of the patches a policy forms, and no "
              "policy of --policy forms one (the patch presets and the default do)");
  const int64_t repeat = args.get_int("--repeat", 1);
  ORBIT_CHECK(repeat >= 1 && repeat <= 100, "replay: argument '--repeat' must be in [1, 100], got " << repeat);
  o.timing_repeats = static_cast<int>(repeat);
  ORBIT_CHECK(repeat == 1 || !o.calibrate,
              "replay: argument '--repeat' > 1 cannot be combined with --calibrate (calibration fits the cost model "
              "from measured times, so each round could plan differently)");
  return o;
}

// Progress on stderr, called before each step: on a terminal one line rewritten in place, else a line at a
// policy's first step and every 50th.
decltype(ReplayOptions::progress) replay_progress() {
  const bool tty = ::isatty(STDERR_FILENO) != 0;
  return [tty](std::size_t p, std::size_t np, std::size_t s, std::size_t ns, const std::string& name) {
    if (tty) {
      std::fprintf(stderr, "\rreplay: policy %zu/%zu %-24s step %zu/%zu   ", p + 1, np, name.c_str(), s + 1, ns);
      if (p + 1 == np && s + 1 == ns) std::fprintf(stderr, "\n");
    } else if (s == 0 || (s + 1) % 50 == 0) {
      std::fprintf(stderr, "replay: policy %zu/%zu %s step %zu/%zu\n", p + 1, np, name.c_str(), s + 1, ns);
    }
  };
}

// Ctrl-C (SIGINT) during a replay: the first stops it before its next step (the callback below throws
// ReplayInterrupted there) or, inside a step or a policy's calibration, at the SDK's next interruption point
// (orbit/interrupt.h: an InterruptScope around the replay), and the run says where it was; no report is printed or
// written, since its ratios need every policy's whole run. The handler is reset as it runs (SA_RESETHAND), so a
// second Ctrl-C ends the process at once, inside a long forward too.
volatile std::sig_atomic_t interrupted = 0;
void on_interrupt(int) { interrupted = 1; }

void stop_before_next_step_on_interrupt() {
  struct sigaction action {};
  action.sa_handler = on_interrupt;
  action.sa_flags = SA_RESETHAND;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
}

struct ReplayInterrupted {
  std::string where;  // "before step S/N of policy P/NP (NAME)"
};

// The step the replay reported last (its progress callback), for a stop inside the SDK to say where it was.
struct LastStep {
  std::string where;  // "after step S/N of policy P/NP (NAME) began", or empty before the first
};

std::string step_name(std::size_t p, std::size_t np, std::size_t s, std::size_t ns, const std::string& name) {
  return "step " + std::to_string(s + 1) + "/" + std::to_string(ns) + " of policy " + std::to_string(p + 1) + "/" +
         std::to_string(np) + " (" + name + ")";
}

// The progress callback (show: what prints it; null under --quiet) that also stops the replay after a Ctrl-C.
decltype(ReplayOptions::progress) interruptible(decltype(ReplayOptions::progress) show,
                                                const std::shared_ptr<LastStep>& last) {
  return [show, last](std::size_t p, std::size_t np, std::size_t s, std::size_t ns, const std::string& name) {
    if (interrupted) throw ReplayInterrupted{"before " + step_name(p, np, s, ns, name)};
    last->where = "after " + step_name(p, np, s, ns, name) + " began";
    if (show) show(p, np, s, ns, name);
  };
}

// Says where a Ctrl-C stopped the replay; returns its exit status.
int report_interrupted(const std::string& where, bool quiet, bool json_out) {
  std::fprintf(
      stderr, "%sorbit replay: interrupted (Ctrl-C) %s: no report (its ratios need every policy's whole run)%s\n",
      !quiet && ::isatty(STDERR_FILENO) != 0 ? "\n" : "", where.c_str(), json_out ? "; --json not written" : "");
  return 130;  // as a shell reports a process SIGINT ended
}

// replay(), where a full KV pool ends it, saying which argument sizes the pool's pages: every instance holds
// whole pages, so pages far larger than the trace's chunks leave the pool only a handful.
ReplayReport replay_naming_page_size(const Trace& trace, const ReplayOptions& o) {
  try {
    return replay(trace, o);
  } catch (const Error& e) {
    const std::string what = e.what();
    if (what.find("the KV pool is full") == std::string::npos &&
        what.find("the KV pool is too small") == std::string::npos)
      throw;
    ORBIT_FAIL(what << " (the replay engines' pool: " << o.engine.pool_bytes << " bytes in pages of --page-size "
                    << o.engine.page_size << " tokens, each instance holding whole pages; a smaller --page-size "
                    << "gives more pages)");
  }
}

}  // namespace

int run_replay(int argc, char** argv, int first) {
  std::string trace_path;
  if (first < argc && argv[first][0] != '-') trace_path = argv[first++];
  const Args args(
      "replay",
      ArgSpec{{"--model", "--policy", "--json", "--patch-capacity", "--repeat", "--page-size", "--trace",
               "--yardstick-tokens", "--device", "--dtype", "--host-budget", "--eviction", "--device-tier"},
              {"--explain", "--attribute", "--no-fidelity", "--quiet", "--calibrate", "--calibrate-fidelity"},
              replay_usage()},
      argc, argv, first);
  ORBIT_CHECK(trace_path.empty() || !args.has("--trace"), "replay: the trace is given twice (TRACE and --trace)");
  if (trace_path.empty()) trace_path = args.required("--trace");
  ReplayOptions o = replay_options(args);
  const std::optional<std::string> json_out = args.get("--json");
  // Refused now rather than after a replay of minutes; written atomically once the report exists.
  if (json_out && *json_out != "-") {
    check_output_argument("replay", "--json", *json_out, "the replay report");
    check_output_not_input("replay", "--json", *json_out, model_inputs(o.engine.model, {{"TRACE", trace_path}}));
  }
  const bool quiet = args.flag("--quiet");
  const auto last = std::make_shared<LastStep>();
  o.progress = interruptible(quiet ? nullptr : replay_progress(), last);

  const Trace trace = load_trace(trace_path);
  stop_before_next_step_on_interrupt();
  std::optional<ReplayReport> replayed;
  try {
    const InterruptScope stop_inside([] { return interrupted != 0; });
    replayed = replay_naming_page_size(trace, o);
  } catch (const Interrupted&) {  // inside a step, or calibrating before the first step of a policy
    return report_interrupted(last->where.empty() ? std::string("before the first step") : last->where, quiet,
                              json_out.has_value());
  } catch (const ReplayInterrupted& stop) {
    return report_interrupted(stop.where, quiet, json_out.has_value());
  }
  std::signal(SIGINT, SIG_DFL);  // nothing checks the flag past the last step: Ctrl-C ends the printing at once
  const ReplayReport& report = *replayed;

  if (json_out && *json_out == "-") {
    std::cout << replay_report_json(report);
    return 0;
  }
  std::printf("trace %s: %zu steps, model %s\n\n", report.trace.c_str(), report.steps, report.model.c_str());
  print_table(report, o.explain);
  print_totals(report);
  print_ratios(report);
  // After the table: a file that cannot be written (a full disk) loses the JSON alone, not the run's figures.
  if (json_out) {
    std::fflush(stdout);
    write_file_atomically(*json_out, replay_report_json(report), kJsonReport);
  }
  return 0;
}

}  // namespace orbit::cli
