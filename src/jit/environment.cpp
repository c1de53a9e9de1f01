#include "jit/environment.hpp"

#include <cstdlib>

namespace nbits::jit {

EnvLookup process_environment()
{
    return [](const char* name) -> std::optional<std::string> {
        const char* value = std::getenv(name);
        return value ? std::optional<std::string>(value) : std::nullopt;
    };
}

}  // namespace nbits::jit
