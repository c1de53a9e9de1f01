// nbits-prewarm: fills the nbits disk cache with compiled kernel images ahead
// of time (at deploy or image build time), so that an engine's first launch
// loads an image instead of compiling. This file: the command line, the
// shapes file, the targets, and main.

#include "prewarm.hpp"

#include "command_line.hpp"
#include "jit/cache_text.hpp"
#include "kernels.hpp"
#include "nbits/error.hpp"

#include <fmt/format.h>
#include <nvrtc.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <fstream>

using namespace nbits;
using namespace nbits::prewarm;

namespace nbits::prewarm {
namespace {

const char* to_text(DataType type)
{
    switch (type) {
    case DataType::Float16: return "f16";
    case DataType::BFloat16: return "bf16";
    case DataType::Float32: return "f32";
    default: return "?";
    }
}

DataType float_type(const std::string& text)
{
    if (text == "f16") {
        return DataType::Float16;
    }
    if (text == "bf16") {
        return DataType::BFloat16;
    }
    if (text == "f32") {
        return DataType::Float32;
    }
    throw tools::UsageError("expected f16, bf16 or f32");
}

// Help text reflowed to lines of at most 64 characters, so that --help fits
// 100 columns beside the option names; lines indented by four spaces
// (examples) stay as written.
std::string wrapped(const std::string& text)
{
    constexpr std::size_t kWidth = 64;
    std::string out;
    std::string line;
    auto flush = [&] {
        if (!line.empty()) {
            out += (out.empty() ? "" : "\n") + line;
            line.clear();
        }
    };
    std::size_t start = 0;
    while (start <= text.size()) {
        std::size_t end = text.find('\n', start);
        if (end == std::string::npos) {
            end = text.size();
        }
        const std::string piece = text.substr(start, end - start);
        if (piece.rfind("    ", 0) == 0) {
            flush();
            out += (out.empty() ? "" : "\n") + piece;
        } else {
            std::size_t at = 0;
            while (at < piece.size()) {
                const std::size_t space = std::min(piece.find(' ', at), piece.size());
                const std::string word = piece.substr(at, space - at);
                if (!line.empty() && line.size() + 1 + word.size() > kWidth) {
                    flush();
                }
                line += (line.empty() ? "" : " ") + word;
                at = space + 1;
            }
        }
        start = end + 1;
    }
    flush();
    return out;
}

// --arch all: the data-centre and workstation generations nbits is planned
// for, as far as this NVRTC can compile them.
constexpr int kAllArchitectures[] = {80, 86, 89, 90, 100, 120};

std::vector<int> nvrtc_architectures()
{
    int count = 0;
    if (nvrtcGetNumSupportedArchs(&count) != NVRTC_SUCCESS || count <= 0) {
        return {};
    }
    std::vector<int> archs(static_cast<std::size_t>(count));
    if (nvrtcGetSupportedArchs(archs.data()) != NVRTC_SUCCESS) {
        return {};
    }
    return archs;
}

std::string architecture_list(const std::vector<int>& archs)
{
    std::string text;
    for (int arch : archs) {
        text += (text.empty() ? "" : ", ") + fmt::format("sm_{}", arch);
    }
    return text;
}

void add_target(std::vector<jit::Target>& targets, const jit::Target& target)
{
    if (std::find(targets.begin(), targets.end(), target) == targets.end()) {
        targets.push_back(target);
    }
}

// "sm_90", "compute_80", "sm_90a" (the family's own target: a runtime on an
// sm_90 GPU loads sm_90 images), or "all".
void parse_architectures(const std::string& value, PrewarmOptions& options)
{
    const std::vector<std::string> items = tools::split_list(value);
    if (items.empty()) {
        throw tools::UsageError("no target given. How to fix: name at least one, e.g. --arch sm_90, --arch "
                                "sm_80,sm_90 or --arch all");
    }
    const std::vector<int> supported = nvrtc_architectures();
    const auto supports = [&](int sm) { return std::find(supported.begin(), supported.end(), sm) != supported.end(); };
    for (const std::string& item : items) {
        if (item == "all") {
            for (int sm : kAllArchitectures) {
                if (supports(sm)) {
                    add_target(options.targets, jit::Target::cubin(sm / 10, sm % 10));
                }
            }
            continue;
        }
        std::string base = item;
        const bool digit_before = item.size() >= 2 && std::isdigit(static_cast<unsigned char>(item[item.size() - 2]));
        if (digit_before && (item.back() == 'a' || item.back() == 'f')) {
            base.pop_back();
        }
        jit::Target target;
        try {
            target = jit::Target::parse(base);
        } catch (const Error& error) {
            throw tools::UsageError(error.what());
        }
        if (!supported.empty() && !supports(target.sm())) {
            throw tools::UsageError(fmt::format(
                "'{}': NVRTC {} cannot compile for it. How to fix: use an architecture it supports: {} (sm_XY "
                "for CUBIN, compute_XY for PTX), or --arch all",
                item, jit::nvrtc_version(), architecture_list(supported)));
        }
        if (base != item) {
            options.notes.push_back(fmt::format(
                "{} is the architecture-specific variant of {}: an nbits runtime on such a GPU loads {} images, so "
                "{} is prewarmed",
                item, base, base, base));
        }
        add_target(options.targets, target);
    }
}

std::vector<std::int64_t> parse_shape(const std::string& value, std::vector<std::int64_t>& m)
{
    const std::vector<std::string> parts = tools::split_list(value);
    if (parts.size() < 2 || value.find(",,") != std::string::npos || value.front() == ',' || value.back() == ',') {
        throw tools::UsageError("expected K,N or K,N,M with one or more M values (e.g. 4096,6144 or 4096,6144,1,128)");
    }
    const std::int64_t k = tools::parse_integer(parts[0], 1, 0x7fffffff);
    const std::int64_t n = tools::parse_integer(parts[1], 1, 0x7fffffff);
    m.clear();
    for (std::size_t i = 2; i < parts.size(); ++i) {
        m.push_back(tools::parse_integer(parts[i], 1, 0x7fffffff));
    }
    if (m.empty()) {
        m.push_back(1);
    }
    return {k, n};
}

// A tools::CommandLine that also knows which options take a value, so that
// `--arch --cache-dir DIR` is an error instead of an architecture named
// "--cache-dir", and that reads -h as --help.
class Parser {
public:
    Parser(std::string usage, std::string summary) : cli_(std::move(usage), std::move(summary)) {}

    tools::CommandLine& cli() { return cli_; }
    void flag(std::string name, const std::string& help, bool* target) { cli_.flag(std::move(name), wrapped(help), target); }
    void section(std::string title) { cli_.section(std::move(title)); }
    void option(std::string name, std::string value_name, std::string help, tools::CommandLine::Apply apply)
    {
        valued_.push_back(name);
        cli_.option(std::move(name), std::move(value_name), wrapped(help),
                    [name, apply = std::move(apply)](const std::string& value) {
                        if (value.empty()) {
                            throw tools::UsageError("the value is empty. How to fix: give --" + name +
                                                    " a value, or leave the option out for its default");
                        }
                        apply(value);
                    });
    }

    // `words` without the program name.
    void parse(std::vector<std::string> words) const
    {
        for (std::size_t i = 0; i < words.size(); ++i) {
            if (words[i] == "-h") {
                words[i] = "--help";
            }
            const std::string& word = words[i];
            if (word.rfind("--", 0) != 0 || word.find('=') != std::string::npos) {
                continue;
            }
            const std::string name = word.substr(2);
            if (std::find(valued_.begin(), valued_.end(), name) == valued_.end()) {
                continue;
            }
            if (i + 1 < words.size() && (words[i + 1].rfind("--", 0) == 0 || words[i + 1] == "-h")) {
                throw tools::UsageError(fmt::format(
                    "option '--{}' needs a value, but '{}' follows it. How to fix: give the value (e.g. --{} "
                    "VALUE), or write --{}=VALUE for a value that starts with '--'",
                    name, words[i + 1], name, name));
            }
        }
        std::vector<char*> argv;
        std::string program = "nbits-prewarm";
        argv.push_back(program.data());
        for (std::string& word : words) {
            argv.push_back(word.data());
        }
        cli_.parse(static_cast<int>(argv.size()), argv.data());
    }

    std::string help() const { return cli_.help(); }

private:
    tools::CommandLine cli_;
    std::vector<std::string> valued_;
};

// The node options, shared by the command line and each line of a shapes file.
void add_node_options(Parser& parser, NodeSpec& node, std::vector<std::string>* shapes)
{
    if (shapes != nullptr) {
        parser.option("shape", "K,N[,M...]",
                      "prewarm one node of this shape (repeatable): K and N of the node, then the token\n"
                      "counts M to plan for (default 1, a decode step). Only the entries and -D\n"
                      "specialisations its plans launch are compiled. The node options below apply to\n"
                      "every --shape; nodes that differ go into a --shapes file",
                      [shapes](const std::string& value) {
                          std::vector<std::int64_t> m;
                          parse_shape(value, m);
                          shapes->push_back(value);
                      });
    } else {
        parser.option("shape", "K,N[,M...]", "the node's shape", [&node](const std::string& value) {
            const std::vector<std::int64_t> kn = parse_shape(value, node.m);
            node.k = kn[0];
            node.n = kn[1];
        });
    }
    parser.option("bits", "4|8", "the nodes' weight bits. Default 4", [&node](const std::string& value) {
        node.bits = tools::parse_integer(value);
        if (node.bits != 4 && node.bits != 8) {
            throw tools::UsageError("expected 4 or 8");
        }
    });
    parser.option("block-size", "B", "the nodes' quantization block size (a power of two >= 16). Default 32",
                  [&node](const std::string& value) { node.block_size = tools::parse_integer(value, 16, 1 << 30); });
    parser.option("accuracy-level", "L", "the nodes' accuracy_level attribute (0..4). Default 0",
                  [&node](const std::string& value) { node.accuracy_level = tools::parse_integer(value, 0, 4); });
    parser.option("act", "f16|bf16|f32", "the activations' (A's and Y's) type. Default f16",
                  [&node](const std::string& value) { node.activation = float_type(value); });
    parser.option("scales", "f16|bf16|f32", "the scales' type. Default: the activations' type",
                  [&node](const std::string& value) { node.scales = float_type(value); });
    parser.option("bias", "none|plain|folded",
                  "a bias input: none, plain, or folded by the graph optimizer\n"
                  "(_cuda_matmul_nbits_folded_bias). Default none",
                  [&node](const std::string& value) {
                      if (value == "none") {
                          node.bias = NodeSpec::Bias::None;
                      } else if (value == "plain") {
                          node.bias = NodeSpec::Bias::Plain;
                      } else if (value == "folded") {
                          node.bias = NodeSpec::Bias::Folded;
                      } else {
                          throw tools::UsageError("expected none, plain or folded");
                      }
                  });
    parser.flag("zero-points", "the nodes carry zero points (asymmetric quantization)", &node.zero_points);
    parser.flag("rmsnorm", "the nodes carry the fused RMS-norm prologue (gamma input)", &node.rmsnorm);
    parser.flag("gate-up", "the nodes are paired gate/up projections with fused SwiGLU", &node.gate_up);
}

std::vector<NodeSpec> read_shapes_file(const std::string& path, const NodeSpec& defaults)
{
    std::ifstream file(path);
    if (!file) {
        throw tools::UsageError(fmt::format("cannot read the shapes file '{}'. How to fix: check the path and its "
                                            "permissions",
                                            jit::printable(path)));
    }
    std::vector<NodeSpec> nodes;
    std::string line;
    for (int number = 1; std::getline(file, line); ++number) {
        const std::string where = fmt::format("{}:{}", jit::printable(path), number);
        const std::size_t comment = line.find('#');
        std::vector<std::string> words;
        std::string word;
        for (char c : line.substr(0, comment)) {
            if (std::isspace(static_cast<unsigned char>(c))) {
                if (!word.empty()) {
                    words.push_back(std::move(word));
                    word.clear();
                }
            } else {
                word += c;
            }
        }
        if (!word.empty()) {
            words.push_back(std::move(word));
        }
        if (words.empty()) {
            continue;
        }
        if (words.front().rfind("-", 0) != 0) {
            words.insert(words.begin(), "--shape");
        }
        NodeSpec node = defaults;
        node.k = 0;
        node.origin = where;
        Parser parser("", "");
        add_node_options(parser, node, nullptr);
        try {
            parser.parse(words);
        } catch (const tools::UsageError& error) {
            throw tools::UsageError(fmt::format("{}: {}", where, error.what()));
        }
        if (node.k == 0) {
            throw tools::UsageError(fmt::format("{}: no shape. How to fix: start the line with K,N[,M...]", where));
        }
        nodes.push_back(std::move(node));
    }
    if (nodes.empty()) {
        throw tools::UsageError(fmt::format("the shapes file '{}' names no node. How to fix: one node per line, "
                                            "e.g. '4096,6144,1,128 --bits 4' (see --help)",
                                            jit::printable(path)));
    }
    return nodes;
}

struct Parsed {
    PrewarmOptions options;
    NodeSpec node_defaults;
    std::vector<std::string> shapes;
    std::vector<std::string> shape_files;
    bool list = false, verify = false, clear = false, help = false;
};

Parser command_line(Parsed& p)
{
    PrewarmOptions& options = p.options;
    Parser parser(
        "nbits-prewarm [--arch LIST] [--cache-dir DIR] [--jobs N] [--granularity entry|source]\n"
        "                     [--source LIST] [--shape K,N[,M...] | --shapes FILE] [node options]\n"
        "                     [--policy P] [--dry-run] [--json] [--json-out FILE]\n"
        "       nbits-prewarm --list | --verify | --clear [--cache-dir DIR] [--json]",
        "Compiles MatMulNBits kernels into the nbits disk cache, so that the first launch in a process loads\n"
        "an image instead of running NVRTC: every embedded kernel entry, or with --shape/--shapes exactly\n"
        "the entries and -D specialisations a model's nodes launch. Needs no GPU. Processes prewarming one\n"
        "directory at once share the work: each image is compiled once between them.\n"
        "Exit codes: 0 all well, 1 a compile or store failed, a node could not be planned, or --verify\n"
        "found (or --clear left) a problem, 2 usage error.");
    parser.section("What to compile");
    parser.option("arch", "LIST",
                  "comma-separated targets: sm_XY gives a CUBIN (what a runtime on that GPU loads\n"
                  "first), compute_XY gives PTX; sm_XYa and sm_XYf name sm_XY. 'all': sm_80, sm_86,\n"
                  "sm_89, sm_90, and sm_100, sm_120 where this NVRTC supports them. Targets this NVRTC\n"
                  "cannot compile are refused. Default: the GPUs of this machine, else sm_90",
                  [&](const std::string& value) { parse_architectures(value, options); });
    parser.option("granularity", "entry|source",
                  "one image per kernel entry (the runtime's default) or per source file; use what the\n"
                  "runtime is configured with (RuntimeOptions::granularity). Default entry",
                  [&](const std::string& value) {
                      const std::optional<CompileGranularity> granularity = parse_granularity(value);
                      if (!granularity) {
                          throw tools::UsageError("expected entry or source");
                      }
                      options.granularity = *granularity;
                  });
    parser.option("source", "LIST", "only these kernel sources (e.g. gemv_f16,gate_up_swiglu). Default: all",
                  [&](const std::string& value) {
                      const std::vector<std::string> names = tools::split_list(value);
                      if (names.empty()) {
                          throw tools::UsageError("no source given. How to fix: name kernel sources, e.g. --source "
                                                  "gemv_f16, or leave the option out for all of them");
                      }
                      for (const std::string& name : names) {
                          try {
                              kernels::source(name);
                          } catch (const Error& error) {
                              throw tools::UsageError(error.what());
                          }
                          options.sources.push_back(name);
                      }
                  });
    parser.option("jobs", "N", "parallel compiles. Default: the hardware threads",
                  [&](const std::string& value) { options.jobs = static_cast<int>(tools::parse_integer(value, 1, 1024)); });
    parser.section("A model's nodes (instead of every entry)");
    add_node_options(parser, p.node_defaults, &p.shapes);
    parser.option("shapes", "FILE",
                  "prewarm the nodes FILE lists (repeatable), one per line in the vocabulary of\n"
                  "these options: K,N[,M...] then the node options, e.g.\n"
                  "    4096,6144,1,128 --bits 4 --block-size 32 --zero-points\n"
                  "    4096,28672 --gate-up --rmsnorm   # '#' starts a comment\n"
                  "Node options on the command line are the defaults of every line",
                  [&](const std::string& value) { p.shape_files.push_back(value); });
    parser.option("policy", "original|fastest|both",
                  "plan the nodes under this KernelPolicy (the runtime's MatMulNBitsOptions::policy).\n"
                  "Default both",
                  [&](const std::string& value) {
                      if (value == "both") {
                          options.policies = {KernelPolicy::Original, KernelPolicy::Fastest};
                      } else if (const std::optional<KernelPolicy> policy = parse_kernel_policy(value)) {
                          options.policies = {*policy};
                      } else {
                          throw tools::UsageError("expected original, fastest or both");
                      }
                  });
    parser.section("Where");
    parser.option("cache-dir", "DIR",
                  "the cache directory. Default: where a runtime looks ($NBITS_CACHE_DIR, else\n"
                  "$XDG_CACHE_HOME/nbits, else ~/.cache/nbits)",
                  [&](const std::string& value) { options.cache_dir = value; });
    parser.option("max-bytes", "SIZE",
                  "the cache's size bound while prewarming (e.g. 2G). Default: $NBITS_CACHE_MAX_BYTES, else 1G",
                  [&](const std::string& value) {
                      options.max_bytes = jit::parse_byte_size(value);
                      if (!options.max_bytes) {
                          throw tools::UsageError("expected a byte count, optionally with a K, M or G suffix");
                      }
                  });
    parser.section("Instead of compiling");
    parser.flag("dry-run", "list the images the options select (with --json: as JSON); compile nothing", &options.dry_run);
    parser.flag("list", "list the cached images: target, source, entries, NVRTC, size, last use, problems", &p.list);
    parser.flag("verify",
             "check every entry with an image's name (type, size, header, key, checksum); remove\n"
             "and report those with a problem. Exit 1 when any had one",
             &p.verify);
    parser.flag("clear",
             "remove every cached image, and temporary and claim files older than 10 minutes\n"
             "(younger ones belong to a running prewarm or engine and stay). Exit 1 when\n"
             "something could not be removed",
             &p.clear);
    parser.section("Output");
    parser.flag("json", "print a JSON summary instead of the tables", &options.json);
    parser.option("json-out", "FILE", "also write the JSON summary to FILE",
                  [&](const std::string& value) { options.json_out = value; });
    parser.flag("help", "this text (also -h)", &p.help);
    return parser;
}

}  // namespace

std::string NodeSpec::describe() const
{
    std::string m_text;
    for (std::int64_t value : m) {
        m_text += (m_text.empty() ? "" : ",") + std::to_string(value);
    }
    std::string text = fmt::format("K={} N={} M={} bits={} block={} act={}", k, n, m_text, bits, block_size,
                                   to_text(activation));
    if (scales) {
        text += fmt::format(" scales={}", to_text(*scales));
    }
    if (accuracy_level != 0) {
        text += fmt::format(" accuracy={}", accuracy_level);
    }
    if (zero_points) {
        text += " zp";
    }
    if (bias != Bias::None) {
        text += bias == Bias::Plain ? " bias=plain" : " bias=folded";
    }
    if (rmsnorm) {
        text += " rmsnorm";
    }
    if (gate_up) {
        text += " gate-up";
    }
    return text;
}

PrewarmOptions parse_options(int argc, char** argv)
{
    Parsed p;
    command_line(p).parse(std::vector<std::string>(argv + 1, argv + argc));
    PrewarmOptions& options = p.options;
    if (int(p.list) + int(p.verify) + int(p.clear) + int(options.dry_run) > 1) {
        throw tools::UsageError("--list, --verify, --clear and --dry-run exclude each other");
    }
    options.action = p.help     ? Action::Help
                     : p.list   ? Action::List
                     : p.verify ? Action::Verify
                     : p.clear  ? Action::Clear
                                : Action::Prewarm;
    for (const std::string& shape : p.shapes) {
        NodeSpec node = p.node_defaults;
        const std::vector<std::int64_t> kn = parse_shape(shape, node.m);
        node.k = kn[0];
        node.n = kn[1];
        node.origin = "--shape " + shape;
        options.nodes.push_back(std::move(node));
    }
    for (const std::string& path : p.shape_files) {
        for (NodeSpec& node : read_shapes_file(path, p.node_defaults)) {
            options.nodes.push_back(std::move(node));
        }
    }
    return options;
}

std::string help_text()
{
    Parsed p;
    return command_line(p).help();
}

}  // namespace nbits::prewarm

namespace {

// The directory a runtime in this environment would use, unless --cache-dir names one.
jit::DiskCache open_cache(const PrewarmOptions& options)
{
    const jit::CacheLocation location = jit::resolve_cache_location(jit::DiskCacheOptions{});
    const std::string directory = options.cache_dir.empty() ? location.directory : options.cache_dir;
    if (directory.empty()) {
        throw tools::UsageError("no cache directory: " + location.unusable_reason + " (or pass --cache-dir)");
    }
    if (!location.enabled && location.unusable_reason.empty()) {
        std::fprintf(stderr,
                     "nbits-prewarm: note: the disk cache is switched off here (NBITS_CACHE); runtimes in this "
                     "environment will not read %s\n",
                     jit::printable(directory).c_str());
    }
    return jit::DiskCache(directory, options.max_bytes.value_or(location.max_bytes));
}

ActionOutput perform(const PrewarmOptions& options)
{
    if (options.action == Action::Prewarm && options.dry_run) {
        return prewarm_images(options, nullptr);
    }
    jit::DiskCache cache = open_cache(options);
    switch (options.action) {
    case Action::List: return list_images(cache);
    case Action::Verify: return verify_images(cache);
    case Action::Clear: return clear_images(cache);
    default: return prewarm_images(options, &cache);
    }
}

}  // namespace

int main(int argc, char** argv)
{
    try {
        const PrewarmOptions options = parse_options(argc, argv);
        if (options.action == Action::Help) {
            std::fputs(help_text().c_str(), stdout);
            return kExitOk;
        }
        for (const std::string& note : options.notes) {
            std::fprintf(stderr, "nbits-prewarm: note: %s\n", jit::printable(note).c_str());
        }
        const ActionOutput output = perform(options);
        std::fputs((options.json ? output.json : output.text).c_str(), stdout);
        if (!options.json_out.empty() && !(std::ofstream(options.json_out) << output.json)) {
            std::fprintf(stderr, "nbits-prewarm: cannot write %s. How to fix: name a writable file in --json-out\n",
                         jit::printable(options.json_out).c_str());
            return kExitFailed;
        }
        return output.exit_code;
    } catch (const tools::UsageError& error) {
        std::fprintf(stderr, "nbits-prewarm: %s\n", jit::printable(error.what(), true).c_str());
        return kExitUsage;
    } catch (const std::exception& error) {
        std::fprintf(stderr, "nbits-prewarm: %s\n", jit::printable(error.what(), true).c_str());
        return kExitFailed;
    }
}
