#include "jit/cache_file_format.hpp"

#include "jit/sha256.hpp"

#include <fmt/format.h>

#include <charconv>
#include <cstdint>

namespace nbits::jit {
namespace {

constexpr std::string_view kMagicLine = "NBITS JIT IMAGE";

bool ends_with(std::string_view text, std::string_view suffix)
{
    return text.size() >= suffix.size() && text.substr(text.size() - suffix.size()) == suffix;
}

// Reads "<label> <value>\n" from the front of `rest`; false when the line is
// missing, unterminated or labelled otherwise.
bool take_line(std::string_view& rest, std::string_view label, std::string_view& value)
{
    const std::size_t end = rest.find('\n');
    if (end == std::string_view::npos) {
        return false;
    }
    std::string_view line = rest.substr(0, end);
    rest.remove_prefix(end + 1);
    if (label.empty()) {
        value = line;
        return true;
    }
    if (line.size() <= label.size() || line.substr(0, label.size()) != label || line[label.size()] != ' ') {
        return false;
    }
    value = line.substr(label.size() + 1);
    return true;
}

bool parse_size(std::string_view text, std::uint64_t& value)
{
    // Canonical decimal only: "07" is not a size nbits writes.
    if (text.empty() || text.size() > 19 || (text.size() > 1 && text[0] == '0')) {
        return false;
    }
    const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
    return error == std::errc() && end == text.data() + text.size();
}

DecodedImageFile failure(std::string problem)
{
    DecodedImageFile decoded;
    decoded.problem = std::move(problem);
    return decoded;
}

}  // namespace

std::string image_file_name(std::string_view key_text)
{
    return sha256_hex(key_text) + std::string(kImageFileSuffix);
}

bool is_image_file_name(std::string_view name) { return ends_with(name, kImageFileSuffix); }

bool is_temp_file_name(std::string_view name) { return name.substr(0, kTempFilePrefix.size()) == kTempFilePrefix; }

bool is_claim_file_name(std::string_view name)
{
    return name.substr(0, kClaimFilePrefix.size()) == kClaimFilePrefix;
}

std::string encode_image_file(std::string_view key_text, std::string_view image)
{
    std::string file = fmt::format("{}\nformat {}\nkey {}\nimage {}\nsha256 {}\n\n", kMagicLine, kImageFileFormat,
                                   key_text.size(), image.size(), sha256_hex(image));
    file.append(key_text);
    file.append(image);
    return file;
}

DecodedImageFile decode_image_file(std::string_view bytes)
{
    std::string_view rest = bytes;
    std::string_view value;
    if (!take_line(rest, "", value) || value != kMagicLine) {
        return failure("not an nbits image file (no magic line)");
    }
    if (!take_line(rest, "format", value)) {
        return failure("damaged header (format line)");
    }
    if (value != std::to_string(kImageFileFormat)) {
        return failure(fmt::format("format {} where {} was expected", value, kImageFileFormat));
    }
    std::uint64_t key_size = 0;
    std::uint64_t image_size = 0;
    std::string_view checksum;
    if (!take_line(rest, "key", value) || !parse_size(value, key_size) || !take_line(rest, "image", value) ||
        !parse_size(value, image_size) || !take_line(rest, "sha256", checksum) || checksum.size() != 64 ||
        !take_line(rest, "", value) || !value.empty()) {
        return failure("damaged header");
    }
    if (key_size > rest.size() || image_size != rest.size() - key_size) {
        return failure(fmt::format("{} bytes follow the header where {} were recorded (truncated or extended)",
                                   rest.size(), key_size + image_size));
    }
    DecodedImageFile decoded;
    decoded.key_text = rest.substr(0, key_size);
    decoded.image = rest.substr(key_size);
    if (sha256_hex(decoded.image) != checksum) {
        return failure("the image does not match its SHA-256 checksum (damaged)");
    }
    return decoded;
}

DecodedImageFile check_image_file(std::string_view bytes, std::string_view file_name)
{
    DecodedImageFile decoded = decode_image_file(bytes);
    if (decoded.ok() && image_file_name(decoded.key_text) != file_name) {
        decoded.problem = "holds the image of another key (a foreign or damaged file)";
    }
    return decoded;
}

}  // namespace nbits::jit
