// Traces with position rows (M-RoPE): a video trace of embedding chunks with grids, made by make_trace for a
// random Qwen2-VL-shaped model, replays exactly under re-prefill, and the default policy keeps its critical
// path cheaper.
#include "orbit_catch.h"

#include "orbit/trace.h"
#include "test_helpers.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

using namespace orbit;

TEST_CASE("M-RoPE: embedding chunks with grids replay exactly under re-prefill", "[trace][mrope]") {
  test::TempDir dir;
  const test::CliRun mk = test::cli("make-model --preset tiny-qwen2-vl --out " + (dir / "vl"));
  INFO(mk.out);
  REQUIRE(mk.status == 0);
  MakeTraceOptions mo;
  mo.kind = "video";
  mo.steps = 12;
  mo.position_rows = 3;
  mo.chunk_tokens = 12;
  mo.max_positions = 1024;
  const Trace t = make_trace(mo);
  ReplayOptions o;
  o.engine.model = dir / "vl";
  o.engine.page_size = 4;
  const ReplayReport r = replay(t, o);
  const PolicyReplay* reprefill = r.find("reprefill");
  REQUIRE(reprefill != nullptr);
  for (const StepResult& s : reprefill->steps) {
    if (s.fidelity) CHECK(s.fidelity->kl <= 1e-6);
  }
  // The default policy heals in idle time (background work): it is cheaper on the critical path.
  CHECK(r.policies[0].totals.critical_forward_tokens < reprefill->totals.critical_forward_tokens);
}

}  // namespace ORBIT_TEST_FILE
