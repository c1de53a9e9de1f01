#pragma once

#include <string>
#include <string_view>

namespace nbits::jit {

// One cached image per file:
//
//   NBITS JIT IMAGE\n
//   format 1\n
//   key <bytes of the key text>\n
//   image <bytes of the image>\n
//   sha256 <64 hex digits: SHA-256 of the image>\n
//   \n
//   <the key's canonical text><the image>
//
// The header is text so that `head` shows what a file holds. The full key
// travels with the image: a file renamed or copied to another key's name is
// recognised as foreign, never loaded as the wrong kernel.
inline constexpr int kImageFileFormat = 1;

// The format version is part of the name, so that nbits builds writing
// different formats into one directory never take each other's files for
// damaged ones.
inline constexpr std::string_view kImageFileSuffix = ".v1.nbimg";
inline constexpr std::string_view kTempFilePrefix = ".tmp-";
// ".claim-<image file name>": a process compiling that image (DiskCache::claim).
inline constexpr std::string_view kClaimFilePrefix = ".claim-";

// "<hex SHA-256 of the key text>.v1.nbimg"
std::string image_file_name(std::string_view key_text);
bool is_image_file_name(std::string_view name);
bool is_temp_file_name(std::string_view name);
bool is_claim_file_name(std::string_view name);

std::string encode_image_file(std::string_view key_text, std::string_view image);

// Views into the decoded bytes; `problem` says what is wrong (empty: sound).
// A foreign file keeps its key text, so that tools can say whose it is.
struct DecodedImageFile {
    std::string_view key_text;
    std::string_view image;
    std::string problem;
    bool ok() const { return problem.empty(); }
};

// Never throws and never reads out of bounds, whatever `bytes` holds. Only
// what encode_image_file writes is accepted: a file it decodes re-encodes to
// the same bytes.
DecodedImageFile decode_image_file(std::string_view bytes);

// decode_image_file, and the key it holds must be the one its file name
// stands for: a file renamed or copied into another key's place is foreign.
DecodedImageFile check_image_file(std::string_view bytes, std::string_view file_name);

}  // namespace nbits::jit
