// The threads reading a Window.stream whose decode runs on a window (orbit/_stream.py). The decode runs on the
// stream's worker thread and holds the window's lock until it ends, while the reader's thread runs the loop's
// body: a call there on the same window would wait for a decode that waits for the loop (a stall as long as
// the whole answer), so PyWindow::run() refuses it at once instead (py_window.h). Shared by the window and the
// _StreamRoom that registers the reader (wake.cpp), so neither outlives what it reads. Thread-safe; takes no
// GIL.
#pragma once

#include <algorithm>
#include <mutex>
#include <thread>
#include <vector>

namespace orbit_py {

class StreamReaders {
 public:
  // Records `reader` as reading a stream on the window (once per stream: the same thread may read nested
  // streams of several windows, each registered with its own window).
  void add(std::thread::id reader) {
    const std::lock_guard<std::mutex> lock(mu_);
    readers_.push_back(reader);
  }
  // Forgets one record of `reader` (none: nothing happens).
  void remove(std::thread::id reader) {
    const std::lock_guard<std::mutex> lock(mu_);
    const auto it = std::find(readers_.begin(), readers_.end(), reader);
    if (it != readers_.end()) readers_.erase(it);
  }
  // Whether `reader` reads a stream on the window whose decode has not ended.
  bool reads(std::thread::id reader) const {
    const std::lock_guard<std::mutex> lock(mu_);
    return std::find(readers_.begin(), readers_.end(), reader) != readers_.end();
  }

 private:
  mutable std::mutex mu_;
  std::vector<std::thread::id> readers_;  // one entry per stream being read; a few at most
};

}  // namespace orbit_py
