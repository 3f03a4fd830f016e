// When `orbit serve`'s idle worker trims the heap (cli/serve/compute/heap_trim.h): not between two bursts of
// requests a second or two apart (the trim would make the next one fault its working memory back in), but
// once the server has been quiet a while, and at intervals on one that never is.
#include "orbit_catch.h"

#include "serve/compute/heap_trim.h"

namespace ORBIT_TEST_FILE {  // this file's own names, apart from the files compiled with it (orbit_tests.cmake)

using orbit::serve::HeapTrimSchedule;
using std::chrono::milliseconds;
using std::chrono::seconds;

TEST_CASE("the heap is not trimmed between bursts of requests a second apart") {
  const auto start = HeapTrimSchedule::Clock::now();
  HeapTrimSchedule schedule(start);
  // A burst ends every 2 s and the worker looks every 50 ms between them: 20 s of it.
  for (auto t = milliseconds(0); t < seconds(20); t += milliseconds(50)) {
    const auto last_burst = start + (t / seconds(2)) * seconds(2);
    CHECK_FALSE(schedule.due(start + t, last_burst));
  }
}

TEST_CASE("the heap is trimmed once the server has been quiet for kQuiet") {
  const auto start = HeapTrimSchedule::Clock::now();
  HeapTrimSchedule schedule(start);
  const auto last = start + seconds(3);
  CHECK_FALSE(schedule.due(last + HeapTrimSchedule::kQuiet - milliseconds(50), last));
  CHECK(schedule.due(last + HeapTrimSchedule::kQuiet, last));
}

TEST_CASE("a server never quiet for kQuiet is trimmed every kLongest") {
  const auto start = HeapTrimSchedule::Clock::now();
  HeapTrimSchedule schedule(start);
  int trims = 0;
  // A request ends every 100 ms for 95 s.
  for (auto t = milliseconds(0); t < seconds(95); t += milliseconds(50)) {
    const auto now = start + t;
    if (schedule.due(now, now - milliseconds(t.count() % 100))) {
      ++trims;
      CHECK(t % HeapTrimSchedule::kLongest == milliseconds(0));
    }
  }
  CHECK(trims == 3);
}

}  // namespace ORBIT_TEST_FILE
