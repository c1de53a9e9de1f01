#pragma once

#include <stdexcept>
#include <string>

namespace nbits {

// What went wrong, for callers that react differently (a missing driver is
// "run on the CPU instead", a bad attribute is "fix the model").
enum class ErrorKind {
    NoDriver,         // libcuda.so.1 could not be opened or lacks a symbol
    NoDevice,         // the driver loaded but there is no usable device
    UnsupportedDevice,
    Driver,           // a CUDA driver call failed
    Compile,          // NVRTC rejected a kernel source
    InvalidArgument,  // attributes, dtypes, shapes, strides, values
    Unsupported,      // a valid ONNX input this engine does not implement
    Blas,             // cuBLASLt failed
    Io,               // the on-disk JIT cache
    OutOfMemory,      // the device (or the caller's workspace) has no room
    Internal,         // a defect in nbits itself; the message says where
};

const char* to_string(ErrorKind kind);

// The one error type of the library. Its message says what failed, why, and
// how to fix it.
class Error : public std::runtime_error {
public:
    Error(ErrorKind kind, const std::string& message) : std::runtime_error(message), kind_(kind) {}
    ErrorKind kind() const noexcept { return kind_; }

private:
    ErrorKind kind_;
};

}  // namespace nbits
