// Child process for the cross-process engine tests (test_store_shared.cpp, test_store_remote.cpp): an
// agent that reads the same documents as another one.
//
//   store_engine_child MODEL DIR REMOTE N   opens an Engine on MODEL with store_dir DIR ("-": none) and
//                                           remote REMOTE ("-": none), registers N token chunks (chunk c:
//                                           40 tokens, a pure function of c), admits them all into a
//                                           window under patch:16, prints one JSON line of counters,
//                                           then keeps the engine (and its store) open until stdin
//                                           closes
#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "orbit/engine.h"
#include "orbit/errors.h"
#include "orbit/policy.h"

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: store_engine_child MODEL DIR|- REMOTE|- N\n");
    return 2;
  }
  try {
    orbit::EngineOptions o;
    o.model = argv[1];
    o.store_dir = std::string(argv[2]) == "-" ? "" : argv[2];
    o.remote = std::string(argv[3]) == "-" ? "" : argv[3];
    auto engine = orbit::Engine::open(o);
    const int n = std::atoi(argv[4]);
    // patch:16 without a fidelity budget serves a stored patch whenever the store has one for the exact
    // context, which is what these tests watch: the store shared between processes. (Under a budget the
    // planner may prefer an exact prefill to a rank-16 patch; that is the planner's choice, not sharing.)
    orbit::WindowOptions wo;
    wo.policy = orbit::parse_policy("patch:16");
    orbit::Window w = engine->new_window(wo);
    for (int c = 0; c < n; ++c) {
      std::vector<int64_t> tokens;
      for (int t = 0; t < 40; ++t) tokens.push_back(1 + (c * 131 + t * 17) % 500);
      w.admit(engine->add_tokens(tokens));
    }
    // A first sight encodes its canonical in the background: wait for it, so what this process formed is
    // in the shared store before it reports (and before the other process looks).
    (void)engine->run_background();
    const orbit::EngineStats s = engine->stats();
    int64_t disk_hits = 0, host_hits = 0;
    for (const auto& t : s.store.tiers) {
      if (t.tier == orbit::StoreTier::kDisk) disk_hits = t.hits;
      if (t.tier == orbit::StoreTier::kHost) host_hits = t.hits;
    }
    const nlohmann::json out = {{"canonicals_encoded", s.canonicals_encoded},
                                {"disk_hits", disk_hits},
                                {"host_hits", host_hits},
                                {"remote_hits", s.store.remote.hits},
                                {"remote_writes_queued", s.store.remote.queued + s.store.remote.writes}};
    std::printf("%s\n", out.dump().c_str());
    std::fflush(stdout);
    char buffer[64];
    while (std::fread(buffer, 1, sizeof buffer, stdin) > 0) {
    }
    return 0;
  } catch (const orbit::Error& e) {
    std::fprintf(stderr, "store_engine_child: %s\n", e.what());
    return 3;
  }
}
