#include "orbit/plan.h"

#include <iomanip>
#include <sstream>

namespace orbit {

const char* operation_name(Operation op) noexcept {
  switch (op) {
    case Operation::kAdmit: return "admit";
    case Operation::kAddTurn: return "turn";
    case Operation::kEvict: return "evict";
    case Operation::kSlide: return "slide";
    case Operation::kRecall: return "recall";
    case Operation::kReorder: return "reorder";
    case Operation::kRecondition: return "recondition";
    case Operation::kFlush: return "flush";
    case Operation::kHeal: return "heal";
    case Operation::kSync: return "sync";
  }
  return "?";
}

const char* step_action_name(StepAction action) noexcept {
  switch (action) {
    case StepAction::kKeep: return "keep";
    case StepAction::kCanonical: return "canonical";
    case StepAction::kApplyPatch: return "apply-patch";
    case StepAction::kLoadConditioned: return "load-conditioned";
    case StepAction::kForm: return "form";
    case StepAction::kReprefill: return "reprefill";
    case StepAction::kBlind: return "blind";
    case StepAction::kRecompute: return "recompute";
    case StepAction::kPrefillTurn: return "prefill-turn";
    case StepAction::kEvict: return "evict";
  }
  return "?";
}

const char* serve_action_name(ServeActionId id) noexcept {
  switch (id) {
    case ServeActionId::kKeep: return "keep";
    case ServeActionId::kCanonical: return "canonical";
    case ServeActionId::kStoredPatch: return "stored-patch";
    case ServeActionId::kLoadConditioned: return "load-conditioned";
    case ServeActionId::kReuse: return "reuse";
    case ServeActionId::kBlind: return "blind";
    case ServeActionId::kFirstK: return "first-k";
    case ServeActionId::kCacheBlend: return "cacheblend";
    case ServeActionId::kForm: return "form";
    case ServeActionId::kPrefill: return "prefill";
    case ServeActionId::kPrefillTurn: return "prefill-turn";
    case ServeActionId::kEvict: return "evict";
  }
  return "?";
}

const char* patch_match_name(PatchMatch match) noexcept {
  switch (match) {
    case PatchMatch::kNone: return "none";
    case PatchMatch::kExact: return "exact";
    case PatchMatch::kOrbit: return "orbit";
    case PatchMatch::kStale: return "stale";
  }
  return "?";
}

int64_t Plan::count(StepAction action) const {
  int64_t n = 0;
  for (const PlanStep& s : steps) n += s.action == action ? 1 : 0;
  return n;
}

std::string Plan::describe() const {
  std::ostringstream out;
  out << operation_name(op) << " [" << policy.name() << "]: " << steps.size() << " steps, " << std::fixed
      << std::setprecision(1) << forward_tokens << " forward tokens (+" << background_tokens << " background), "
      << bytes_moved << " bytes moved, " << device_bytes_after << " device bytes after, "
      << (exact ? "exact" : "approximate") << std::scientific << std::setprecision(2) << ", est " << estimated_seconds
      << " s, predicted KL " << predicted_kl;
  if (policy.kl_budget > 0) out << " (budget " << policy.kl_budget << ")";
  out << "\n";
  if (!refusal.empty()) out << "  refused: " << refusal << "\n";
  if (!attention.empty()) out << "  attention: " << attention << "\n";
  for (const PlanStep& s : steps) {
    out << "  #" << s.instance << " "
        << (s.is_turn ? "turn" : (s.chunk.label.empty() ? s.chunk.key.substr(0, 8) : s.chunk.label)) << " @"
        << s.position << ": " << serve_action_name(s.how);
    if (s.match != PatchMatch::kNone) out << " (" << patch_match_name(s.match) << " match)";
    if (s.rank_k > 0 || s.rank_v > 0) out << " rank " << s.rank_k << "/" << s.rank_v;
    if (s.encode_canonical) out << " +encode";
    out << std::fixed << std::setprecision(1);
    if (s.forward_tokens > 0) out << ", " << s.forward_tokens << " fwd";
    if (s.measure_sensitivity) {
      out << ", +" << s.background_tokens << " fwd in background (its sensitivity)";
    } else if (s.background_tokens > 0 || s.background_patch) {
      out << ", +" << s.background_tokens << " fwd & SVD in background";
    }
    if (s.action != StepAction::kEvict) {
      out << std::scientific << std::setprecision(1) << ", est " << s.estimated_seconds << " s, KL~" << s.predicted_kl;
      if (s.sensitivity >= 0 && s.predicted_kl > 0) out << " (sensitivity " << s.sensitivity << ")";
    }
    if (!s.reason.empty()) out << " — " << s.reason;
    out << "\n";
  }
  return out.str();
}

}  // namespace orbit

namespace orbit {

const char* chunk_kind_name(ChunkKind kind) noexcept {
  switch (kind) {
    case ChunkKind::kTokens: return "tokens";
    case ChunkKind::kEmbeddings: return "embeddings";
  }
  return "?";
}

}  // namespace orbit
