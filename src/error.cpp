#include "nbits/error.hpp"

namespace nbits {

const char* to_string(ErrorKind kind)
{
    switch (kind) {
    case ErrorKind::NoDriver: return "no-driver";
    case ErrorKind::NoDevice: return "no-device";
    case ErrorKind::UnsupportedDevice: return "unsupported-device";
    case ErrorKind::Driver: return "driver";
    case ErrorKind::Compile: return "compile";
    case ErrorKind::InvalidArgument: return "invalid-argument";
    case ErrorKind::Unsupported: return "unsupported";
    case ErrorKind::Blas: return "blas";
    case ErrorKind::Io: return "io";
    case ErrorKind::OutOfMemory: return "out-of-memory";
    case ErrorKind::Internal: return "internal";
    }
    return "unknown";
}

}  // namespace nbits
