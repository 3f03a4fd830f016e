#include "serve/serve_context.h"

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>

#include "orbit/common/clock.h"
#include "orbit/common/error.h"
#include "orbit/policy.h"
#include "orbit/sync_memo.h"

namespace orbit::serve {

namespace {

std::string default_model_name(const std::string& model) {
  const std::filesystem::path p(model);
  return (p.has_filename() ? p.filename() : p.parent_path().filename()).string();
}

AuditOptions audit_options(const ServeOptions& o) {
  AuditOptions a;
  a.rate = o.audit_rate;
  a.owed_after = o.audit_owed_after;
  a.exact = o.audit_exact;
  a.fail_reads = o.test_fault == "audit";
  return a;
}

// The serve argument behind each EngineOptions field the context sets from one, so that the engine's errors
// (which name its fields) lead back to the command line.
constexpr std::pair<const char*, const char*> kEngineFieldArguments[] = {
    {"pool_bytes", "--pool-mb"},
    {"device_tier_bytes", "--device-tier-mb"},
    {"host_budget_bytes", "--host-budget-mb"},
    {"disk_budget_bytes", "--store-disk-mb"},
    {"remote_max_held_fraction", "--remote-max-held-fraction"},
    {"max_idle_chunks", "--max-idle-chunks"},
    {"max_background_bytes", "--background-mb"},
    {"model", "--model"},
};

std::shared_ptr<Engine> open_engine(const EngineOptions& eo) {
  try {
    return Engine::open(eo);
  } catch (const Error& e) {
    const std::string what = e.what();
    for (const auto& [field, argument] : kEngineFieldArguments) {
      if (what.find(std::string("EngineOptions::") + field + " ") != std::string::npos ||
          what.find(std::string("EngineOptions::") + field + ":") != std::string::npos) {
        ORBIT_FAIL("serve: argument '" << argument << "': " << what);
      }
    }
    throw;
  }
}

}  // namespace

ServeContext::ServeContext(const ServeOptions& o) : options(o), auditor(audit_options(o)) {
  EngineOptions eo;
  eo.model = o.model;
  eo.store_dir = o.store_dir;
  eo.remote = o.remote;
  eo.pool_bytes = o.pool_bytes;
  eo.device = o.device;
  eo.dtype = o.dtype;
  eo.device_tier_bytes = o.device_tier_bytes;
  eo.host_budget_bytes = o.host_budget_bytes;
  eo.disk_budget_bytes = o.disk_budget_bytes;
  eo.remote_max_held_fraction = o.remote_max_held_fraction;
  eo.max_idle_chunks = o.max_idle_chunks;
  eo.max_background_bytes = o.background_bytes;
  eo.stored_calibration = o.stored_calibration;
  eo.background = BackgroundMode::kDeferred;  // run by the idle worker, only while no request waits
  set_sync_memo_limits(o.sync_memo);
  policy = o.policy.empty() ? WindowPolicy{} : parse_policy(o.policy);
  engine = open_engine(eo);
  info = engine->model_info();
  options.limits.vocab_size = info.vocab_size;  // requests' logit_bias keys are checked against it
  ORBIT_CHECK(engine->has_tokenizer(), "serve: " << o.model << " has no tokenizer (the server takes text)");
  model_name = o.model_name.empty() ? default_model_name(o.model) : o.model_name;
  chat.chat_template = o.chat_template;
  const std::string origin = o.chat_template_origin.empty() ? "ServeOptions::chat_template" : o.chat_template_origin;
  if (!o.chat_template.empty()) {
    // A template that cannot render a conversation with a tool call is refused now, not on every request.
    ChatMessage user;
    user.role = "user";
    user.content = "hello";
    try {
      (void)engine->render_chat({user}, true, chat);
    } catch (const Error& e) {
      ORBIT_FAIL(origin << ": the chat template cannot render a conversation: " << e.what());
    }
  }
  tool_format = o.tool_call_format.empty() ? engine->tool_call_format(chat)
                                           : parse_tool_call_format(o.tool_call_format, "--tool-call-format");
  constraints = std::make_unique<ConstraintCache>(tool_format, token_vocabulary(*engine), info.max_positions);
}

Window ServeContext::new_window() const {
  WindowOptions wo;
  wo.policy = policy;
  return engine->new_window(wo);
}

bool ServeContext::enter_gate(const std::string& lane, const std::function<bool()>& cancelled, int64_t guest_tokens) {
  const auto t0 = std::chrono::steady_clock::now();
  const bool ok = gate.enter(lane, cancelled, 50, guest_tokens);
  if (ok) metrics.count_wait(seconds_since(t0));
  return ok;
}

}  // namespace orbit::serve
