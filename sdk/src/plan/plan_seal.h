// The seal of a Plan: a digest of every field apply() reads (all but `policy`, kept for the record, and the seal
// itself). The planner sets Plan::seal as it returns a plan; apply() refuses a plan whose fields no longer give
// it (a plan edited after planning could empty a window or admit one chunk twice and report success).
// Not a security boundary: it tells an edited plan from the one the planner made, as a checksum does.
#pragma once

#include <cstdint>

#include "orbit/plan.h"

namespace orbit::detail {

uint64_t plan_seal(const Plan& plan);

}  // namespace orbit::detail
