#pragma once

#include <map>
#include <string>
#include <vector>

namespace nbits::startup {

struct ChildRun {
    int exit_code = -1;  // -1: did not start or did not exit normally
    std::string output;  // stdout and stderr together
};

// Runs this executable again (/proc/self/exe) with `arguments`, plus
// `--spawned-at-ns <CLOCK_MONOTONIC>` read immediately before the spawn, in
// this process's environment changed by `environment` (an empty value
// removes the variable), and waits for it.
ChildRun spawn_self(const std::vector<std::string>& arguments, const std::map<std::string, std::string>& environment);

}  // namespace nbits::startup
