// step_fidelity (orbit/trace.h): how replay scores a window's logits against a re-prefill's, row by row.
#include <algorithm>
#include <cmath>
#include <limits>

#include "orbit/common/error.h"
#include "orbit/trace.h"

namespace orbit {

StepFidelity step_fidelity(const Logits& ref, const Logits& got) {
  ORBIT_CHECK(ref.rows == got.rows && ref.vocab == got.vocab && ref.vocab > 0,
              "step_fidelity: reference logits [" << ref.rows << ", " << ref.vocab << "] and window logits ["
                                                  << got.rows << ", " << got.vocab << "] differ in shape");
  StepFidelity f;
  f.rows = ref.rows;
  double kl_sum = 0;
  int64_t agree = 0;
  for (int64_t r = 0; r < ref.rows; ++r) {
    const float* p = ref.row(r);
    const float* q = got.row(r);
    double mp = p[0], mq = q[0];
    for (int64_t j = 1; j < ref.vocab; ++j) {
      mp = std::max(mp, static_cast<double>(p[j]));
      mq = std::max(mq, static_cast<double>(q[j]));
    }
    double zp = 0, zq = 0;
    for (int64_t j = 0; j < ref.vocab; ++j) {
      zp += std::exp(p[j] - mp);
      zq += std::exp(q[j] - mq);
    }
    const double lzp = mp + std::log(zp), lzq = mq + std::log(zq);
    double kl = 0;
    for (int64_t j = 0; j < ref.vocab; ++j) {
      const double lp = p[j] - lzp, lq = q[j] - lzq;
      kl += std::exp(lp) * (lp - lq);
    }
    kl_sum += std::max(kl, 0.0);
    const double picked = p[got.argmax(r)];             // the reference's logit for the window's pick
    const bool agrees = picked >= mp - kTop1TieLogits;  // the argmax, or a tie
    agree += agrees ? 1 : 0;
    // The reference's runner-up: the largest logit other than (the first) argmax.
    const int64_t top = ref.argmax(r);
    double second = -std::numeric_limits<double>::infinity();
    for (int64_t j = 0; j < ref.vocab; ++j) {
      if (j != top) second = std::max(second, static_cast<double>(p[j]));
    }
    const bool near_tie = mp - second < kNearTieLogits;
    if (near_tie) {
      ++f.near_tie_rows;
      f.near_tie_misses += agrees ? 0 : 1;
    }
    if (!agrees) f.misses.push_back({r, mp - picked, std::max(kl, 0.0), near_tie});
  }
  f.kl = ref.rows > 0 ? kl_sum / static_cast<double>(ref.rows) : 0;
  f.top1 = ref.rows > 0 ? static_cast<double>(agree) / static_cast<double>(ref.rows) : 1;
  f.top1_misses = ref.rows - agree;
  return f;
}

}  // namespace orbit
