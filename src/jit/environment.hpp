#pragma once

#include <functional>
#include <optional>
#include <string>

namespace nbits::jit {

// Reads an environment variable; injected so that what depends on the
// environment stays testable.
using EnvLookup = std::function<std::optional<std::string>(const char* name)>;

// The variables of this process (getenv).
EnvLookup process_environment();

}  // namespace nbits::jit
