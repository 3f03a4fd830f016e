// Planning and bookkeeping cost of window operations against window size and store size.
//
// Part 1, window size: a window of N chunk instances (2-token chunks, admitted blind so building it runs
// no forward in context; --build patch:16 forms each in context instead and stores its patch, so that the
// survivors of a budgeted plan have patches formed under other contexts to weigh), then per repetition, on
// the window of N:
//   plan-admit   plan_admit of a new chunk under --policy (patch keys hashed over the context, store
//                lookups, one step per instance)
//   admit        apply of a blind admit of a new chunk whose canonical is stored: bookkeeping only (every
//                survivor relocated, no forward)
//   plan-evict   plan_evict of the oldest chunk
//   evict        apply of it: bookkeeping only (survivors kept, no forward)
//   turn         plan + apply of a 1-token add_turn, then its eviction: one forward over the whole window,
//                shown for scale (compute, not bookkeeping; --no-turn skips it)
// and the growth exponent of plan+bookkeeping between consecutive N (1 = linear, 2 = quadratic).
//
// Part 2, store size: the store filled with S canonicals through Engine::precompute (one forward of a
// 2-token chunk alone each, kept in the host tier), then plan-admit and a blind admit + evict on a window
// of --store-window instances, with the growth exponent against S (0 = independent of the store).
//
// Part 3, the dependency graph alone (planner/dependency_graph.h), at --graph-sizes G: G instances each
// formed on every instance before it (what a window of conditioned instances records), then every
// instance re-formed on its context without the first instance (re-conditioning after an eviction), and
// its edges held; the growth exponent against G.
//
// The model: --model PATH, or by default a 1-layer random llama (tiny-llama's widths) with enough positions
// for the largest window, generated once under --cache. --dynamic L generates it with dynamic-NTK RoPE
// anchored at L tokens (factor: the same positions in all): every window past L then prices each instance's
// shortfall at every plan (docs/ARCHITECTURE.md §7, "Pricing the shortfall"), which an unscaled model skips.
// Under a policy without a budget (patch:16, blind) the plans keep the same instances either way, so the
// plan-admit difference between a run with and without --dynamic is that repricing.
//
// Times are the measuring thread's CPU time (--wall for wall time).
//
//   bench_window_scale [--model PATH] [--cache DIR] [--sizes 10,100,1000,3000] [--reps 5]
//                      [--store-sizes 100,1000,10000,100000] [--store-window 100] [--policy patch:16] [--no-turn]
//                      [--build blind] [--graph-sizes 250,500,1000,2000] [--dynamic L] [--wall]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>

#include "../common/bench_util.h"
#include "args.h"
#include "orbit/engine.h"
#include "orbit/planner/dependency_graph.h"
#include "orbit/policy.h"
#include "orbit/runtime/generator.h"

using namespace orbit;

namespace {

// CPU time of the calling thread (the engine runs with one intra-op thread and deferred background work, so
// every measured operation runs here): steadier than wall time on a shared machine. --wall switches.
bool g_wall = false;

struct Clock {
  using time_point = double;
  static double now() {
    if (g_wall) return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
  }
};
double seconds_since(double t0) { return Clock::now() - t0; }

// The i-th distinct 2-token chunk (ids 3..508, so 506² chunks).
std::vector<int64_t> chunk_tokens(int64_t i) { return {3 + i % 506, 3 + (i / 506) % 506}; }

// `anchor` > 0: dynamic-NTK RoPE anchored there, its factor max_positions / anchor.
std::string generated_model(const std::string& cache, int64_t max_positions, int64_t anchor) {
  const std::string name =
      "llama-1l-" + std::to_string(max_positions) + (anchor > 0 ? "-dynamic-" + std::to_string(anchor) : std::string());
  const std::string path = (std::filesystem::path(cache) / name).string();
  if (!std::filesystem::exists(std::filesystem::path(path) / "config.json")) {
    std::fprintf(stderr, "generating a 1-layer random llama with %lld positions in %s (once)...\n",
                 static_cast<long long>(max_positions), path.c_str());
    runtime::GeneratorOptions g;
    g.config = runtime::generator_preset("tiny-llama");
    g.config.num_layers = 1;
    const int64_t configured = anchor > 0 ? anchor : max_positions;
    g.config.max_position_embeddings = configured;
    g.config.rope.max_position_embeddings = configured;
    if (anchor > 0) {
      g.config.rope.scaling = runtime::RopeScaling::kDynamicNtk;
      g.config.rope.factor = static_cast<double>(max_positions) / static_cast<double>(anchor);
    }
    g.overwrite = true;
    runtime::generate_model(g, path);
  }
  return path;
}

struct Timings {
  double plan_admit = 0, admit = 0, plan_evict = 0, evict = 0, turn = 0;
  double bookkeeping() const { return plan_admit + admit + plan_evict + evict; }
};

double growth(double now, double before, double x, double prev_x) {
  return before > 0 && prev_x > 0 ? std::log(now / before) / std::log(x / prev_x) : 0.0;
}

// `reps` rounds of the measured operations on a window that holds `n` instances before and after each.
Timings measure(Engine& engine, Window& w, const WindowPolicy& policy, const WindowPolicy& blind, int64_t* next_chunk,
                int64_t reps, bool turn) {
  Timings t;
  for (int64_t r = 0; r < reps; ++r) {
    const ChunkRef c = engine.add_tokens(chunk_tokens((*next_chunk)++));
    engine.precompute(c);
    w.set_policy(policy);
    auto t0 = Clock::now();
    const Plan pa = w.plan_admit(c);
    t.plan_admit += seconds_since(t0);
    w.set_policy(blind);
    const Plan pb = w.plan_admit(c);
    ORBIT_CHECK(pb.forward_tokens == 0, "bench: the blind admit would run " << pb.forward_tokens << " forwards");
    t0 = Clock::now();
    w.apply(pb).value();
    t.admit += seconds_since(t0);
    (void)pa;
    const InstanceId oldest = w.instances().front().id;
    t0 = Clock::now();
    const Plan pe = w.plan_evict(oldest);
    t.plan_evict += seconds_since(t0);
    t0 = Clock::now();
    w.apply(pe).value();
    t.evict += seconds_since(t0);
    if (turn) {
      t0 = Clock::now();
      const ApplyReport added = w.add_turn({7});
      w.evict(added.added.front());
      t.turn += seconds_since(t0);
    }
  }
  const double k = 1.0 / static_cast<double>(reps);
  t.plan_admit *= k, t.admit *= k, t.plan_evict *= k, t.evict *= k, t.turn *= k;
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const cli::Args a(
        "bench_window_scale",
        cli::ArgSpec{{"--model", "--cache", "--sizes", "--reps", "--store-sizes", "--store-window", "--policy",
                      "--graph-sizes", "--build", "--dynamic"},
                     {"--no-turn", "--wall"},
                     "usage: bench_window_scale [--model PATH] [--cache DIR] [--sizes 10,100,1000,3000] [--reps 5]\n"
                     "                          [--store-sizes 100,1000,10000,100000] [--store-window 100]\n"
                     "                          [--policy patch:16] [--build blind] [--graph-sizes 250,500,1000,2000]\n"
                     "                          [--dynamic L] [--no-turn] [--wall]\n"
                     "  Per-operation planning and bookkeeping time (microseconds) of window operations against\n"
                     "  the window's chunk instances (--sizes) and the store's entries (--store-sizes), with the\n"
                     "  growth exponent between sizes (1 = linear; --sizes 10,100,1000,10000 adds about 6 minutes of\n"
                     "  building the largest window). --model: default a 1-layer random llama\n"
                     "  generated once under --cache (default /tmp/orbit-bench). --reps: rounds per size.\n"
                     "  --build: the policy part 1's windows are built under (blind: no forward in context;\n"
                     "  patch:16: every chunk formed in context, its patch stored).\n"
                     "  --store-window: instances of the window measured against store size. --no-turn: skip\n"
                     "  the add_turn column (one forward over the window). --store-sizes 0 skips part 2.\n"
                     "  --graph-sizes: dependency graphs timed re-conditioning every instance (0 skips part 3).\n"
                     "  --dynamic L: the generated model with dynamic-NTK RoPE anchored at L tokens (not with\n"
                     "  --model): every plan past L reprices each instance's shortfall.\n"
                     "  Times are the thread's CPU time (one intra-op thread), or wall time with --wall.\n"},
        argc, argv, 1);
    const std::vector<int64_t> sizes =
        bench::parse_positive_list(a.get("--sizes").value_or("10,100,1000,3000"), "--sizes");
    const std::string store_text = a.get("--store-sizes").value_or("100,1000,10000,100000");
    const std::vector<int64_t> store_sizes =
        store_text == "0" ? std::vector<int64_t>{} : bench::parse_positive_list(store_text, "--store-sizes");
    const int64_t reps = a.get_int("--reps", 5, 1);
    const std::string graph_text = a.get("--graph-sizes").value_or("250,500,1000,2000");
    const std::vector<int64_t> graph_sizes =
        graph_text == "0" ? std::vector<int64_t>{} : bench::parse_positive_list(graph_text, "--graph-sizes");
    const int64_t store_window = a.get_int("--store-window", 100, 1);
    const bool turn = !a.flag("--no-turn");
    g_wall = a.flag("--wall");
    const WindowPolicy policy = parse_policy(a.get("--policy").value_or("patch:16"));
    const WindowPolicy blind = parse_policy("blind");
    const WindowPolicy build_policy = parse_policy(a.get("--build").value_or("blind"));
    const int64_t largest = std::max(*std::max_element(sizes.begin(), sizes.end()), store_window);
    const int64_t anchor = a.get_int("--dynamic", 0, 0);
    ORBIT_CHECK(anchor == 0 || !a.get("--model").has_value(),
                "bench_window_scale: --dynamic applies to the generated model, not to --model");
    const std::string model = a.get("--model").value_or(generated_model(
        a.get("--cache").value_or("/tmp/orbit-bench"), std::max<int64_t>(1024, 2 * (largest + 8)), anchor));

    EngineOptions o;
    o.model = model;
    o.page_size = 2;
    o.pool_bytes = int64_t{64} << 20;  // 2-token pages of a 1-layer model: 10,000 instances need ~5 MB
    o.background = BackgroundMode::kDeferred;
    o.threads = 1;

    std::printf("model %s%s, policy %s, windows built under %s, %lld reps per size, %s time\n\n", model.c_str(),
                anchor > 0 ? " (dynamic-NTK RoPE)" : "", policy.name().c_str(), build_policy.name().c_str(),
                static_cast<long long>(reps), g_wall ? "wall" : "thread CPU");
    std::printf("window size (chunk instances); microseconds per operation\n");
    std::printf("%7s %11s %10s %11s %10s %11s %8s %11s %8s\n", "N", "plan-admit", "admit", "plan-evict", "evict",
                "plan+book", "growth", "turn(fwd)", "build-s");
    double prev = 0;
    int64_t prev_n = 0;
    for (int64_t n : sizes) {
      auto engine = Engine::open(o);
      WindowOptions wo;
      wo.policy = build_policy;
      Window w = engine->new_window(wo);
      const auto b0 = Clock::now();
      int64_t next = 0;
      for (; next < n; ++next) w.admit(engine->add_tokens(chunk_tokens(next)));
      engine->run_background();  // the patches a forming build queued
      const double build = seconds_since(b0);
      const Timings t = measure(*engine, w, policy, blind, &next, reps, turn);
      const double total = t.bookkeeping();
      std::printf("%7lld %11.1f %10.1f %11.1f %10.1f %11.1f %8.2f %11.1f %8.1f\n", static_cast<long long>(n),
                  t.plan_admit * 1e6, t.admit * 1e6, t.plan_evict * 1e6, t.evict * 1e6, total * 1e6,
                  growth(total, prev, static_cast<double>(n), static_cast<double>(prev_n)), t.turn * 1e6, build);
      std::fflush(stdout);
      prev = total;
      prev_n = n;
    }

    if (!store_sizes.empty()) {
      std::printf("\nstore size (entries), window of %lld instances; microseconds per operation\n",
                  static_cast<long long>(store_window));
      std::printf("%7s %11s %10s %11s %10s %11s %8s %8s\n", "S", "plan-admit", "admit", "plan-evict", "evict",
                  "plan+book", "growth", "fill-s");
      auto engine = Engine::open(o);
      WindowOptions wo;
      wo.policy = blind;
      Window w = engine->new_window(wo);
      int64_t next = 0;
      for (; next < store_window; ++next) w.admit(engine->add_tokens(chunk_tokens(next)));
      prev = 0;
      int64_t prev_s = 0;
      for (int64_t s : store_sizes) {
        const auto f0 = Clock::now();
        // stats() walks every entry, so it is read once per batch, not once per entry.
        for (int64_t held = engine->stats().store.tiers[1].entries; held < s;
             held = engine->stats().store.tiers[1].entries) {
          for (int64_t i = held; i < s; ++i) engine->precompute(engine->add_tokens(chunk_tokens(next++)));
        }
        const double fill = seconds_since(f0);
        const int64_t held = engine->stats().store.tiers[1].entries;
        const Timings t = measure(*engine, w, policy, blind, &next, reps, false);
        const double total = t.bookkeeping();
        std::printf("%7lld %11.1f %10.1f %11.1f %10.1f %11.1f %8.2f %8.1f\n", static_cast<long long>(held),
                    t.plan_admit * 1e6, t.admit * 1e6, t.plan_evict * 1e6, t.evict * 1e6, total * 1e6,
                    growth(total, prev, static_cast<double>(held), static_cast<double>(prev_s)), fill);
        std::fflush(stdout);
        prev = total;
        prev_s = held;
      }
    }

    if (!graph_sizes.empty()) {
      std::printf(
          "\ndependency graph: G instances each formed on all before it; every instance re-formed without the first\n");
      std::printf("%7s %12s %14s %12s %8s\n", "G", "edges", "recondition-ms", "us/instance", "growth");
      prev = 0;
      int64_t prev_g = 0;
      for (int64_t n : graph_sizes) {
        planner::DependencyGraph g;
        std::vector<planner::InstanceId> live;
        for (planner::InstanceId id = 1; id <= static_cast<planner::InstanceId>(n); ++id) {
          g.add_instance(id, "c");
          g.set_conditioning(id, id, live);
          live.push_back(id);
        }
        const double t0 = Clock::now();
        for (std::size_t i = 1; i < live.size(); ++i) {
          g.set_conditioning(
              live[i], 1000000 + live[i],
              std::vector<planner::InstanceId>(live.begin() + 1, live.begin() + static_cast<std::ptrdiff_t>(i)));
        }
        const double t = seconds_since(t0);
        std::printf("%7lld %12lld %14.1f %12.2f %8.2f\n", static_cast<long long>(n),
                    static_cast<long long>(g.num_edges()), t * 1e3, t * 1e6 / static_cast<double>(n),
                    growth(t, prev, static_cast<double>(n), static_cast<double>(prev_g)));
        std::fflush(stdout);
        prev = t;
        prev_g = n;
      }
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_window_scale: %s\n", e.what());
    return 2;
  }
}
