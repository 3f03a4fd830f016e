// A child process for the cross-process tests: argv[0] = `program`, stdout on a pipe read line by line,
// stdin on a pipe the parent can close (children that "hold" until stdin closes), SIGKILL on destruction.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <string>
#include <vector>

extern char** environ;

namespace orbit::test {

class ChildProcess {
 public:
  ChildProcess(const std::string& program, const std::vector<std::string>& args) {
    int out[2], in[2];
    // Close-on-exec: children spawned later must not inherit this child's pipe ends (an inherited write
    // end of its stdin would keep close_stdin() from ever reaching it). dup2 onto 0 and 1 clears the flag.
    if (::pipe2(out, O_CLOEXEC) != 0) {
      spawn_error_ = errno;
      return;
    }
    if (::pipe2(in, O_CLOEXEC) != 0) {
      spawn_error_ = errno;
      ::close(out[0]);
      ::close(out[1]);
      return;
    }
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, out[1], 1);
    posix_spawn_file_actions_adddup2(&actions, in[0], 0);
    for (int fd : {out[0], out[1], in[0], in[1]}) posix_spawn_file_actions_addclose(&actions, fd);
    std::vector<std::string> all{program};
    all.insert(all.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (std::string& a : all) argv.push_back(a.data());
    argv.push_back(nullptr);
    const int rc = posix_spawn(&pid_, program.c_str(), &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    ::close(out[1]);
    ::close(in[0]);
    if (rc != 0) {
      pid_ = -1;
      spawn_error_ = rc;
    }
    out_ = ::fdopen(out[0], "r");
    in_fd_ = in[1];
  }
  ~ChildProcess() {
    close_stdin();
    if (out_) std::fclose(out_);
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  bool started() const { return pid_ > 0; }
  // The errno of a failed start (0 when the child started).
  int spawn_error() const { return spawn_error_; }
  // false at end of output.
  bool next_line(std::string* line) {
    char buffer[4096];
    if (!out_ || !std::fgets(buffer, sizeof buffer, out_)) return false;
    *line = buffer;
    if (!line->empty() && line->back() == '\n') line->pop_back();
    return true;
  }
  // Writes `line` and a newline to the child's stdin; false when it cannot (closed, the child gone).
  bool write_line(const std::string& line) {
    const std::string text = line + "\n";
    return in_fd_ >= 0 && ::write(in_fd_, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  }
  void close_stdin() {
    if (in_fd_ >= 0) ::close(in_fd_);
    in_fd_ = -1;
  }
  void kill() {
    if (pid_ > 0) ::kill(pid_, SIGKILL);
  }
  // The raw wait status.
  int wait() {
    int status = 0;
    if (pid_ > 0) ::waitpid(pid_, &status, 0);
    pid_ = -1;
    return status;
  }

 private:
  pid_t pid_ = -1;
  FILE* out_ = nullptr;
  int in_fd_ = -1;
  int spawn_error_ = 0;
};

}  // namespace orbit::test
