// replay() (orbit/trace.h): one fresh Engine per policy, every step planned, applied, timed and checked
// against a re-prefill of the same window; the offline bound over the patch policies' demands.
// A policy's run is trace_policy_run.h; the content resolved once for all of them, the offline bound's demands
// and the totals are trace_replay_parts.h.
#include <map>
#include <set>

#include "orbit/common/error.h"
#include "orbit/trace.h"
#include "trace_policy_run.h"
#include "trace_replay_parts.h"

namespace orbit {

using trace_detail::PolicyRun;

const PolicyReplay* ReplayReport::find(const std::string& policy_name) const {
  for (const PolicyReplay& p : policies) {
    if (p.policy == policy_name) return &p;
  }
  return nullptr;
}

void check_policy_columns(const std::vector<std::string>& specs, const std::string& what) {
  std::map<std::string, std::string> named;  // each policy's canonical name -> the spec that gave it
  for (const std::string& spec : specs) {
    const std::string name = parse_policy(spec).name();
    // A second one of the same name would replay it again under a name that no longer tells the columns apart.
    const auto [it, fresh] = named.emplace(name, spec);
    ORBIT_CHECK(fresh || it->second != spec,
                what << " lists '" << spec << "' twice; each policy is one column of the report");
    ORBIT_CHECK(fresh, what << " lists '" << it->second << "' and '" << spec << "', the same policy (" << name
                            << "); each policy is one column of the report");
  }
}

ReplayReport replay(const Trace& trace, const ReplayOptions& options) {
  validate_trace(trace);
  ORBIT_CHECK(!options.engine.model.empty(), "replay: no model (ReplayOptions::engine.model)");
  check_policy_columns(options.policies, "replay: ReplayOptions::policies");
  // Policies: the ones asked for, then the baselines not already among them.
  std::vector<std::pair<WindowPolicy, bool>> policies;
  std::set<std::string> names;
  auto add = [&](const WindowPolicy& p, bool baseline) {
    if (names.insert(p.name()).second) policies.emplace_back(p, baseline);
  };
  for (const std::string& spec : options.policies) add(parse_policy(spec), false);
  if (options.baselines) {
    for (const char* spec : {"reprefill", "prefix", "blind"}) add(parse_policy(spec), true);
  }
  ORBIT_CHECK(!policies.empty(), "replay: no policies to replay");
  if (options.patch_capacity_bytes) {
    ORBIT_CHECK(*options.patch_capacity_bytes >= 0,
                "replay: ReplayOptions::patch_capacity_bytes must be >= 0, got " << *options.patch_capacity_bytes);
    std::string asked;
    bool forms = false;
    for (const auto& [policy, baseline] : policies) {
      if (baseline) continue;
      forms = forms || forms_patches(policy);
      asked += (asked.empty() ? "" : ", ") + policy.name();
    }
    ORBIT_CHECK(forms,
                "replay: ReplayOptions::patch_capacity_bytes sizes the offline bound of the patches a "
                "policy forms, and none of the policies asked for forms one ("
                    << asked << ")");
  }
  ORBIT_CHECK(options.timing_repeats >= 1,
              "replay: ReplayOptions::timing_repeats must be >= 1, got " << options.timing_repeats);
  ORBIT_CHECK(options.timing_repeats == 1 || !options.calibrate,
              "replay: ReplayOptions::timing_repeats > 1 needs calibrate off (calibration fits the cost model from "
              "measured times, so each round could plan differently)");
  ORBIT_CHECK(!(options.calibrate && options.calibrate_fidelity),
              "replay: ReplayOptions::calibrate_fidelity needs calibrate off (calibrate fits the fidelity model too)");
  // The transcript of generate+append steps comes from the reprefill run (the exact window) when there is
  // one: run it first, report in the order above.
  std::vector<std::size_t> run_order;
  const std::string ceiling = parse_policy("reprefill").name();
  for (std::size_t i = 0; i < policies.size(); ++i) {
    if (policies[i].first.name() == ceiling) run_order.push_back(i);
  }
  for (std::size_t i = 0; i < policies.size(); ++i) {
    if (policies[i].first.name() != ceiling) run_order.push_back(i);
  }

  EngineOptions eo = options.engine;
  eo.store_dir.clear();
  std::shared_ptr<Engine> first = Engine::open(eo);
  const trace_detail::Resolved resolved = trace_detail::resolve(trace, *first);
  // After the chunks are checked against the model: a trace without steps would report every ratio as 0 / 0,
  // nothing replayed and yet a claim made.
  ORBIT_CHECK(!trace.steps.empty(), "replay: " << trace_detail::file_of(trace) << " has no steps: nothing to replay");
  ReplayReport report;
  report.trace = trace.name.empty() ? trace_detail::file_of(trace) : trace.name;
  report.source = trace.source;
  report.model = first->model_info().origin;
  report.device = first->model_info().device;
  report.dtype = first->model_info().dtype;
  report.fingerprint = first->model_info().fingerprint;
  report.steps = trace.steps.size();
  first.reset();

  trace_detail::Transcript transcript;
  std::vector<PolicyReplay> results(policies.size());
  for (std::size_t k = 0; k < run_order.size(); ++k) {
    const std::size_t i = run_order[k];
    PolicyRun run(trace, resolved, options, policies[i].first, &transcript, k == 0);
    results[i] = run.run(k, run_order.size());
    results[i].baseline = policies[i].second;
  }
  // Later rounds only time the steps: no fidelity forwards, no plan text.
  ReplayOptions timing = options;
  timing.fidelity = false;
  timing.explain = false;
  for (int round = 2; round <= options.timing_repeats; ++round) {
    for (std::size_t k = 0; k < run_order.size(); ++k) {
      const std::size_t i = run_order[k];
      PolicyRun run(trace, resolved, timing, policies[i].first, &transcript, false);
      trace_detail::keep_fastest(results[i], run.run(k, run_order.size()), round);
    }
  }
  report.policies = std::move(results);
  return report;
}

}  // namespace orbit
