// `caravela coordinator`, `submit`, `jobs`, `job`, `cancel` (SPEC §8
// "Services"): the coordinator process and the CLI against its JobService.
#pragma once

#include "CLI/CLI.hpp"

namespace caravela {

// Adds the subcommands to `app`; after parsing, RunServiceCommands() runs the
// one given. Exit codes: 0 ok; 1 the call failed (coordinator unreachable,
// unknown job, ...); 2 usage errors and an invalid job (every error printed
// with its YAML path); 3 unauthenticated.
void AddServiceCommands(CLI::App& app);
// -1 when none of them was given.
int RunServiceCommands();

}  // namespace caravela
