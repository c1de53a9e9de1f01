#include "jit/kernel_source.hpp"

#include "jit/sha256.hpp"

#include <algorithm>
#include <cctype>
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

namespace {

std::string_view trim(std::string_view text)
{
    while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front()))) {
        text.remove_prefix(1);
    }
    while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) {
        text.remove_suffix(1);
    }
    return text;
}

// "const __half* __restrict__ activation" -> name "activation", kind Pointer.
KernelParameter parameter_of(std::string_view declaration)
{
    KernelParameter parameter;
    declaration = trim(declaration);
    std::size_t end = declaration.size();
    std::size_t begin = end;
    while (begin > 0 && is_identifier_char(declaration[begin - 1])) {
        --begin;
    }
    parameter.name = std::string(declaration.substr(begin, end - begin));
    const std::string_view type = declaration.substr(0, begin);
    auto has_word = [&](std::string_view word) {
        for (std::size_t at = type.find(word); at != std::string_view::npos; at = type.find(word, at + 1)) {
            const bool starts = at == 0 || !is_identifier_char(type[at - 1]);
            const bool ends = at + word.size() == type.size() || !is_identifier_char(type[at + word.size()]);
            if (starts && ends) {
                return true;
            }
        }
        return false;
    };
    if (type.find('*') != std::string_view::npos) {
        parameter.kind = KernelParameter::Kind::Pointer;
    } else if (has_word("TmaMap")) {
        parameter.kind = KernelParameter::Kind::TensorMap;
    } else if (has_word("float")) {
        parameter.kind = KernelParameter::Kind::Float32;
    } else if (has_word("int")) {
        parameter.kind = KernelParameter::Kind::Int32;
    }
    return parameter;
}

// "align 16", "align 4 when int4", "align 8; align 16 when K%8==0" (the text
// of a comment after a parameter); anything else is an ordinary comment.
void annotate(KernelParameter& parameter, std::string_view comment)
{
    while (!comment.empty()) {
        const std::size_t end = comment.find(';');
        std::string_view clause = trim(comment.substr(0, end));
        comment = end == std::string_view::npos ? std::string_view() : comment.substr(end + 1);
        if (clause.substr(0, 6) != "align ") {
            return;
        }
        clause = trim(clause.substr(6));
        std::uint32_t bytes = 0;
        std::size_t digits = 0;
        while (digits < clause.size() && clause[digits] >= '0' && clause[digits] <= '9') {
            bytes = bytes * 10 + static_cast<std::uint32_t>(clause[digits] - '0');
            ++digits;
        }
        if (digits == 0 || bytes == 0) {
            return;
        }
        KernelParameter::Alignment alignment;
        alignment.bytes = bytes;
        clause = trim(clause.substr(digits));
        if (clause.substr(0, 5) == "when ") {
            alignment.when = std::string(trim(clause.substr(5)));
        }
        parameter.alignment.push_back(alignment);
    }
}

// The parameters between the parentheses at `open`, with the alignment
// comments that follow them; `close` receives the index of the ')'.
std::vector<KernelParameter> parameters_at(std::string_view text, std::size_t open, std::size_t& close)
{
    std::vector<KernelParameter> parameters;
    std::string current;
    std::string current_comment;
    int depth = 0;
    auto finish = [&]() {
        if (!trim(current).empty()) {
            parameters.push_back(parameter_of(current));
            annotate(parameters.back(), current_comment);
        }
        current.clear();
        current_comment.clear();
    };
    for (std::size_t at = open + 1; at < text.size(); ++at) {
        const char c = text[at];
        if (c == '/' && at + 1 < text.size() && (text[at + 1] == '/' || text[at + 1] == '*')) {
            const bool line = text[at + 1] == '/';
            const std::size_t end = line ? text.find('\n', at) : text.find("*/", at + 2);
            const std::size_t stop = end == std::string_view::npos ? text.size() : end;
            const std::string_view comment = text.substr(at + 2, stop - at - 2);
            // A comment after "x," describes x; one inside an unfinished declaration, that declaration.
            if (!trim(current).empty()) {
                current_comment = std::string(comment);
            } else if (!parameters.empty()) {
                annotate(parameters.back(), comment);
            }
            at = line ? stop - 1 : stop + 1;
            continue;
        }
        if (c == '(') {
            ++depth;
        } else if (c == ')') {
            if (depth == 0) {
                finish();
                close = at;
                return parameters;
            }
            --depth;
        } else if (c == ',' && depth == 0) {
            finish();
            continue;
        }
        current.push_back(c);
    }
    close = text.size();
    return parameters;
}

}  // namespace

int KernelEntry::find(std::string_view parameter) const
{
    for (std::size_t i = 0; i < parameters.size(); ++i) {
        if (parameters[i].name == parameter) {
            return static_cast<int>(i);
        }
    }
    return -1;
}

std::vector<KernelEntry> declared_entries(std::string_view text)
{
    constexpr std::string_view marker = "extern \"C\" __global__ void ";
    constexpr std::string_view bounds = "__launch_bounds__";
    std::vector<KernelEntry> entries;
    for (std::size_t at = text.find(marker); at != std::string_view::npos; at = text.find(marker, at + 1)) {
        std::size_t begin = at + marker.size();
        if (text.substr(begin, bounds.size()) == bounds) {
            const std::size_t closing = text.find(')', begin);
            if (closing == std::string_view::npos) {
                break;
            }
            begin = closing + 1;
            while (begin < text.size() && std::isspace(static_cast<unsigned char>(text[begin]))) {
                ++begin;
            }
        }
        // Attribute macros without arguments (matmul_prefill.cu's NBITS_CLUSTER) may precede the name: an
        // identifier followed by another one.
        std::size_t end = begin;
        for (;;) {
            end = begin;
            while (end < text.size() && is_identifier_char(text[end])) {
                ++end;
            }
            std::size_t next = end;
            while (next < text.size() && std::isspace(static_cast<unsigned char>(text[next]))) {
                ++next;
            }
            if (end == begin || next == end || next >= text.size() || !is_identifier_char(text[next])) {
                break;
            }
            begin = next;
        }
        if (end < text.size() && text[end] == '(' && end > begin) {
            KernelEntry entry;
            entry.name = std::string(text.substr(begin, end - begin));
            std::size_t close = end;
            entry.parameters = parameters_at(text, end, close);
            entries.push_back(std::move(entry));
        }
    }
    return entries;
}

KernelSource::KernelSource(std::string name, std::string text, const std::vector<Header>& available,
                           std::vector<std::string> include_dirs)
    : name_(std::move(name)),
      text_(std::move(text)),
      include_dirs_(std::move(include_dirs)),
      declarations_(declared_entries(text_))
{
    for (const KernelEntry& declaration : declarations_) {
        // An entry may be declared once per preprocessor branch (fp32 and tensor-core bodies).
        if (std::find(entries_.begin(), entries_.end(), declaration.name) == entries_.end()) {
            entries_.push_back(declaration.name);
        }
    }
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

const KernelEntry* KernelSource::entry(std::string_view entry) const
{
    for (const KernelEntry& declaration : declarations_) {
        if (declaration.name == entry) {
            return &declaration;
        }
    }
    return nullptr;
}

std::vector<KernelSource> sources_from(const EmbeddedFileSet& files, const std::vector<std::string>& include_dirs)
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
            sources.emplace_back(std::move(name), std::string(file.text, file.size), headers, include_dirs);
        }
    }
    return sources;
}

}  // namespace nbits::jit
