#include "nbits/jit/kernel_source.hpp"

#include "nbits/jit/sha256.hpp"

#include <algorithm>
#include <set>

namespace nbits::jit {

namespace {

bool is_identifier_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

std::string_view skip_blanks(std::string_view text)
{
    while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) {
        text.remove_prefix(1);
    }
    return text;
}

template <typename Visit>
void for_each_line(std::string_view text, Visit visit)
{
    while (!text.empty()) {
        const std::size_t end = text.find('\n');
        visit(text.substr(0, end));
        if (end == std::string_view::npos) {
            break;
        }
        text.remove_prefix(end + 1);
    }
}

}  // namespace

std::vector<std::string> quoted_includes(std::string_view text)
{
    std::vector<std::string> names;
    for_each_line(text, [&](std::string_view line) {
        line = skip_blanks(line);
        if (line.empty() || line.front() != '#') {
            return;
        }
        line = skip_blanks(line.substr(1));
        if (line.substr(0, 7) != "include") {
            return;
        }
        line = skip_blanks(line.substr(7));
        if (line.empty() || line.front() != '"') {
            return;
        }
        const std::size_t close = line.find('"', 1);
        if (close != std::string_view::npos) {
            names.emplace_back(line.substr(1, close - 1));
        }
    });
    return names;
}

std::vector<std::string> declared_entries(std::string_view text)
{
    constexpr std::string_view marker = "extern \"C\" __global__ void ";
    std::vector<std::string> names;
    for (std::size_t at = text.find(marker); at != std::string_view::npos; at = text.find(marker, at + 1)) {
        std::size_t end = at + marker.size();
        while (end < text.size() && is_identifier_char(text[end])) {
            ++end;
        }
        if (end < text.size() && text[end] == '(' && end > at + marker.size()) {
            names.emplace_back(text.substr(at + marker.size(), end - at - marker.size()));
        }
    }
    return names;
}

KernelSource::KernelSource(std::string name, std::string text, const std::vector<Header>& available)
    : name_(std::move(name)), text_(std::move(text)), entries_(declared_entries(text_))
{
    std::set<std::string> reached;
    std::vector<std::string> pending = quoted_includes(text_);
    while (!pending.empty()) {
        const std::string include = pending.back();
        pending.pop_back();
        const auto header = std::find_if(available.begin(), available.end(),
                                         [&](const Header& h) { return h.name == include; });
        if (header == available.end() || !reached.insert(include).second) {
            continue;
        }
        headers_.push_back(*header);
        for (std::string& nested : quoted_includes(header->text)) {
            pending.push_back(std::move(nested));
        }
    }
    std::sort(headers_.begin(), headers_.end(), [](const Header& a, const Header& b) { return a.name < b.name; });

    Sha256 hash;
    hash.update_field("nbits kernel source v1").update_field(text_);
    for (const Header& header : headers_) {
        hash.update_field(header.name).update_field(header.text);
    }
    digest_ = hash.finish_hex();
}

bool KernelSource::has_entry(std::string_view entry) const
{
    return std::find(entries_.begin(), entries_.end(), entry) != entries_.end();
}

std::vector<KernelSource> sources_from(const EmbeddedFileSet& files)
{
    auto ends_with = [](std::string_view text, std::string_view suffix) {
        return text.size() >= suffix.size() && text.substr(text.size() - suffix.size()) == suffix;
    };
    std::vector<Header> headers;
    for (const EmbeddedFile& file : files) {
        if (ends_with(file.path, ".cuh")) {
            headers.push_back({file.path, std::string(file.text, file.size)});
        }
    }
    std::vector<KernelSource> sources;
    for (const EmbeddedFile& file : files) {
        std::string_view path(file.path);
        if (ends_with(path, ".cu")) {
            std::string name(path.substr(0, path.size() - 3));
            sources.emplace_back(std::move(name), std::string(file.text, file.size), headers);
        }
    }
    return sources;
}

}  // namespace nbits::jit
