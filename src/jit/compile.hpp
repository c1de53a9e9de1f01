#pragma once

#include "jit/kernel_source.hpp"
#include "jit/target.hpp"

#include <string>
#include <vector>

namespace nbits::jit {

// Preprocessor definitions ("NBITS_K=4096") that specialise a source for one
// node: K, block size, bits, dtypes, tile shapes become constants.
using Defines = std::vector<std::string>;

// What to compile. An empty `entries` compiles every entry of the source;
// otherwise only the named ones (each entry of a kernels_cu file is guarded
// by `#if NBITS_ALL_ENTRIES || NBITS_ENTRY_<name>`).
struct CompileRequest {
    const KernelSource* source = nullptr;
    std::vector<std::string> entries;
    Defines defines;
    Target target;
    // CUBIN: ptxas reports into the log (-Xptxas=-v: registers, spills, and
    // its performance notes such as serialised wgmmas). For tests and tools;
    // the runtime never asks, so its options and keys stay as they are.
    bool assembler_report = false;
};

struct CompiledImage {
    std::string image;  // PTX text or CUBIN bytes, as `target.kind` says
    Target target;
    std::vector<std::string> options;
    std::string log;
    double seconds = 0.0;
};

// The exact NVRTC options `compile` passes (they are part of cache keys).
std::vector<std::string> compile_options(const CompileRequest& request);

// Compiles with NVRTC. Needs no GPU. Throws Error(Compile) carrying the NVRTC
// log and the options, or Error(InvalidArgument) for an unknown entry.
CompiledImage compile(const CompileRequest& request);

// "13.0": the NVRTC library this process runs with.
std::string nvrtc_version();

}  // namespace nbits::jit
