// The subcommands of `caravela` that live in files of their own
// (cli/README.md names them). Each Add<Name>Command adds its subcommand to
// `app` with flags the command owns, and returns it with its action; main
// runs the action of the one that was parsed.
#pragma once

#include <functional>

#include "CLI/CLI.hpp"

namespace caravela {

// A subcommand and what it does. `run` owns the command's flags, which CLI11
// fills while parsing `app`: call it after the parse, when `*cli` is true
// (that subcommand was given); it returns the process's exit code.
struct Command {
  CLI::App* cli = nullptr;
  std::function<int()> run;
};

// The cluster (SPEC §8 "Services"). Exit codes: 0 ok; 1 the call failed
// (coordinator unreachable, unknown job, ...); 2 usage errors and an invalid
// job (every error printed with its YAML path); 3 unauthenticated.
// The processes.
Command AddCoordinatorCommand(CLI::App& app);  // coordinator_command.cc
Command AddWorkerCommand(CLI::App& app);       // worker_command.cc
Command AddLocalCommand(CLI::App& app);        // local_command.cc
// The clients.
Command AddHealthCommand(CLI::App& app);     // health_command.cc
Command AddWorkersCommand(CLI::App& app);    // workers_command.cc
Command AddSubmitCommand(CLI::App& app);     // submit_command.cc
Command AddJobsCommand(CLI::App& app);       // jobs_command.cc
Command AddJobCommand(CLI::App& app);        // job_command.cc
Command AddCancelCommand(CLI::App& app);     // cancel_command.cc
Command AddRescaleCommand(CLI::App& app);    // rescale_command.cc
Command AddRestartCommand(CLI::App& app);    // restart_command.cc
Command AddSavepointCommand(CLI::App& app);  // savepoint_command.cc

// Tools. `nexmark gen` and `nexmark check`.
Command AddNexmarkCommand(CLI::App& app);    // nexmark_command.cc
Command AddReconcileCommand(CLI::App& app);  // reconcile_command.cc

}  // namespace caravela
