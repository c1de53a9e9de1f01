// nbits_nvrtc_ptx: writes the PTX that nbits' own JIT path produces for one
// kernel source file on disk, so check_ptx_equivalence.py compares exactly
// what the runtime would load (same NVRTC options, same named headers, same
// include directory discovery) instead of an nvcc approximation of it.
//
//   nbits_nvrtc_ptx --target compute_90 --output out.ptx
//                   [--headers DIR] [--entry NAME]... [--no-include-dirs] SOURCE.cu
//
// --headers DIR  every *.cuh under DIR becomes a named header, named by its
//                path relative to DIR ("nbits/reduce.cuh"), as the embedded
//                kernels_cu set is at build time.
// --entry NAME   compile only that entry (-DNBITS_ENTRY_NAME=1); without
//                any, every entry (-DNBITS_ALL_ENTRIES=1).
// --no-include-dirs  pass no include directory (no -I), where the runtime
//                passes the CUDA toolkit's: proves a source needs no toolkit
//                header.
// The NVRTC options used are printed on stdout, the NVRTC log on stderr.
// Exit status: 0 compiled, 1 compile or I/O error, 2 usage error.

#include "nbits/error.hpp"
#include "jit/compile.hpp"
#include "jit/kernel_source.hpp"
#include "jit/target.hpp"
#include "toolkit_include_dirs.hpp"

#include <algorithm>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;

struct Arguments {
    std::string target;
    std::string output;
    std::string headers_dir;
    std::vector<std::string> entries;
    bool include_dirs = true;
    std::string source;
};

constexpr const char* usage =
    "usage: nbits_nvrtc_ptx --target compute_XY --output OUT.ptx [--headers DIR] [--entry NAME]... "
    "[--no-include-dirs] SOURCE.cu\n";

class UsageError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

Arguments parse_arguments(int argc, char** argv)
{
    Arguments arguments;
    for (int i = 1; i < argc; ++i) {
        const std::string flag = argv[i];
        auto value = [&]() -> std::string {
            if (i + 1 >= argc) {
                throw UsageError(flag + " needs a value");
            }
            return argv[++i];
        };
        if (flag == "--target") {
            arguments.target = value();
        } else if (flag == "--output") {
            arguments.output = value();
        } else if (flag == "--headers") {
            arguments.headers_dir = value();
        } else if (flag == "--entry") {
            arguments.entries.push_back(value());
        } else if (flag == "--no-include-dirs") {
            arguments.include_dirs = false;
        } else if (!flag.empty() && flag[0] == '-') {
            throw UsageError("unknown option " + flag);
        } else if (arguments.source.empty()) {
            arguments.source = flag;
        } else {
            throw UsageError("more than one source file given");
        }
    }
    if (arguments.target.empty() || arguments.output.empty() || arguments.source.empty()) {
        throw UsageError("--target, --output and a source file are required");
    }
    return arguments;
}

std::string read_file(const fs::path& path)
{
    std::ifstream in(path, std::ios::binary);
    if (!in) {
        throw nbits::Error(nbits::ErrorKind::Io, "cannot read " + path.string());
    }
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
}

// The named headers a kernel source may include, as nbits embeds them.
std::vector<nbits::jit::Header> headers_under(const std::string& dir)
{
    std::vector<nbits::jit::Header> headers;
    if (dir.empty()) {
        return headers;
    }
    for (const fs::directory_entry& file : fs::recursive_directory_iterator(dir)) {
        if (file.is_regular_file() && file.path().extension() == ".cuh") {
            headers.push_back({fs::relative(file.path(), dir).generic_string(), read_file(file.path())});
        }
    }
    std::sort(headers.begin(), headers.end(),
              [](const nbits::jit::Header& a, const nbits::jit::Header& b) { return a.name < b.name; });
    return headers;
}

void write_ptx(const std::string& path, std::string image)
{
    // jit::compile keeps PTX's terminating NUL for cuModuleLoadData; a text file does not want it.
    while (!image.empty() && image.back() == '\0') {
        image.pop_back();
    }
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << image;
    if (!out) {
        throw nbits::Error(nbits::ErrorKind::Io, "cannot write " + path);
    }
}

int run(const Arguments& arguments)
{
    const nbits::jit::Target target = nbits::jit::Target::parse(arguments.target);
    if (target.kind != nbits::jit::ImageKind::Ptx) {
        throw UsageError("--target must be a virtual architecture (compute_XY), got " + arguments.target);
    }
    const fs::path source_path(arguments.source);
    const nbits::jit::KernelSource source(
        source_path.stem().string(), read_file(source_path), headers_under(arguments.headers_dir),
        arguments.include_dirs ? nbits::test::toolkit_include_dirs() : std::vector<std::string>{});
    nbits::jit::CompileRequest request;
    request.source = &source;
    request.entries = arguments.entries;
    request.target = target;

    const nbits::jit::CompiledImage compiled = nbits::jit::compile(request);
    if (!compiled.log.empty()) {
        std::cerr << compiled.log << '\n';
    }
    write_ptx(arguments.output, compiled.image);
    for (std::size_t i = 0; i < compiled.options.size(); ++i) {
        std::cout << (i ? " " : "") << compiled.options[i];
    }
    std::cout << '\n';
    return 0;
}

}  // namespace

int main(int argc, char** argv)
{
    try {
        return run(parse_arguments(argc, argv));
    } catch (const UsageError& error) {
        std::cerr << "nbits_nvrtc_ptx: " << error.what() << '\n' << usage;
        return 2;
    } catch (const std::exception& error) {
        std::cerr << "nbits_nvrtc_ptx: " << error.what() << '\n';
        return 1;
    }
}
