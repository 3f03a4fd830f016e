// When `orbit serve`'s idle worker hands the heap's free pages back to the system (malloc_trim, glibc).
// malloc_trim(0) returns every free page of every arena, the ones a burst of requests has just freed and the
// next burst will take again among them: a decode run that starts after a trim faults its working memory back
// in (330-930 minor faults a run of 16 stories260K sessions 1 s apart, against 10-290 without the trim:
// bench/serve/trim_faults.py). So the trim waits for the server to go quiet
// (kQuiet with no request and no idle work: a pause, not the gap between two runs) and, on a server that is
// never quiet that long, comes at most every kLongest: what the holes of evicted tensors keep resident is
// returned either way, and a busy server pays the faults once per kLongest, not once a second.
// malloc_trim's pad does not help (it keeps only the top of the main arena; the decode thread's arena is
// trimmed whole), nor does mallinfo2's fordblks as a threshold (it counts trimmed pages as free all the same).
//
// Thread-safety: none; the idle worker's thread only.
#pragma once

#include <chrono>

namespace orbit::serve {

class HeapTrimSchedule {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr auto kQuiet = std::chrono::seconds(5);
  static constexpr auto kLongest = std::chrono::seconds(30);

  explicit HeapTrimSchedule(Clock::time_point start) : trimmed_(start) {}

  // Whether to trim now, given the last request or idle work; true records the trim. Only asked when there
  // was such work since the last trim.
  bool due(Clock::time_point now, Clock::time_point last_active) {
    if (now - last_active < kQuiet && now - trimmed_ < kLongest) return false;
    trimmed_ = now;
    return true;
  }

 private:
  Clock::time_point trimmed_;  // the last trim (or the start)
};

}  // namespace orbit::serve
