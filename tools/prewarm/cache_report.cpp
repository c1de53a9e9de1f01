// nbits-prewarm --list, --verify and --clear: the cache as it is, without
// compiling. Everything shown comes from files anyone may have written, so
// every cell and line goes through jit::printable.

#include "prewarm.hpp"

#include "jit/cache_text.hpp"
#include "json_writer.hpp"
#include "kernels.hpp"
#include "nbits/error.hpp"
#include "text_table.hpp"

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <unistd.h>

namespace nbits::prewarm {
namespace {

// The parts of a canonical image key (jit::ImageKey::canonical) a person
// looks for in --list.
struct KeySummary {
    std::string target;   // "sm_90"
    std::string source;   // "gemv_f16", or "? 1a2b3c4d5e6f" for a source this build does not embed
    std::string entries;  // "matmul_nbits_gemv_f16", or "*" for the whole source
    std::string nvrtc;    // "13.0"
};

std::string source_name(std::string_view digest)
{
    for (const jit::KernelSource& source : kernels::all()) {
        if (source.digest() == digest) {
            return source.name();
        }
    }
    return "? " + std::string(digest.substr(0, 12));
}

KeySummary summarize_key(std::string_view key_text)
{
    KeySummary summary;
    while (!key_text.empty()) {
        const std::size_t end = std::min(key_text.find('\n'), key_text.size());
        const std::string_view line = key_text.substr(0, end);
        key_text.remove_prefix(std::min(end + 1, key_text.size()));
        const std::size_t space = line.find(' ');
        if (space == std::string_view::npos) {
            continue;
        }
        const std::string_view label = line.substr(0, space);
        const std::string_view value = line.substr(space + 1);
        if (label == "source") {
            summary.source = source_name(value);
        } else if (label == "entries") {
            summary.entries = std::string(value);
        } else if (label == "target") {
            summary.target = std::string(value);
        } else if (label == "nvrtc") {
            summary.nvrtc = std::string(value);
        }
    }
    return summary;
}

// The directory must be readable for a listing to mean anything: an
// unreadable one would otherwise look empty.
void require_readable(const jit::DiskCache& cache)
{
    if (::access(cache.directory().c_str(), R_OK | X_OK) != 0) {
        throw Error(ErrorKind::Io, fmt::format("cannot read the cache directory {}: {}. How to fix: run as a user "
                                               "who may read it, or name another with --cache-dir",
                                               cache.directory(), std::strerror(errno)));
    }
}

const char* fix_for_unremoved(bool any)
{
    return any ? "How to fix: run again as a user who may write the cache directory (e.g. the one who prewarmed "
                 "it), or make it writable\n"
               : "";
}

}  // namespace

std::string human_bytes(std::uint64_t bytes)
{
    if (bytes < 1024) {
        return fmt::format("{} B", bytes);
    }
    const char* units[] = {"KiB", "MiB", "GiB", "TiB"};
    double value = static_cast<double>(bytes) / 1024.0;
    int unit = 0;
    while (value >= 1024.0 && unit < 3) {
        value /= 1024.0;
        ++unit;
    }
    return fmt::format("{:.1f} {}", value, units[unit]);
}

std::string human_age(double seconds)
{
    if (seconds < 120) {
        return fmt::format("{:.0f} s", seconds);
    }
    if (seconds < 7200) {
        return fmt::format("{:.0f} min", seconds / 60);
    }
    if (seconds < 172800) {
        return fmt::format("{:.0f} h", seconds / 3600);
    }
    return fmt::format("{:.0f} d", seconds / 86400);
}

ActionOutput list_images(const jit::DiskCache& cache)
{
    require_readable(cache);
    const std::vector<jit::CachedImageFile> files = cache.scan();
    std::uint64_t total = 0;
    std::size_t problems = 0;
    tools::TextTable table;
    for (const char* header : {"target", "source", "entries", "nvrtc"}) {
        table.column(header, tools::TextTable::Align::Left);
    }
    table.column("size");
    table.column("last used");
    table.column("status", tools::TextTable::Align::Left);
    JsonWriter json;
    json.begin_object().field("action", "list").field("cache_dir", cache.directory()).field("max_bytes", cache.max_bytes());
    json.key("images").begin_array();
    for (const jit::CachedImageFile& file : files) {
        total += file.bytes;
        problems += !file.problem.empty();
        const KeySummary key = summarize_key(file.key_text);
        table.row({jit::printable(key.target), jit::printable(key.source), jit::printable(key.entries),
                   jit::printable(key.nvrtc), human_bytes(file.bytes), human_age(file.seconds_since_use) + " ago",
                   file.problem.empty() ? "ok" : jit::printable(file.problem + ": " + file.path)});
        json.begin_object()
            .field("path", file.path)
            .field("type", jit::cache_files::describe(file.type))
            .field("target", key.target)
            .field("source", key.source)
            .field("entries", key.entries)
            .field("nvrtc", key.nvrtc)
            .field("bytes", file.bytes)
            .field("seconds_since_use", file.seconds_since_use)
            .field("problem", file.problem)
            .end_object();
    }
    json.end_array().field("total_bytes", total).field("problems", static_cast<std::uint64_t>(problems)).end_object();
    ActionOutput output;
    output.text = fmt::format("{}: {} image(s), {} (bound {}), least recently used first\n\n",
                              jit::printable(cache.directory()), files.size(), human_bytes(total),
                              human_bytes(cache.max_bytes())) +
                  table.render();
    if (problems > 0) {
        output.text += fmt::format("\n{} entr{} with a problem; `nbits-prewarm --verify` removes them\n", problems,
                                   problems == 1 ? "y" : "ies");
    }
    output.json = json.str();
    return output;
}

ActionOutput verify_images(jit::DiskCache& cache)
{
    require_readable(cache);
    const jit::DiskCache::Verification verification = cache.verify();
    const std::size_t bad = verification.removed.size() + verification.not_removed.size();
    ActionOutput output;
    output.exit_code = bad == 0 ? kExitOk : kExitFailed;
    JsonWriter json;
    json.begin_object()
        .field("action", "verify")
        .field("cache_dir", cache.directory())
        .field("checked", static_cast<std::uint64_t>(verification.checked));
    json.key("damaged").begin_array();
    for (const jit::CachedImageFile& file : verification.removed) {
        output.text += jit::printable(fmt::format("removed {}: {}", file.path, file.problem)) + "\n";
        json.begin_object().field("path", file.path).field("problem", file.problem).field("removed", true).end_object();
    }
    for (const jit::DiskCache::Verification::Stayed& stayed : verification.not_removed) {
        output.text += jit::printable(fmt::format("NOT removed {}: {}; removing it failed: {}", stayed.file.path,
                                                  stayed.file.problem, stayed.why)) +
                       "\n";
        json.begin_object()
            .field("path", stayed.file.path)
            .field("problem", stayed.file.problem)
            .field("removed", false)
            .field("why_not_removed", stayed.why)
            .end_object();
    }
    json.end_array()
        .field("removed", static_cast<std::uint64_t>(verification.removed.size()))
        .field("not_removed", static_cast<std::uint64_t>(verification.not_removed.size()))
        .end_object();
    output.json = json.str();
    std::string outcome;
    if (bad > 0) {
        outcome = verification.not_removed.empty()
                      ? " and removed"
                      : fmt::format(": {} removed, {} NOT removed", verification.removed.size(),
                                    verification.not_removed.size());
    }
    output.text += fmt::format("{}: {} image(s) checked (type, size, header, key, SHA-256), {} damaged{}\n{}",
                               jit::printable(cache.directory()), verification.checked, bad, outcome,
                               fix_for_unremoved(!verification.not_removed.empty()));
    return output;
}

ActionOutput clear_images(jit::DiskCache& cache)
{
    require_readable(cache);
    const jit::DiskCache::Clearing clearing = cache.clear();
    ActionOutput output;
    output.exit_code = clearing.failed.empty() ? kExitOk : kExitFailed;
    for (const jit::DiskCache::Unremoved& failed : clearing.failed) {
        output.text += jit::printable(fmt::format("NOT removed {}: {}", failed.path, failed.why)) + "\n";
    }
    output.text += fmt::format("{}: removed {} file(s)", jit::printable(cache.directory()), clearing.removed);
    if (!clearing.failed.empty()) {
        output.text += fmt::format(", {} could NOT be removed", clearing.failed.size());
    }
    if (clearing.in_progress > 0) {
        output.text += fmt::format("; kept {} temporary or claim file(s) younger than {} minutes (a prewarm or "
                                   "engine storing images now)",
                                   clearing.in_progress, jit::kAbandonedAfterNs / 60'000'000'000);
    }
    output.text += "\n";
    output.text += fix_for_unremoved(!clearing.failed.empty());
    JsonWriter json;
    json.begin_object()
        .field("action", "clear")
        .field("cache_dir", cache.directory())
        .field("removed", static_cast<std::uint64_t>(clearing.removed))
        .field("in_progress_kept", static_cast<std::uint64_t>(clearing.in_progress));
    json.key("not_removed").begin_array();
    for (const jit::DiskCache::Unremoved& failed : clearing.failed) {
        json.begin_object().field("path", failed.path).field("why", failed.why).end_object();
    }
    json.end_array().end_object();
    output.json = json.str();
    return output;
}

}  // namespace nbits::prewarm
