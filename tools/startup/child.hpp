#pragma once

#include "options.hpp"

#include <map>
#include <optional>
#include <string>

namespace nbits::startup {

// Run in the child: creates a runtime on `device`, gets every decode-step
// function, times `hits` lookups, and prints one line of name=value timings
// (nanoseconds) for the parent.
int run_child(const ChildOptions& options, int device);

// The parent's reading of that line; nothing when the output has none.
using ChildTimings = std::map<std::string, double>;
std::optional<ChildTimings> parse_child_output(const std::string& output);

}  // namespace nbits::startup
