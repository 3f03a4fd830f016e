// replay_report_json (orbit/trace.h): the replay report as JSON.
#include <cmath>
#include <nlohmann/json.hpp>

#include "orbit/trace.h"

namespace orbit {

using nlohmann::json;

namespace {

json num(double x) { return std::isfinite(x) ? json(x) : json(nullptr); }

json step_json(const StepResult& s) {
  json o = {{"index", s.index},
            {"op", trace_op_name(s.op)},
            {"branch", s.branch},
            {"status", s.status},
            {"forward_tokens", num(s.forward_tokens)},
            {"critical_forward_tokens", num(s.critical_forward_tokens)},
            {"query_forward_tokens", num(s.query_forward_tokens)},
            {"prefix_cache_tokens", num(s.prefix_cache_tokens)},
            {"background_forward_tokens", num(s.background_forward_tokens)},
            {"heal_forward_tokens", num(s.heal_forward_tokens)},
            {"prepare_forward_tokens", num(s.prepare_forward_tokens)},
            {"check_forward_tokens", num(s.check_forward_tokens)},
            {"check_kl", s.check_kl >= 0 ? num(s.check_kl) : json(nullptr)},
            {"fidelity_correction", num(s.fidelity_correction)},
            {"decode_tokens", num(s.decode_tokens)},
            {"full_prefill_tokens", num(s.full_prefill_tokens)},
            {"patches_formed", s.patches_formed},
            {"patch_hits", s.patch_hits},
            {"canonicals_encoded", s.canonicals_encoded},
            {"bytes_moved", s.bytes_moved},
            {"window_tokens", s.window_tokens},
            {"window_bytes", s.window_bytes},
            {"device_bytes", s.device_bytes},
            {"peak_device_bytes", s.peak_device_bytes},
            {"seconds", num(s.seconds)},
            {"critical_seconds", num(s.critical_seconds)},
            {"background_seconds", num(s.background_seconds)},
            {"predicted_kl", s.predicted_kl >= 0 ? num(s.predicted_kl) : json(nullptr)}};
  o["fidelity"] = s.fidelity ? json{{"kl", num(s.fidelity->kl)},
                                    {"top1", num(s.fidelity->top1)},
                                    {"rows", s.fidelity->rows},
                                    {"top1_misses", s.fidelity->top1_misses},
                                    {"near_tie_rows", s.fidelity->near_tie_rows},
                                    {"near_tie_misses", s.fidelity->near_tie_misses}}
                             : json(nullptr);
  if (s.fidelity && !s.fidelity->misses.empty()) {
    json misses = json::array();
    for (const Top1Miss& m : s.fidelity->misses) {
      misses.push_back({{"row", m.row}, {"margin", num(m.margin)}, {"kl", num(m.kl)}, {"near_tie", m.near_tie}});
    }
    o["fidelity"]["misses"] = std::move(misses);
  }
  if (s.deferred > 0) o["deferred"] = s.deferred;
  if (s.probe_unfit) o["probe_unfit"] = true;
  o["radix_tokens"] = num(s.radix_tokens);
  o["radix_unbounded_tokens"] = num(s.radix_unbounded_tokens);
  o["block_cache_tokens"] = num(s.block_cache_tokens);
  o["radix_call_tokens"] = num(s.radix_call_tokens);
  o["yardstick_read"] = s.yardstick_read ? json{{"window", s.yardstick_read->window},
                                                {"query", s.yardstick_read->query},
                                                {"generated", s.yardstick_read->generated}}
                                         : json(nullptr);
  if (s.op == TraceOp::kGenerate) {
    o["generated"] = s.generated;
    o["agreement"] = s.agreement >= 0 ? json(s.agreement) : json(nullptr);
  }
  if (s.disposable) {
    o["disposable"] = *s.disposable;
    o["kl_first"] = num(s.kl_first);
  }
  if (!s.plan.empty()) o["plan"] = s.plan;
  if (!s.losses.empty()) {
    json losses = json::array();
    for (const InstanceLoss& l : s.losses) {
      losses.push_back({{"instance", l.instance},
                        {"label", l.label},
                        {"position", l.position},
                        {"length", l.length},
                        {"served_as", served_as(l)},
                        {"kv_change", num(l.kv_change)},
                        {"measured_kl", num(l.measured_kl)},
                        {"predicted_kl", num(l.predicted_kl)}});
    }
    o["instance_losses"] = losses;
  }
  return o;
}

json totals_json(const PolicyTotals& t) {
  json o = {{"forward_tokens", num(t.forward_tokens)},
            {"critical_forward_tokens", num(t.critical_forward_tokens)},
            {"query_forward_tokens", num(t.query_forward_tokens)},
            {"prefix_cache_tokens", num(t.prefix_cache_tokens)},
            {"yardstick_reads", t.yardstick_reads},
            {"radix_tokens", num(t.radix_tokens)},
            {"radix_unbounded_tokens", num(t.radix_unbounded_tokens)},
            {"block_cache_tokens", num(t.block_cache_tokens)},
            {"radix_call_tokens", num(t.radix_call_tokens)},
            {"background_forward_tokens", num(t.background_forward_tokens)},
            {"heal_forward_tokens", num(t.heal_forward_tokens)},
            {"prepare_forward_tokens", num(t.prepare_forward_tokens)},
            {"check_forward_tokens", num(t.check_forward_tokens)},
            {"fidelity_checks", t.fidelity_checks},
            {"fidelity_correction", num(t.fidelity_correction)},
            {"critical_seconds", num(t.critical_seconds)},
            {"background_seconds", num(t.background_seconds)},
            {"mean_predicted_kl", t.mean_predicted_steps > 0 ? num(t.mean_predicted_kl) : json(nullptr)},
            {"mean_predicted_steps", t.mean_predicted_steps},
            {"predicted_steps", t.predicted_steps},
            {"kl_prediction_bias", t.predicted_steps > 0 ? num(t.kl_prediction_bias) : json(nullptr)},
            {"kl_prediction_spread", t.predicted_steps > 0 ? num(t.kl_prediction_spread) : json(nullptr)},
            {"full_prefill_tokens", num(t.full_prefill_tokens)},
            {"decode_tokens", num(t.decode_tokens)},
            {"seconds", num(t.seconds)},
            {"bytes_moved", t.bytes_moved},
            {"peak_device_bytes", t.peak_device_bytes},
            {"patches_formed", t.patches_formed},
            {"patch_hits", t.patch_hits},
            {"refused", t.refused},
            {"fidelity_steps", t.fidelity_steps},
            {"probe_unfit_steps", t.probe_unfit_steps},
            // null when no step was measured (a 0 would read as "exact")
            {"mean_kl", t.fidelity_steps > 0 ? num(t.mean_kl) : json(nullptr)},
            {"max_kl", t.fidelity_steps > 0 ? num(t.max_kl) : json(nullptr)},
            {"mean_top1", t.fidelity_steps > 0 ? num(t.mean_top1) : json(nullptr)},
            {"top1_rows", t.top1_rows},
            {"top1_misses", t.top1_misses},
            {"near_tie_rows", t.near_tie_rows},
            {"near_tie_misses", t.near_tie_misses}};
  if (!t.loss_agreement.empty()) {
    json a = json::array();
    for (const LossAgreement& g : t.loss_agreement) {
      a.push_back({{"served_as", g.served_as},
                   {"instances", g.instances},
                   {"compared", g.compared},
                   {"mean_measured_kl", num(g.mean_measured_kl)},
                   {"mean_predicted_kl", num(g.mean_predicted_kl)},
                   {"bias", g.compared > 0 ? num(g.bias) : json(nullptr)},
                   {"spread", g.compared > 0 ? num(g.spread) : json(nullptr)}});
    }
    o["loss_agreement"] = a;
  }
  return o;
}

json offline_json(const OfflineReport& o) {
  return {{"capacity_bytes", o.capacity_bytes},
          {"demands", o.demands},
          {"distinct_patches", o.distinct_patches},
          {"online_formations", o.online_formations},
          {"online_form_tokens", num(o.online_form_tokens)},
          {"compulsory_formations", o.compulsory_formations},
          {"compulsory_form_tokens", num(o.compulsory_form_tokens)},
          {"belady_formations", o.belady_formations},
          {"belady_form_tokens", num(o.belady_form_tokens)},
          {"lru_formations", o.lru_formations},
          {"lru_form_tokens", num(o.lru_form_tokens)}};
}

}  // namespace

std::string replay_report_json(const ReplayReport& report, int indent) {
  json policies = json::array();
  for (const PolicyReplay& p : report.policies) {
    json steps = json::array();
    for (const StepResult& s : p.steps) steps.push_back(step_json(s));
    policies.push_back(
        {{"policy", p.policy},
         {"baseline", p.baseline},
         {"totals", totals_json(p.totals)},
         {"fidelity_model", p.fidelity_model},
         {"yardstick", {{"capacity_tokens", p.yardstick_capacity_tokens}, {"block_tokens", p.yardstick_block_tokens}}},
         {"offline", p.offline ? offline_json(*p.offline) : json(nullptr)},
         {"steps", steps}});
  }
  const json root = {{"format", "orbit-replay/1"},
                     {"trace", report.trace},
                     {"source", report.source},
                     {"model", report.model},
                     {"fingerprint", report.fingerprint},
                     {"device", report.device},
                     {"dtype", report.dtype},
                     {"steps", report.steps},
                     {"policies", policies}};
  return root.dump(indent) + "\n";
}

}  // namespace orbit
