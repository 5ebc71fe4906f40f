// `caravela nexmark gen`: the Nexmark events of the benchmark (issue 12;
// bench/nexmark_generator.h) into JSON Lines files and, with --kafka, into
// topics nexmark-person, nexmark-auction and nexmark-bid.
#pragma once

#include "CLI/CLI.hpp"

namespace caravela {

// Adds `nexmark` (with its `gen` subcommand) to `app`.
void AddNexmarkCommands(CLI::App& app);
// Runs it if it was parsed: the exit code (0 ok, 1 failure, 2 usage), or -1
// when no nexmark command was given.
int RunNexmarkCommands();

}  // namespace caravela
