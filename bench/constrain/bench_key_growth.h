// bench_constrain --key-growth: what a decode step costs as an object's written keys pile up (the key log's
// per-object state, sdk/src/constrain/key_log.h). One object of --keys members whose keys are 40 random
// letters, decoded token by token (the longest vocabulary token of the text that the mask allows); each step
// is TokenConstraint::allowed (no budget, or a budget far past the answer: the key log's slack is computed but
// never binds) and accept. Cases: a map whose keys are ^[a-z]{40}$ (propertyNames), a map of plain string
// keys, and an object that declares all its keys (the flat baseline).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "orbit/constraint.h"

namespace orbit::bench {

// Prints, per case and budget, the mean milliseconds per step over the steps of the members at keys 0, 50,
// 100 and the last (the fastest of `reps` runs for each), and the last over the first.
void bench_key_growth(const std::string& setting, const std::shared_ptr<const TokenVocabulary>& vocabulary,
                      int64_t keys, int64_t reps);

}  // namespace orbit::bench
