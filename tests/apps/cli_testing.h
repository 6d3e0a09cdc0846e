// Running the npuflow binary (NPUFLOW_BIN) from the command-line tests: through the shell and
// waiting (Npuflow), or as a child process started now and waited for later (Spawn / Wait), with a
// working directory and environment of the test's choosing, so several can run at once.
#pragma once

#include <array>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <fcntl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

namespace npuflow::cli_testing {

struct CommandRun {
  int exit_code;
  std::string output;  // stdout and stderr
};

// `command` through /bin/sh, stdout and stderr captured.
inline CommandRun Shell(const std::string& command) {
  const std::string cmd = command + " 2>&1";
  CommandRun run{-1, {}};
  FILE* pipe = popen(cmd.c_str(), "r");
  if (!pipe) return run;
  std::array<char, 4096> buf;
  while (size_t n = fread(buf.data(), 1, buf.size(), pipe)) run.output.append(buf.data(), n);
  int status = pclose(pipe);
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return run;
}

// `npuflow <args>`; `args` are shell words.
inline CommandRun Npuflow(const std::string& args) { return Shell(std::string(NPUFLOW_BIN) + " " + args); }

// A word the shell takes literally.
inline std::string ShellQuote(const std::string& word) {
  std::string out = "'";
  for (char c : word) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// How a child process runs: its working directory (empty: the test's) and its environment, the
// test's with `set` added or replaced and `unset` removed.
struct ProcessSetup {
  std::string cwd;
  std::map<std::string, std::string> set;
  std::vector<std::string> unset;
};

struct Child {
  pid_t pid = -1;
  std::string log;  // where its stdout and stderr go
};

// Starts `npuflow <args...>` (no shell) with stdout and stderr to `log`, and returns at once.
inline Child Spawn(const std::vector<std::string>& args, const std::string& log, const ProcessSetup& setup = {}) {
  // Everything the child needs is built before fork: after it, only async-signal-safe calls.
  std::vector<std::string> argv_s = {NPUFLOW_BIN};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_s;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry = *e;
    const std::string key = entry.substr(0, entry.find('='));
    bool drop = setup.set.count(key) > 0;
    for (const std::string& u : setup.unset) drop = drop || u == key;
    if (!drop) env_s.push_back(entry);
  }
  for (const auto& [k, v] : setup.set) env_s.push_back(k + "=" + v);
  std::vector<char*> envp;
  for (std::string& e : env_s) envp.push_back(e.data());
  envp.push_back(nullptr);

  Child child{-1, log};
  const pid_t pid = fork();
  if (pid == 0) {
    const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) _exit(126);
    dup2(fd, STDOUT_FILENO);
    dup2(fd, STDERR_FILENO);
    close(fd);
    if (!setup.cwd.empty() && chdir(setup.cwd.c_str()) != 0) _exit(126);
    execve(argv[0], argv.data(), envp.data());
    _exit(127);
  }
  child.pid = pid;
  return child;
}

// Waits for the child: its exit code (-1 if it did not exit normally) and what it printed.
inline CommandRun Wait(const Child& child) {
  CommandRun run{-1, {}};
  if (child.pid <= 0) return run;
  int status = 0;
  while (waitpid(child.pid, &status, 0) < 0) {
    if (errno != EINTR) return run;
  }
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  run.output = ReadFile(child.log);
  return run;
}

// Runs `npuflow <args...>` as Spawn does and waits for it.
inline CommandRun RunNpuflow(const std::vector<std::string>& args, const std::string& log,
                             const ProcessSetup& setup = {}) {
  return Wait(Spawn(args, log, setup));
}

}  // namespace npuflow::cli_testing
