#include "jit/compile.hpp"

#include "nbits/error.hpp"

#include <fmt/format.h>
#include <nvrtc.h>

#include <chrono>
#include <memory>

namespace nbits::jit {
namespace {

struct ProgramDeleter {
    void operator()(nvrtcProgram program) const { nvrtcDestroyProgram(&program); }
};
using Program = std::unique_ptr<std::remove_pointer_t<nvrtcProgram>, ProgramDeleter>;

std::string entries_label(const CompileRequest& request)
{
    if (request.entries.empty()) {
        return "all entries";
    }
    std::string label = "entry ";
    for (std::size_t i = 0; i < request.entries.size(); ++i) {
        label += (i ? ", " : "") + request.entries[i];
    }
    return label;
}

std::string join_options(const std::vector<std::string>& options)
{
    std::string joined;
    for (const std::string& option : options) {
        joined += (joined.empty() ? "" : " ") + option;
    }
    return joined;
}

void check_nvrtc(nvrtcResult result, const char* what, const CompileRequest& request)
{
    if (result != NVRTC_SUCCESS) {
        throw Error(ErrorKind::Compile, fmt::format("NVRTC {} failed for {}.cu ({}, {}): {}", what,
                                                    request.source->name(), entries_label(request),
                                                    request.target.str(), nvrtcGetErrorString(result)));
    }
}

bool nvrtc_supports_minimal()
{
    static const bool supported = [] {
        int major = 0;
        int minor = 0;
        nvrtcVersion(&major, &minor);
        return major > 12 || (major == 12 && minor >= 4);
    }();
    return supported;
}

}  // namespace

std::vector<std::string> compile_options(const CompileRequest& request)
{
    std::vector<std::string> options;
    options.push_back("--gpu-architecture=" + request.target.str());
    options.emplace_back("--std=c++17");
    // -minimal leaves out NVRTC's implicit declarations of texture, surface,
    // device-runtime and driver types, which no kernel uses: the PTX is
    // byte-identical and each compile saves ~7 ms of parsing (NVRTC >= 12.4).
    if (nvrtc_supports_minimal()) {
        options.emplace_back("-minimal");
    }
    if (request.entries.empty()) {
        options.emplace_back("-DNBITS_ALL_ENTRIES=1");
    }
    for (const std::string& entry : request.entries) {
        options.push_back("-DNBITS_ENTRY_" + entry + "=1");
    }
    for (const std::string& define : request.defines) {
        options.push_back("-D" + define);
    }
    for (const std::string& dir : request.source->include_dirs()) {
        options.push_back("-I" + dir);
    }
    if (request.assembler_report && request.target.kind == ImageKind::Cubin) {
        options.emplace_back("-Xptxas=-v");
    }
    return options;
}

CompiledImage compile(const CompileRequest& request)
{
    if (request.source == nullptr) {
        throw Error(ErrorKind::InvalidArgument, "jit::compile needs a kernel source");
    }
    for (const std::string& entry : request.entries) {
        if (!request.source->has_entry(entry)) {
            throw Error(ErrorKind::InvalidArgument,
                        fmt::format("{}.cu declares no entry '{}'. How to fix: use one of the entries it declares",
                                    request.source->name(), entry));
        }
    }
    const auto start = std::chrono::steady_clock::now();
    const auto& headers = request.source->headers();
    std::vector<const char*> header_texts;
    std::vector<const char*> header_names;
    for (const Header& header : headers) {
        header_texts.push_back(header.text.c_str());
        header_names.push_back(header.name.c_str());
    }
    const std::string file_name = request.source->name() + ".cu";
    nvrtcProgram raw = nullptr;
    check_nvrtc(nvrtcCreateProgram(&raw, request.source->text().c_str(), file_name.c_str(),
                                   static_cast<int>(headers.size()), header_texts.data(), header_names.data()),
                "program creation", request);
    Program program(raw);

    CompiledImage compiled;
    compiled.target = request.target;
    compiled.options = compile_options(request);
    std::vector<const char*> option_pointers;
    for (const std::string& option : compiled.options) {
        option_pointers.push_back(option.c_str());
    }
    const nvrtcResult result =
        nvrtcCompileProgram(program.get(), static_cast<int>(option_pointers.size()), option_pointers.data());
    std::size_t log_size = 0;
    if (nvrtcGetProgramLogSize(program.get(), &log_size) == NVRTC_SUCCESS && log_size > 1) {
        compiled.log.resize(log_size);
        nvrtcGetProgramLog(program.get(), compiled.log.data());
        compiled.log.resize(log_size - 1);
    }
    if (result != NVRTC_SUCCESS) {
        throw Error(ErrorKind::Compile,
                    fmt::format("NVRTC could not compile {} ({}) for {}: {}\n{}\noptions: {}", file_name,
                                entries_label(request), request.target.str(), nvrtcGetErrorString(result),
                                compiled.log, join_options(compiled.options)));
    }
    std::size_t size = 0;
    if (request.target.kind == ImageKind::Cubin) {
        check_nvrtc(nvrtcGetCUBINSize(program.get(), &size), "CUBIN size query", request);
        compiled.image.resize(size);
        check_nvrtc(nvrtcGetCUBIN(program.get(), compiled.image.data()), "CUBIN retrieval", request);
    } else {
        check_nvrtc(nvrtcGetPTXSize(program.get(), &size), "PTX size query", request);
        compiled.image.resize(size);
        check_nvrtc(nvrtcGetPTX(program.get(), compiled.image.data()), "PTX retrieval", request);
        // The PTX keeps its terminating NUL: cuModuleLoadData reads it as a C string.
    }
    compiled.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return compiled;
}

std::string nvrtc_version()
{
    int major = 0;
    int minor = 0;
    nvrtcVersion(&major, &minor);
    return fmt::format("{}.{}", major, minor);
}

}  // namespace nbits::jit
