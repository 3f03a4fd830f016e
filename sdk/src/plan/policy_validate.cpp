// validate_policy (orbit/policy.h): every field within its range, and none set apart from its default where the
// policy's strategy never reads it.
#include <cmath>
#include <cstdint>
#include <optional>
#include <sstream>
#include <string>

#include "orbit/common/error.h"
#include "orbit/policy.h"

namespace orbit {

namespace {

// A field set to a value other than its default that `p`'s strategy never reads (validate_policy).
struct Unread {
  const char* field = nullptr;
  std::string value;
  const char* applies = "";  // what it applies to
};

template <typename T>
std::string value_text(T v) {
  std::ostringstream s;
  s << std::boolalpha << v;
  return s.str();
}

// The first of `p`'s fields that its strategy never reads (policy.h lists where each applies).
std::optional<Unread> unread_field(const WindowPolicy& p) {
  const WindowPolicy d;
  const bool budget = p.kl_budget > 0;
  const bool looks_up = p.reuse_stored && !p.store_conditioned;  // StoredPatch plans a lookup
  // Under a kl_budget every serving action is a candidate for a miss, priced against the budget: the miss
  // action is read only as far as whether a miss forms a patch or prefills (throughput's reprefill).
  if (budget && p.on_miss != MissAction::kForm && p.on_miss != MissAction::kReprefill) {
    return Unread{"on_miss", miss_action_name(p.on_miss),
                  "policies without a kl_budget: set kl_budget = 0 for it (under a budget each miss takes the "
                  "action the budget prices best; on_miss form or reprefill say whether a miss forms a patch)"};
  }
  if (budget && p.survivors == SurvivorAction::kRecondition) {
    return Unread{"survivors", "recondition",
                  "policies without a kl_budget: set kl_budget = 0 for it (under a budget an instance whose "
                  "context changed is kept while the budget holds, re-served where it does not)"};
  }
  if (p.first_k != d.first_k && p.on_miss != MissAction::kFirstK && !budget) {
    return Unread{"first_k", value_text(p.first_k), "on_miss first_k (firstk:K), or any policy with a kl_budget"};
  }
  if (p.recompute_ratio != d.recompute_ratio && p.on_miss != MissAction::kTokenRecompute && !budget) {
    return Unread{"recompute_ratio", value_text(p.recompute_ratio),
                  "on_miss token_recompute (cacheblend:R), or any policy with a kl_budget"};
  }
  if (p.deep_energy != d.deep_energy && !p.deep_only) {
    return Unread{"deep_energy", value_text(p.deep_energy), "deep_only (:deep)"};
  }
  if (p.stale == StalePatch::kAccept && !looks_up) {
    return Unread{"stale", "accept", "reuse_stored without store_conditioned (stored patches looked up)"};
  }
  if (p.max_divergence != d.max_divergence && p.stale != StalePatch::kAccept) {
    return Unread{"max_divergence", value_text(p.max_divergence), "stale = accept (:stale=D)"};
  }
  if (p.heal_min_kl != d.heal_min_kl && !p.heal_when_idle) {
    return Unread{"heal_min_kl", value_text(p.heal_min_kl), "heal_when_idle (:heal=X)"};
  }
  if (p.self_check && !p.heal_when_idle) {
    return Unread{"self_check", "true", "heal_when_idle (the check rides on the idle-time heal: :heal:check)"};
  }
  if (p.prepare_lists != d.prepare_lists && p.prepare_lists > 0 && !p.reuse_computed) {
    return Unread{"prepare_lists", value_text(p.prepare_lists),
                  "reuse_computed (a prepared list is read by exact reuse)"};
  }
  if (p.trust_hints != d.trust_hints && p.prepare_moves == 0 && !(p.prepare_lists > 0 && p.reuse_computed)) {
    return Unread{"trust_hints", value_text(p.trust_hints), "prepare_lists or prepare_moves above 0 (what it skips)"};
  }
  if (p.cost_aware && (budget || !(p.on_miss == MissAction::kForm || looks_up))) {
    return Unread{
        "cost_aware", "true",
        "policies without a kl_budget whose miss forms a patch (on_miss form) or that look up stored patches"};
  }
  if (p.expected_reuse != d.expected_reuse && !p.cost_aware) {
    return Unread{"expected_reuse", value_text(p.expected_reuse), "cost_aware"};
  }
  if (p.read_attention_weight > 0 && !budget) {
    return Unread{"read_attention_weight", value_text(p.read_attention_weight),
                  "any policy with a kl_budget (it weighs the read's plan under the budget)"};
  }
  if (p.read_attention_raised_only && !(p.read_attention_weight > 0)) {
    return Unread{"read_attention_raised_only", "true", "read_attention_weight above 0 (the read's look)"};
  }
  return std::nullopt;
}

}  // namespace

namespace {

// A number field outside [lo, hi] ((lo, hi] where lo_open), or not finite: refused naming the field, with the
// range the Python setters and the spec parser use, so a policy built field by field in C++ is held to it too.
void check_range(const WindowPolicy& p, const char* field, double x, double lo, double hi, bool lo_open = false) {
  ORBIT_CHECK(std::isfinite(x) && x >= lo && x <= hi && !(lo_open && x == lo),
              "WindowPolicy: " << field << " = " << x << " must be in " << (lo_open ? "(" : "[") << lo << ", " << hi
                               << "] (policy '" << p.name() << "')");
}

void check_count(const WindowPolicy& p, const char* field, int64_t n, int64_t lo) {
  ORBIT_CHECK(n >= lo,
              "WindowPolicy: " << field << " = " << n << " must be >= " << lo << " (policy '" << p.name() << "')");
}

// A rank is a positive count, or -1 for every singular direction ("full").
void check_rank(const WindowPolicy& p, const char* field, int64_t r) {
  ORBIT_CHECK(r >= 1 || r == -1, "WindowPolicy: " << field << " = " << r
                                                  << " must be a positive int or -1 (full rank) (policy '" << p.name()
                                                  << "')");
}

// An enum field holding none of its `count` values (a number cast to it), refused before name() reads it.
void check_enum(const char* field, int value, int count) {
  ORBIT_CHECK(value >= 0 && value < count,
              "WindowPolicy: " << field << " = " << value << " is none of its values (0 to " << count - 1 << ")");
}

void check_ranges(const WindowPolicy& p) {
  check_enum("on_miss", static_cast<int>(p.on_miss), static_cast<int>(MissAction::kFirstK) + 1);
  check_enum("survivors", static_cast<int>(p.survivors), static_cast<int>(SurvivorAction::kRecondition) + 1);
  check_enum("stale", static_cast<int>(p.stale), static_cast<int>(StalePatch::kAccept) + 1);
  check_range(p, "max_divergence", p.max_divergence, 0, 1);
  check_rank(p, "rank_k", p.rank_k);
  check_rank(p, "rank_v", p.rank_v);
  check_range(p, "deep_energy", p.deep_energy, 0, 1, /*lo_open=*/true);
  check_range(p, "expected_reuse", p.expected_reuse, 0, 1e9);
  check_range(p, "kl_budget", p.kl_budget, 0, 1e9);
  check_range(p, "heal_min_kl", p.heal_min_kl, 0, 1e9);
  check_count(p, "prepare_recalls", p.prepare_recalls, 0);
  check_count(p, "prepare_moves", p.prepare_moves, 0);
  check_count(p, "prepare_lists", p.prepare_lists, 0);
  check_count(p, "trust_hints", p.trust_hints, 0);
  check_range(p, "read_through", p.read_through, 0, 1);
  check_range(p, "attention_weight", p.attention_weight, 0, 1e6);
  check_range(p, "content_weight", p.content_weight, 0, 1e6);
  check_range(p, "read_attention_weight", p.read_attention_weight, 0, 1e6);
  check_range(p, "recompute_ratio", p.recompute_ratio, 0, 1, /*lo_open=*/true);
  check_count(p, "first_k", p.first_k, 1);
}

}  // namespace

void validate_policy(const WindowPolicy& policy) {
  check_ranges(policy);
  const std::optional<Unread> u = unread_field(policy);
  if (!u) return;
  ORBIT_FAIL("WindowPolicy: " << u->field << " = " << u->value << " has no effect with strategy '" << policy.name()
                              << "' (it applies to: " << u->applies << ")");
}

}  // namespace orbit
