#pragma once

// A plain-text table with aligned columns, for tool output read by people.

#include <algorithm>
#include <cstddef>
#include <string>
#include <vector>

namespace nbits::tools {

class TextTable {
public:
    enum class Align { Left, Right };

    void column(std::string header, Align align = Align::Right)
    {
        headers_.push_back(std::move(header));
        aligns_.push_back(align);
    }

    // Missing trailing cells print empty; extra ones are an error of the caller and are dropped.
    void row(std::vector<std::string> cells)
    {
        cells.resize(headers_.size());
        rows_.push_back(std::move(cells));
    }

    std::string render() const
    {
        std::vector<std::size_t> widths(headers_.size());
        for (std::size_t c = 0; c < headers_.size(); ++c) {
            widths[c] = headers_[c].size();
            for (const std::vector<std::string>& cells : rows_) {
                widths[c] = std::max(widths[c], cells[c].size());
            }
        }
        std::string text = line(headers_, widths);
        std::vector<std::string> rule;
        for (std::size_t width : widths) {
            rule.emplace_back(width, '-');
        }
        text += line(rule, widths);
        for (const std::vector<std::string>& cells : rows_) {
            text += line(cells, widths);
        }
        return text;
    }

private:
    std::string line(const std::vector<std::string>& cells, const std::vector<std::size_t>& widths) const
    {
        std::string text;
        for (std::size_t c = 0; c < cells.size(); ++c) {
            const std::string padding(widths[c] - cells[c].size(), ' ');
            if (c > 0) {
                text += "  ";
            }
            text += aligns_[c] == Align::Right ? padding + cells[c] : cells[c] + padding;
        }
        // No trailing blanks from a left-aligned last column.
        while (!text.empty() && text.back() == ' ') {
            text.pop_back();
        }
        return text + "\n";
    }

    std::vector<std::string> headers_;
    std::vector<Align> aligns_;
    std::vector<std::vector<std::string>> rows_;
};

}  // namespace nbits::tools
