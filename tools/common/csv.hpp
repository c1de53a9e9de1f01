#pragma once

// RFC 4180 lines for tool output read by spreadsheets and scripts.

#include <string>
#include <vector>

namespace nbits::tools {

// A field quoted only when it holds a comma, a quote or a line break.
inline std::string csv_field(const std::string& text)
{
    if (text.find_first_of(",\"\r\n") == std::string::npos) {
        return text;
    }
    std::string quoted = "\"";
    for (char c : text) {
        quoted += c;
        if (c == '"') {
            quoted += '"';
        }
    }
    return quoted + "\"";
}

inline std::string csv_line(const std::vector<std::string>& cells)
{
    std::string line;
    for (std::size_t i = 0; i < cells.size(); ++i) {
        line += (i == 0 ? "" : ",") + csv_field(cells[i]);
    }
    return line + "\n";
}

}  // namespace nbits::tools
