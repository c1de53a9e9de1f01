#include "cache_actions.hpp"

#include "human_units.hpp"
#include "json_writer.hpp"
#include "key_summary.hpp"
#include "text_table.hpp"

#include <fmt/format.h>


namespace nbits::prewarm {

ActionOutput list_images(const jit::DiskCache& cache)
{
    const std::vector<jit::CachedImageFile> files = cache.scan();
    std::uint64_t total = 0;
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
        const KeySummary key = summarize_key(file.key_text);
        table.row({key.target, key.source, key.entries, key.nvrtc, human_bytes(file.bytes),
                   human_age(file.seconds_since_use) + " ago", file.problem.empty() ? "ok" : "DAMAGED: " + file.problem});
        json.begin_object()
            .field("path", file.path)
            .field("target", key.target)
            .field("source", key.source)
            .field("entries", key.entries)
            .field("nvrtc", key.nvrtc)
            .field("bytes", file.bytes)
            .field("seconds_since_use", file.seconds_since_use)
            .field("problem", file.problem)
            .end_object();
    }
    json.end_array().field("total_bytes", total).end_object();
    ActionOutput output;
    output.text = fmt::format("{}: {} image(s), {} (bound {}), least recently used first\n\n", cache.directory(),
                              files.size(), human_bytes(total), human_bytes(cache.max_bytes())) +
                  table.render();
    output.json = json.str();
    return output;
}

ActionOutput verify_images(jit::DiskCache& cache)
{
    const jit::DiskCache::Verification verification = cache.verify();
    const std::size_t checked = verification.checked;
    const std::vector<jit::CachedImageFile>& damaged = verification.removed;
    ActionOutput output;
    output.exit_code = damaged.empty() ? kExitOk : kExitFailed;
    JsonWriter json;
    json.begin_object()
        .field("action", "verify")
        .field("cache_dir", cache.directory())
        .field("checked", static_cast<std::uint64_t>(checked));
    json.key("damaged").begin_array();
    for (const jit::CachedImageFile& file : damaged) {
        output.text += fmt::format("removed {}: {}\n", file.path, file.problem);
        json.begin_object().field("path", file.path).field("problem", file.problem).end_object();
    }
    json.end_array().end_object();
    output.json = json.str();
    output.text += fmt::format("{}: {} image(s) checked (header, key, SHA-256), {} damaged{}\n", cache.directory(),
                               checked, damaged.size(), damaged.empty() ? "" : " and removed");
    return output;
}

ActionOutput clear_images(jit::DiskCache& cache)
{
    const std::size_t removed = cache.clear();
    ActionOutput output;
    output.text = fmt::format("{}: removed {} file(s)\n", cache.directory(), removed);
    JsonWriter json;
    json.begin_object()
        .field("action", "clear")
        .field("cache_dir", cache.directory())
        .field("removed", static_cast<std::uint64_t>(removed))
        .end_object();
    output.json = json.str();
    return output;
}

}  // namespace nbits::prewarm
