// train_binding's output directory (--out), written all or nothing.
//
// The run's files go to a staging directory beside --out (<out>.incomplete-<pid>), where they are written,
// checked and synced; commit() then puts them in place in one step: a new --out is the staging directory renamed,
// an existing one is exchanged with it (renameat2 RENAME_EXCHANGE; two renames where the file system lacks it)
// and its old contents removed. Until commit() --out is as it was; a killed run leaves at most the staging
// directory, whose name says it is incomplete (the next run into the same --out removes it).
//
// An existing --out must be empty or an earlier train_binding output: nothing but the files in kOutputFiles,
// train_log.json among them. Anything else (a model another tool wrote, a directory with notes in it) is
// refused before training: replacing it would lose files the run did not make.
#pragma once

#include <string>

namespace orbit::binding {

// What train_binding writes into --out, and all that an earlier output it replaces may hold.
inline constexpr const char* kOutputFiles[] = {"config.json", "model.safetensors", "train_log.json", "README.md"};

class OutputDir {
 public:
  // Checks `out` (the --out argument) before any training; throws orbit::Error naming --out when it is empty or
  // reads as an option, is or lies under something that is not a directory, is a symbolic link, is an existing
  // directory that is neither empty nor an earlier output, or cannot be written (a staging directory is made
  // and removed beside it to find out).
  explicit OutputDir(const std::string& out);

  const std::string& path() const { return out_; }
  // Makes the staging directory and returns its path (the directory to write the run's files into).
  const std::string& stage();
  // Syncs the staged files and moves them into place (see above). Rechecks --out first: one changed during the
  // run into something check() refuses is left alone, and the staged files with it.
  void commit();
  // The staging directory while it holds files that are not in place ("" before stage() and after commit()).
  const std::string& staged() const { return staging_; }

 private:
  void check_existing() const;

  std::string out_;      // normalised, without a trailing separator
  std::string staging_;  // "" when none
};

}  // namespace orbit::binding
