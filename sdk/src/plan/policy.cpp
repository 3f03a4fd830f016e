#include "orbit/policy.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <set>
#include <sstream>
#include <vector>

#include "orbit/common/error.h"

namespace orbit {

const char* miss_action_name(MissAction action) noexcept {
  switch (action) {
    case MissAction::kForm: return "form";
    case MissAction::kBlind: return "blind";
    case MissAction::kReprefill: return "reprefill";
    case MissAction::kTokenRecompute: return "token-recompute";
    case MissAction::kFirstK: return "first-k";
  }
  return "?";
}

namespace {

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : s) {
    if (c == sep) {
      out.push_back(cur);
      cur.clear();
    } else {
      cur.push_back(c);
    }
  }
  out.push_back(cur);
  return out;
}

[[noreturn]] void bad_spec(const std::string& spec, const std::string& why) {
  ORBIT_FAIL("policy '" << spec << "': " << why << "\nvalid policies:\n" << policy_spec_help());
}

double parse_number(const std::string& spec, const std::string& text, const char* what) {
  // Decimal only, as the names print them: strtod alone would also read "0x10" (16), "inf", "nan" and " 5".
  const bool decimal = !text.empty() && text.find_first_not_of("0123456789.eE+-") == std::string::npos;
  char* end = nullptr;
  const double v = decimal ? std::strtod(text.c_str(), &end) : 0.0;
  if (!decimal || end != text.c_str() + text.size())
    bad_spec(spec, std::string(what) + " '" + text + "' is not a number");
  return v;
}

std::string rank_text(int64_t r) { return r < 0 ? "full" : std::to_string(r); }

// A patch rank as rank_text writes it: a positive integer, or "full" (-1).
int64_t parse_rank(const std::string& spec, const std::string& text) {
  if (text == "full") return -1;
  const double r = parse_number(spec, text, "rank");
  if (!(r >= 1 && r <= 1e15) || r != static_cast<double>(static_cast<int64_t>(r)))
    bad_spec(spec, "rank must be a positive integer or 'full'");
  return static_cast<int64_t>(r);
}

}  // namespace

std::string policy_spec_help() {
  return "  default[:MOD...]                    the default policy: " + WindowPolicy{}.name() +
         "\n"
         "                                      (each modifier given replaces the default's of that name,\n"
         "                                      or is added: default:through=0, default:kl=0.01)\n"
         "  patch[:M][:exact][:deep][:stale=D][:kl=X]\n"
         "                                      form a rank-M patch on a miss (M an integer or 'full'; default 16)\n"
         "                                      :exact re-conditions survivors and ignores orbit patches;\n"
         "                                      :deep patches only deep layers; :noreuse turns exact reuse off;\n"
         "                                      :cost[=R] lets the calibrated cost model choose per chunk between\n"
         "                                      a stored patch, forming one and recompute, over this use and R\n"
         "                                      more (default 1; Engine::calibrate; not with :kl=X);\n"
         "                                      :stale=D accepts a patch formed\n"
         "                                      under another context when its divergence is <= D; :kl=X keeps\n"
         "                                      the predicted next-token KL per step <= X, choosing per instance\n"
         "                                      the cheapest of keep / stored patch / first-k / CacheBlend / form;\n"
         "                                      :heal[=X] heals the window in idle time when its predicted KL\n"
         "                                      is >= X (Window::heal; default X = budget/10); :prep=N\n"
         "                                      prepares the recalls of the N chunks evicted last (Window::idle);\n"
         "                                      :move=N prepares, in a window that has reordered, moving N of its\n"
         "                                      chunks behind the others (synced to lists: once a message came\n"
         "                                      again at the end, the N newest of its kind moved to the end of\n"
         "                                      the list and of each learned trim) (Window::idle); :lists=N\n"
         "                                      prepares the N lists the next sync most likely starts with,\n"
         "                                      learned from the messages earlier syncs dropped (Window::idle;\n"
         "                                      not with :noreuse: exact reuse reads what it prepares);\n"
         "                                      :hinted=N (with :lists or :move; default 2, 0 = off): once N\n"
         "                                      syncs in a row found the agent's own prepare_sync list reaching\n"
         "                                      as far as every learned list, idle time skips the learned lists\n"
         "                                      and moves until a sync finds otherwise;\n"
         "                                      :through=F (0..1, default 0.3): a fresh instance computed\n"
         "                                      behind kept, approximate ones passes F of its weight on to them\n"
         "                                      (their predicted loss counts it: in the predicted KL a budget\n"
         "                                      chooses repairs by, and an idle-time heal compares);\n"
         "                                      :attend=F (>= 0, default 1): a kept instance weighs (in the\n"
         "                                      predicted KL, as :through) at least F times the share of the\n"
         "                                      last query's attention it received;\n"
         "                                      :match=F (>= 0, default 0, off): a kept instance weighs (as\n"
         "                                      :attend) at least F times its share of the content matches\n"
         "                                      (token bigrams) of the window's last 32 tokens;\n"
         "                                      :look=F (>= 0, default 0, off): under a budget, a generate's\n"
         "                                      query forward re-plans the window, a kept instance weighing at\n"
         "                                      least F times that query's attention share on it; when the plan\n"
         "                                      repairs, the query is forwarded again (both counted);\n"
         "                                      :lookonly (with :look=F): that plan re-serves only the kept\n"
         "                                      instances the look weighs above their own weight;\n"
         "                                      :check makes idle-time heals measure the loss the window carried\n"
         "                                      and scale the fidelity model by the largest recent miss (off in\n"
         "                                      default; needs :heal)\n"
         "  throughput[:kl=X]                   the default's budget without background work (servers): a miss\n"
         "                                      is prefilled (no patch formed), no idle-time work; takes\n"
         "                                      :through=F, :attend=F, :match=F, :look=F and :lookonly\n"
         "  reprefill                           prefill every instance whose context changed; reuse nothing\n"
         "  prefix                              radix cache: reuse KV (chunks, turns, answers) only behind the\n"
         "                                      identical sequence\n"
         "  blind                               relocate canonicals, never repair\n"
         "  cacheblend:R                        on a miss recompute the top R (0..1) of tokens by KV deviation\n"
         "  firstk:K                            on a miss recompute the first K tokens in context\n"
         "  <any of the above>:eager            every edit repairs at once (by default the next read does)\n";
}

namespace {

// parse_policy in parts: the `:eager` suffix (parse_policy), the patch preset's modifiers
// (parse_patch_modifier, with the idle-time ones in parse_idle_modifier) and the baselines (baseline_preset).

// A non-negative integer modifier value (prep=N, move=N); `rule` says what it must be.
int64_t parse_count(const std::string& spec, const std::string& text, const char* what, const std::string& rule) {
  const double n = parse_number(spec, text, what);
  if (n < 0 || n != static_cast<double>(static_cast<int64_t>(n))) bad_spec(spec, rule);
  return static_cast<int64_t>(n);
}

// heal, heal=X, prep=N, move=N, lists=N, hinted=N: what idle time does. False when `part` is none of them.
bool parse_idle_modifier(const std::string& spec, const std::string& part, WindowPolicy& p) {
  if (part == "heal") {
    p.heal_when_idle = true;
  } else if (part.rfind("heal=", 0) == 0) {
    p.heal_when_idle = true;
    p.heal_min_kl = parse_number(spec, part.substr(5), "heal threshold");
    if (!(p.heal_min_kl >= 0 && std::isfinite(p.heal_min_kl)))
      bad_spec(spec, "heal threshold (the predicted KL that makes idle time heal) must be a number >= 0");
  } else if (part.rfind("prep=", 0) == 0) {
    p.prepare_recalls = parse_count(spec, part.substr(5), "prep",
                                    "prep (recalls prepared in idle time) must be a non-negative integer");
  } else if (part == "check") {
    p.self_check = true;
  } else if (part.rfind("lists=", 0) == 0) {
    p.prepare_lists = parse_count(spec, part.substr(6), "lists",
                                  "lists (next lists prepared in idle time) must be a non-negative integer");
  } else if (part.rfind("move=", 0) == 0) {
    p.prepare_moves =
        parse_count(spec, part.substr(5), "move",
                    "move (moves to the last chunk prepared in idle time) must be a non-negative integer");
  } else if (part.rfind("hinted=", 0) == 0) {
    // hinted=N (WindowPolicy::trust_hints): after N syncs in a row that found the agent's own prepared list
    // reaching as far as every learned one, idle time skips the learned lists and moves; 0 never skips.
    p.trust_hints = parse_count(spec, part.substr(7), "hinted",
                                "hinted (syncs in a row whose hint reached as far as the learned lists, before "
                                "idle time skips them; 0 = never) must be a non-negative integer");
  } else {
    return false;
  }
  return true;
}

// How the fidelity model weighs kept instances (`patch` and `throughput`): :through=F, :attend=F, :match=F,
// :look=F and :lookonly. False when `part` is none of them.
bool parse_weight_modifier(const std::string& spec, const std::string& part, WindowPolicy& p) {
  if (part.rfind("through=", 0) == 0) {
    p.read_through = parse_number(spec, part.substr(8), "through");
    if (!(p.read_through >= 0 && p.read_through <= 1)) {
      bad_spec(spec,
               "through (the share of a fresh instance's weight read through what precedes it) must be in [0, 1]");
    }
    return true;
  }
  if (part.rfind("attend=", 0) == 0) {
    p.attention_weight = parse_number(spec, part.substr(7), "attend");
    if (!(p.attention_weight >= 0 && p.attention_weight <= 1e6)) {
      bad_spec(spec, "attend (the weight of the last query's attention on a kept instance) must be in [0, 1e6]");
    }
    return true;
  }
  if (part.rfind("match=", 0) == 0) {
    p.content_weight = parse_number(spec, part.substr(6), "match");
    if (!(p.content_weight >= 0 && p.content_weight <= 1e6)) {
      bad_spec(spec, "match (the weight of the window tail's content matches on a kept instance) must be in [0, 1e6]");
    }
    return true;
  }
  if (part.rfind("look=", 0) == 0) {
    p.read_attention_weight = parse_number(spec, part.substr(5), "look");
    if (!(p.read_attention_weight >= 0 && p.read_attention_weight <= 1e6)) {
      bad_spec(spec, "look (the weight of the read's own attention on a kept instance) must be in [0, 1e6]");
    }
    return true;
  }
  if (part == "lookonly") {
    p.read_attention_raised_only = true;
    return true;
  }
  return false;
}

// The weight modifiers that differ from the defaults, as parse_weight_modifier reads them.
std::string weight_modifiers(const WindowPolicy& p) {
  std::ostringstream s;
  if (p.read_through != WindowPolicy{}.read_through) s << ":through=" << p.read_through;
  if (p.attention_weight != WindowPolicy{}.attention_weight) s << ":attend=" << p.attention_weight;
  if (p.content_weight != WindowPolicy{}.content_weight) s << ":match=" << p.content_weight;
  if (p.read_attention_weight != WindowPolicy{}.read_attention_weight) s << ":look=" << p.read_attention_weight;
  if (p.read_attention_raised_only) s << ":lookonly";
  return s.str();
}

// One modifier of `patch`, the i-th part of the spec (i >= 1; only the first may be the rank).
void parse_patch_modifier(const std::string& spec, const std::string& part, std::size_t i, WindowPolicy& p) {
  if (parse_idle_modifier(spec, part, p)) return;
  if (part == "exact") {
    p.survivors = SurvivorAction::kRecondition;
    p.use_orbit_patches = false;
  } else if (part == "deep") {
    p.deep_only = true;
  } else if (part == "noreuse") {
    p.reuse_computed = false;
  } else if (part == "cost" || part.rfind("cost=", 0) == 0) {
    p.cost_aware = true;
    if (part != "cost") {
      p.expected_reuse = parse_number(spec, part.substr(5), "expected reuse");
      if (!(p.expected_reuse >= 0 && p.expected_reuse <= 1e9))
        bad_spec(spec, "cost=R: R (the uses expected after this one) must be in [0, 1e9]");
    }
  } else if (parse_weight_modifier(spec, part, p)) {
  } else if (part.rfind("kl=", 0) == 0) {
    p.kl_budget = parse_number(spec, part.substr(3), "kl budget");
    if (!(p.kl_budget > 0 && std::isfinite(p.kl_budget))) bad_spec(spec, "kl budget must be a positive number");
  } else if (part.rfind("stale=", 0) == 0) {
    p.stale = StalePatch::kAccept;
    p.max_divergence = parse_number(spec, part.substr(6), "divergence");
    if (!(p.max_divergence >= 0 && p.max_divergence <= 1)) bad_spec(spec, "divergence must be in [0, 1]");
  } else if (i == 1) {
    // M, or K/V: the keys' rank, then the values' (as WindowPolicy::name writes unequal ranks).
    const std::size_t slash = part.find('/');
    p.rank_k = parse_rank(spec, part.substr(0, slash));
    p.rank_v = slash == std::string::npos ? p.rank_k : parse_rank(spec, part.substr(slash + 1));
  } else {
    bad_spec(spec, "unknown modifier '" + part + "'");
  }
}

// The baselines: reprefill, prefix, blind, cacheblend:R and firstk:K, over the preset defaults in `p`.
// False when `parts[0]` names none of them.
bool baseline_preset(const std::string& spec, const std::vector<std::string>& parts, WindowPolicy& p) {
  const std::string& head = parts[0];
  const bool bare = head == "reprefill" || head == "prefix" || head == "blind";
  if (bare && parts.size() != 1) bad_spec(spec, "'" + head + "' takes no arguments");
  if (head == "reprefill") {
    p.on_miss = MissAction::kReprefill;
    p.survivors = SurvivorAction::kRecondition;
    p.reuse_stored = false;
    p.use_orbit_patches = false;
    p.cascade_on_recall = true;
    p.reuse_computed = false;
  } else if (head == "prefix") {
    p.on_miss = MissAction::kReprefill;
    p.survivors = SurvivorAction::kRecondition;
    p.reuse_stored = false;
    p.use_orbit_patches = false;
    p.cascade_on_recall = true;
  } else if (head == "blind") {
    p.on_miss = MissAction::kBlind;
    p.reuse_computed = false;
    p.reuse_stored = false;
    p.use_orbit_patches = false;
    p.cascade_on_recall = false;
  } else if (head == "cacheblend") {
    if (parts.size() != 2) bad_spec(spec, "expected cacheblend:R with R in (0, 1]");
    p.on_miss = MissAction::kTokenRecompute;
    p.recompute_ratio = parse_number(spec, parts[1], "ratio");
    p.reuse_computed = false;
    if (!(p.recompute_ratio > 0 && p.recompute_ratio <= 1)) bad_spec(spec, "ratio must be in (0, 1]");
    p.reuse_stored = false;
    p.use_orbit_patches = false;
  } else if (head == "firstk") {
    if (parts.size() != 2) bad_spec(spec, "expected firstk:K with K >= 1");
    const double k = parse_number(spec, parts[1], "K");
    if (k < 1 || k != static_cast<double>(static_cast<int64_t>(k))) bad_spec(spec, "K must be a positive integer");
    p.on_miss = MissAction::kFirstK;
    p.first_k = static_cast<int64_t>(k);
    p.reuse_computed = false;
    p.reuse_stored = false;
    p.use_orbit_patches = false;
  } else {
    return false;
  }
  return true;
}

// throughput[:kl=X]: the default's budget with no background work of its own (servers, where background
// compute is not free): a miss is a plain prefill (no canonical encode, no patch formed; stored patches
// and canonicals are still used), exact reuse on, no idle-time heal or preparation.
WindowPolicy throughput_preset(const std::string& spec, const std::vector<std::string>& parts) {
  WindowPolicy p;
  p.on_miss = MissAction::kReprefill;
  p.heal_when_idle = false;
  p.prepare_recalls = 0;
  p.prepare_moves = 0;
  p.prepare_lists = 0;
  for (std::size_t i = 1; i < parts.size(); ++i) {
    if (parse_weight_modifier(spec, parts[i], p)) continue;
    if (parts[i].rfind("kl=", 0) != 0)
      bad_spec(spec, "'throughput' takes only :kl=X, :through=F, :attend=F, :match=F, :look=F and :lookonly");
    p.kl_budget = parse_number(spec, parts[i].substr(3), "kl budget");
    if (!(p.kl_budget > 0 && std::isfinite(p.kl_budget))) bad_spec(spec, "kl budget must be a positive number");
  }
  return p;
}

WindowPolicy parse_spec(const std::string& spec);

// The name of a modifier: "heal=X" and "heal" are one.
std::string modifier_name(const std::string& part) { return part.substr(0, part.find('=')); }

// default:MOD...: the default's spec (a patch preset) with each modifier given in place of the default's of the
// same name, or after them. Refusals name both the spec given and what it stands for.
WindowPolicy default_with(const std::string& spec, const std::vector<std::string>& parts) {
  std::vector<std::string> expanded = split(WindowPolicy{}.name(), ':');
  std::set<std::string> seen;  // each modifier replaces the default's once: a second one is refused, not kept
  for (std::size_t i = 1; i < parts.size(); ++i) {
    const std::string name = modifier_name(parts[i]);
    if (!seen.insert(name).second) bad_spec(spec, "modifier '" + name + "' is given twice");
    const auto same = std::find_if(expanded.begin() + 2, expanded.end(),
                                   [&](const std::string& d) { return modifier_name(d) == name; });
    if (same != expanded.end()) {
      *same = parts[i];
    } else {
      expanded.push_back(parts[i]);
    }
  }
  std::string joined;
  for (const std::string& part : expanded) joined += (joined.empty() ? "" : ":") + part;
  try {
    return parse_spec(joined);
  } catch (const Error& e) {
    ORBIT_FAIL("policy '" << spec << "' stands for '" << joined << "': " << e.what());
  }
}

// parse_policy before validate_policy.
WindowPolicy parse_spec(const std::string& spec) {
  // `:eager` may end any preset.
  const std::string eager = ":eager";
  if (spec.size() > eager.size() && spec.compare(spec.size() - eager.size(), eager.size(), eager) == 0) {
    const std::string rest = spec.substr(0, spec.size() - eager.size());
    if (rest == "eager" ||
        (rest.size() > eager.size() && rest.compare(rest.size() - eager.size(), eager.size(), eager) == 0)) {
      bad_spec(spec, "':eager' is given twice");
    }
    WindowPolicy p = parse_spec(rest);
    p.defer_repairs = false;
    return p;
  }
  const std::vector<std::string> parts = split(spec, ':');
  const std::string& head = parts[0];
  if (head == "default") return parts.size() == 1 ? WindowPolicy{} : default_with(spec, parts);
  if (head == "throughput") return throughput_preset(spec, parts);
  WindowPolicy p;
  p.kl_budget = 0;           // presets carry no budget unless they say :kl=X
  p.heal_when_idle = false;  // nor heal unless they say :heal
  p.prepare_recalls = 0;     // nor prepare recalls unless they say :prep=N
  p.prepare_moves = 0;       // nor moves unless they say :move=N
  p.prepare_lists = 0;       // nor lists unless they say :lists=N
  if (head == "patch") {
    std::set<std::string> seen;  // modifier names ("heal" and "heal=X" are one): each may be given once
    for (std::size_t i = 1; i < parts.size(); ++i) {
      const std::string& part = parts[i];
      const std::string name = part.substr(0, part.find('='));
      if (!seen.insert(name).second) bad_spec(spec, "modifier '" + name + "' is given twice");
      parse_patch_modifier(spec, part, i, p);
    }
    // Modifiers given but never read, named as given (validate_policy would name the fields).
    if (p.self_check && !p.heal_when_idle)
      bad_spec(spec, "':check' has no effect without ':heal' (the check rides on the idle-time heal)");
    if (p.prepare_lists > 0 && !p.reuse_computed)
      bad_spec(spec, "':lists=N' has no effect with ':noreuse' (a prepared list is read by exact reuse)");
    if (seen.count("hinted") > 0 && p.prepare_lists == 0 && p.prepare_moves == 0)
      bad_spec(spec, "':hinted=N' has no effect without ':lists=N' or ':move=N' (it skips their preparation)");
    return p;
  }
  if (baseline_preset(spec, parts, p)) return p;
  bad_spec(spec, "unknown policy '" + head + "'");
}

// The spec's modifier that sets the WindowPolicy field a validate_policy refusal names ("" when none does), so
// a spec's refusal says which of its parts is at fault, not only the field.
std::string modifier_named_in(const std::string& refusal) {
  static const std::pair<const char*, const char*> kModifiers[] = {{"read_attention_raised_only", ":lookonly"},
                                                                   {"read_attention_weight", ":look=F"},
                                                                   {"read_through", ":through=F"},
                                                                   {"attention_weight", ":attend=F"},
                                                                   {"content_weight", ":match=F"},
                                                                   {"kl_budget", ":kl=X"},
                                                                   {"heal_min_kl", ":heal=X"},
                                                                   {"prepare_recalls", ":prep=N"},
                                                                   {"prepare_moves", ":move=N"},
                                                                   {"prepare_lists", ":lists=N"},
                                                                   {"trust_hints", ":hinted=N"},
                                                                   {"max_divergence", ":stale=D"},
                                                                   {"self_check", ":check"},
                                                                   {"deep_energy", ":deep"}};
  for (const auto& [field, modifier] : kModifiers) {
    if (refusal.find(std::string("WindowPolicy: ") + field + " ") != std::string::npos) return modifier;
  }
  return "";
}

}  // namespace

WindowPolicy parse_policy(const std::string& spec) {
  // The numbers' parsers skip leading white space: "patch: 16" ran as patch:16.
  const std::size_t space = spec.find_first_of(" \t\n\r\f\v");
  if (space != std::string::npos) bad_spec(spec, "white space at byte " + std::to_string(space));
  const WindowPolicy p = parse_spec(spec);
  try {
    validate_policy(p);
  } catch (const Error& e) {
    const std::string modifier = modifier_named_in(e.what());
    bad_spec(spec, modifier.empty() ? std::string(e.what()) : "'" + modifier + "': " + e.what());
  }
  return p;
}

std::string WindowPolicy::name() const {
  if (!defer_repairs) {
    WindowPolicy deferring = *this;
    deferring.defer_repairs = true;
    return deferring.name() + ":eager";
  }
  std::ostringstream s;
  switch (on_miss) {
    case MissAction::kForm:
      s << "patch:" << (rank_k == rank_v ? rank_text(rank_k) : rank_text(rank_k) + "/" + rank_text(rank_v));
      if (survivors == SurvivorAction::kRecondition && !use_orbit_patches) s << ":exact";
      if (deep_only) s << ":deep";
      if (!reuse_computed) s << ":noreuse";
      if (stale == StalePatch::kAccept) s << ":stale=" << max_divergence;
      if (cost_aware) {
        s << ":cost";
        if (expected_reuse != WindowPolicy{}.expected_reuse) s << "=" << expected_reuse;
      }
      if (kl_budget > 0) s << ":kl=" << kl_budget;
      if (heal_when_idle) {
        s << ":heal";
        if (heal_min_kl != WindowPolicy{}.heal_min_kl) s << "=" << heal_min_kl;
      }
      if (prepare_recalls > 0) s << ":prep=" << prepare_recalls;
      if (prepare_moves > 0) s << ":move=" << prepare_moves;
      // Lists are prepared for exact reuse to read: without it (`:noreuse`) the count has no effect, and a
      // spec that gave both would be refused.
      if (prepare_lists > 0 && reuse_computed) s << ":lists=" << prepare_lists;
      // Printed where it differs from the default and applies (what it skips is prepared).
      if (trust_hints != WindowPolicy{}.trust_hints && (prepare_moves > 0 || (prepare_lists > 0 && reuse_computed)))
        s << ":hinted=" << trust_hints;
      s << weight_modifiers(*this);
      if (self_check) s << ":check";
      return s.str();
    case MissAction::kReprefill:
      if (kl_budget > 0) {
        s << "throughput";
        if (kl_budget != WindowPolicy{}.kl_budget) s << ":kl=" << kl_budget;
        s << weight_modifiers(*this);
        return s.str();
      }
      return reuse_computed || store_conditioned ? "prefix" : "reprefill";
    case MissAction::kBlind: return "blind";
    case MissAction::kTokenRecompute: s << "cacheblend:" << recompute_ratio; return s.str();
    case MissAction::kFirstK: return "firstk:" + std::to_string(first_k);
  }
  return "?";
}

}  // namespace orbit
