#include "progress_line.hpp"

#include <fmt/format.h>

#include <cstdio>
#include <unistd.h>

namespace nbits::prewarm {

ProgressLine::ProgressLine(std::size_t total) : total_(total), terminal_(::isatty(STDERR_FILENO) == 1) {}

ProgressLine::~ProgressLine() { clear_line(); }

void ProgressLine::clear_line()
{
    if (shown_) {
        std::fputs("\r\033[K", stderr);
        shown_ = false;
    }
}

void ProgressLine::step(const std::string& text)
{
    ++done_;
    if (!terminal_) {
        return;
    }
    const int width = static_cast<int>(fmt::formatted_size("{}", total_));
    std::string line = fmt::format("[{:>{}}/{}] {}", done_, width, total_, text);
    if (line.size() > 100) {
        line = line.substr(0, 97) + "...";
    }
    std::fprintf(stderr, "\r\033[K%s", line.c_str());
    std::fflush(stderr);
    shown_ = true;
}

void ProgressLine::message(const std::string& text)
{
    clear_line();
    std::fprintf(stderr, "%s\n", text.c_str());
}

}  // namespace nbits::prewarm
