#pragma once

// A small, self-contained fuzzing driver for libFuzzer-shaped targets
// (`void(const std::uint8_t*, std::size_t)`), for machines that build with
// g++ and have no libFuzzer: it mutates a corpus of valid inputs with a
// seeded generator, calls the target, and on a finding (an exception, a
// fuzz::Finding, a crash signal, a sanitizer report, or a call that hangs)
// writes the input to a reproducer file and exits non-zero.
//
// Runs are deterministic: a seed and a corpus give the same inputs, so
// "seed S, call N" reproduces a finding even without the file. A target
// program is one call:
//
//   int main(int argc, char** argv)
//   {
//       return nbits::fuzz::main_with(argc, argv, "cache", make_corpus, my_target, dictionary);
//   }
//
// Its command line: --seconds S (the whole budget, split evenly over the
// seeds), --seed LIST (numbers, and `time` for one derived from the clock),
// --runs N (a bound on calls), --reproducer-dir DIR, --max-size BYTES,
// --timeout S (one call longer than this is a hang), --replay FILE (run the
// target on a saved input once and exit).

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <fcntl.h>
#include <fstream>
#include <functional>
#include <iterator>
#include <mutex>
#include <stdexcept>
#include <string>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>
#include <vector>

// Present in sanitizer builds only: called when ASan ends the process.
extern "C" void __sanitizer_set_death_callback(void (*callback)(void)) __attribute__((weak));

// GCC links UBSan's runtime apart from ASan's, so ASan's death callback never
// hears of a UBSan report: UBSan aborts instead, and the SIGABRT handler
// below writes the reproducer. (UBSAN_OPTIONS still overrides this.)
extern "C" __attribute__((weak)) const char* __ubsan_default_options()
{
    return "abort_on_error=1:print_stacktrace=1";
}

namespace nbits::fuzz {

using Target = std::function<void(const std::uint8_t* data, std::size_t size)>;

// What a target throws when an input breaks one of its invariants.
class Finding : public std::runtime_error {
public:
    explicit Finding(const std::string& what) : std::runtime_error(what) {}
};

inline void require(bool condition, const char* invariant)
{
    if (!condition) {
        throw Finding(invariant);
    }
}

struct Options {
    std::string name = "fuzz";                 // names the reproducer files
    std::vector<std::uint64_t> seeds = {1};    // each runs an equal share of the budget
    double seconds = 10.0;                     // the whole time budget
    std::uint64_t runs = 0;                    // a bound on calls over all seeds; 0: the time alone
    std::string reproducer_dir = ".";
    std::size_t max_size = 64 * 1024;          // mutated inputs are cut to this
    double call_timeout_seconds = 20.0;        // a longer call is reported as a hang
    std::vector<std::string> dictionary;       // tokens mutations insert (format keywords, numbers)
    std::vector<std::string> replay;           // inputs to run once each instead of fuzzing
};

struct Result {
    std::uint64_t calls = 0;
    std::vector<std::pair<std::uint64_t, std::uint64_t>> calls_per_seed;  // (seed, calls)
    double seconds = 0.0;
    bool failed = false;
    std::string reproducer;  // the file written for the finding
};

namespace detail {

// splitmix64: small, fast, and the same sequence on every platform.
class Random {
public:
    explicit Random(std::uint64_t seed) : state_(seed) {}
    std::uint64_t next()
    {
        std::uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        return z ^ (z >> 31);
    }
    // Uniform in [0, bound); 0 for a bound of 0.
    std::size_t below(std::size_t bound) { return bound == 0 ? 0 : static_cast<std::size_t>(next() % bound); }
    bool one_in(std::size_t n) { return below(n) == 0; }

private:
    std::uint64_t state_;
};

// The input being run, for the signal and sanitizer handlers, which may only
// use async-signal-safe calls: the path is composed into a fixed buffer.
struct Current {
    const std::uint8_t* data = nullptr;
    std::size_t size = 0;
    std::uint64_t seed = 0;
    std::atomic<std::uint64_t> call{0};
    std::atomic<bool> in_call{false};
    char directory[1024] = {};
    char name[128] = {};
};

inline Current& current()
{
    static Current state;
    return state;
}

inline std::size_t append_text(char* buffer, std::size_t at, std::size_t capacity, const char* text)
{
    while (*text != '\0' && at + 1 < capacity) {
        buffer[at++] = *text++;
    }
    buffer[at] = '\0';
    return at;
}

inline std::size_t append_number(char* buffer, std::size_t at, std::size_t capacity, std::uint64_t value)
{
    char digits[24];
    std::size_t count = 0;
    do {
        digits[count++] = static_cast<char>('0' + value % 10);
        value /= 10;
    } while (value != 0);
    while (count > 0 && at + 1 < capacity) {
        buffer[at++] = digits[--count];
    }
    buffer[at] = '\0';
    return at;
}

// "<dir>/<name>-<kind>-seed<S>-call<N>.bin", written with the current input;
// async-signal-safe. Returns whether the file was written.
inline bool write_reproducer(const char* kind, char* path, std::size_t capacity)
{
    Current& c = current();
    std::size_t at = 0;
    at = append_text(path, at, capacity, c.directory);
    at = append_text(path, at, capacity, "/");
    at = append_text(path, at, capacity, c.name);
    at = append_text(path, at, capacity, "-");
    at = append_text(path, at, capacity, kind);
    at = append_text(path, at, capacity, "-seed");
    at = append_number(path, at, capacity, c.seed);
    at = append_text(path, at, capacity, "-call");
    at = append_number(path, at, capacity, c.call.load());
    append_text(path, at, capacity, ".bin");
    const int fd = ::open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        return false;
    }
    std::size_t done = 0;
    while (done < c.size) {
        const ssize_t put = ::write(fd, c.data + done, c.size - done);
        if (put <= 0) {
            break;
        }
        done += static_cast<std::size_t>(put);
    }
    ::close(fd);
    return done == c.size;
}

inline void say(const char* text) { [[maybe_unused]] const ssize_t ignored = ::write(STDERR_FILENO, text, std::strlen(text)); }

inline void report_abnormal_end(const char* kind)
{
    static char path[1400];
    if (!current().in_call.load()) {
        return;  // not inside the target: nothing to reproduce
    }
    say("fuzz: FINDING (");
    say(kind);
    say(") in the target; reproducer: ");
    say(write_reproducer(kind, path, sizeof(path)) ? path : "(could not be written)");
    say("\n");
}

inline void on_sanitizer_death() { report_abnormal_end("sanitizer"); }

inline void on_crash_signal(int signal_number)
{
    report_abnormal_end(signal_number == SIGABRT ? "abort" : "crash");
    ::signal(signal_number, SIG_DFL);
    ::raise(signal_number);
}

inline void install_handlers()
{
    if (__sanitizer_set_death_callback != nullptr) {
        __sanitizer_set_death_callback(on_sanitizer_death);
    }
    // Without sanitizers a crash still leaves its input behind. (With them,
    // ASan handles SIGSEGV and reaches the death callback instead.)
    for (int signal_number : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) {
        struct sigaction action {};
        struct sigaction previous {};
        ::sigaction(signal_number, nullptr, &previous);
        if (previous.sa_handler != SIG_DFL) {
            continue;  // a sanitizer's handler is in place
        }
        action.sa_handler = on_crash_signal;
        ::sigemptyset(&action.sa_mask);
        ::sigaction(signal_number, &action, nullptr);
    }
}

// Reports a call that runs past the timeout as a hang, and ends the process.
class Watchdog {
public:
    explicit Watchdog(double timeout_seconds) : timeout_(timeout_seconds)
    {
        thread_ = std::thread([this] { watch(); });
    }
    ~Watchdog()
    {
        {
            std::lock_guard<std::mutex> lock(mutex_);
            stop_ = true;
        }
        wake_.notify_all();
        thread_.join();
    }
    Watchdog(const Watchdog&) = delete;
    Watchdog& operator=(const Watchdog&) = delete;

private:
    void watch()
    {
        std::unique_lock<std::mutex> lock(mutex_);
        std::uint64_t seen_call = ~0ull;
        auto seen_at = std::chrono::steady_clock::now();
        while (!wake_.wait_for(lock, std::chrono::milliseconds(200), [this] { return stop_; })) {
            const std::uint64_t call = current().call.load();
            const auto now = std::chrono::steady_clock::now();
            if (call != seen_call || !current().in_call.load()) {
                seen_call = call;
                seen_at = now;
            } else if (std::chrono::duration<double>(now - seen_at).count() > timeout_) {
                report_abnormal_end("hang");
                std::fflush(nullptr);
                ::_exit(1);
            }
        }
    }

    double timeout_;
    std::mutex mutex_;
    std::condition_variable wake_;
    bool stop_ = false;
    std::thread thread_;
};

inline const std::vector<std::string>& interesting_numbers()
{
    static const std::vector<std::string> numbers = {
        "0", "1", "7", "9", "10", "63", "64", "65", "127", "128", "255", "256", "4096", "65535", "65536",
        "2147483647", "2147483648", "4294967295", "4294967296", "9223372036854775807", "9223372036854775808",
        "18446744073709551615", "18446744073709551616", "99999999999999999999", "-1", "+1", "01", "1e3", " 1"};
    return numbers;
}

inline std::string mutate(std::string input, Random& random, const std::vector<std::string>& corpus,
                          const std::vector<std::string>& dictionary, std::size_t max_size)
{
    const int steps = 1 + static_cast<int>(random.below(4));
    for (int step = 0; step < steps; ++step) {
        const std::size_t size = input.size();
        const std::size_t at = random.below(size + 1);
        switch (random.below(11)) {
        case 0:  // flip one bit
            if (size > 0) {
                input[random.below(size)] ^= static_cast<char>(1u << random.below(8));
            }
            break;
        case 1:  // one byte, any value
            if (size > 0) {
                input[random.below(size)] = static_cast<char>(random.below(256));
            }
            break;
        case 2: {  // one byte, a value parsers care about
            static const char special[] = {0, '\n', ' ', '0', '9', '-', '+', '\x7f', '\x80', '\xff', 'a', '\r'};
            if (size > 0) {
                input[random.below(size)] = special[random.below(sizeof(special))];
            }
            break;
        }
        case 3:  // delete a range
            if (size > 0) {
                input.erase(random.below(size), 1 + random.below(std::min<std::size_t>(size, 32)));
            }
            break;
        case 4: {  // insert random bytes
            std::string bytes(1 + random.below(16), '\0');
            for (char& c : bytes) {
                c = static_cast<char>(random.below(256));
            }
            input.insert(at, bytes);
            break;
        }
        case 5:  // duplicate a range somewhere else
            if (size > 0) {
                const std::size_t from = random.below(size);
                const std::size_t length = 1 + random.below(std::min<std::size_t>(size - from, 64));
                input.insert(random.below(size + 1), input.substr(from, length));
            }
            break;
        case 6:  // truncate
            input.resize(random.below(size + 1));
            break;
        case 7:  // a dictionary token, inserted or written over
            if (!dictionary.empty()) {
                const std::string& token = dictionary[random.below(dictionary.size())];
                if (random.one_in(2)) {
                    input.insert(at, token);
                } else {
                    input.replace(std::min(at, size), token.size(), token);
                }
            }
            break;
        case 8: {  // a decimal number replaced by another
            std::vector<std::size_t> starts;
            for (std::size_t i = 0; i < size; ++i) {
                if (input[i] >= '0' && input[i] <= '9' && (i == 0 || input[i - 1] < '0' || input[i - 1] > '9')) {
                    starts.push_back(i);
                }
            }
            if (!starts.empty()) {
                const std::size_t start = starts[random.below(starts.size())];
                std::size_t end = start;
                while (end < size && input[end] >= '0' && input[end] <= '9') {
                    ++end;
                }
                std::string number;
                if (random.one_in(2)) {
                    number = interesting_numbers()[random.below(interesting_numbers().size())];
                } else {
                    const long long old = std::atoll(input.substr(start, std::min<std::size_t>(end - start, 18)).c_str());
                    number = std::to_string(old + static_cast<long long>(random.below(5)) - 2);
                }
                input.replace(start, end - start, number);
            }
            break;
        }
        case 9:  // splice: this input's head, another's tail
            if (!corpus.empty()) {
                const std::string& other = corpus[random.below(corpus.size())];
                input = input.substr(0, at) + other.substr(random.below(other.size() + 1));
            }
            break;
        default: {  // append bytes
            std::string bytes(1 + random.below(32), '\0');
            for (char& c : bytes) {
                c = static_cast<char>(random.below(256));
            }
            input += bytes;
            break;
        }
        }
    }
    if (input.size() > max_size) {
        input.resize(max_size);
    }
    return input;
}

inline bool call_target(const Target& target, const std::string& input, std::string& what)
{
    Current& c = current();
    c.data = reinterpret_cast<const std::uint8_t*>(input.data());
    c.size = input.size();
    c.in_call.store(true);
    bool ok = true;
    try {
        target(c.data, c.size);
    } catch (const Finding& finding) {
        what = std::string("invariant broken: ") + finding.what();
        ok = false;
    } catch (const std::exception& error) {
        what = std::string("exception escaped the target: ") + error.what();
        ok = false;
    } catch (...) {
        what = "a non-standard exception escaped the target";
        ok = false;
    }
    c.in_call.store(false);
    return ok;
}

inline std::vector<std::uint64_t> parse_seeds(const std::string& text)
{
    std::vector<std::uint64_t> seeds;
    std::size_t start = 0;
    while (start <= text.size()) {
        std::size_t end = text.find(',', start);
        if (end == std::string::npos) {
            end = text.size();
        }
        const std::string item = text.substr(start, end - start);
        if (item == "time") {
            seeds.push_back(static_cast<std::uint64_t>(
                std::chrono::system_clock::now().time_since_epoch().count()));
        } else if (!item.empty()) {
            char* stop = nullptr;
            const unsigned long long value = std::strtoull(item.c_str(), &stop, 10);
            if (stop == item.c_str() || *stop != '\0') {
                throw std::invalid_argument("--seed: '" + item + "' is neither a number nor 'time'");
            }
            seeds.push_back(value);
        }
        start = end + 1;
    }
    if (seeds.empty()) {
        throw std::invalid_argument("--seed: no seed given, e.g. --seed 1,2,3,time");
    }
    return seeds;
}

}  // namespace detail

// Parses the driver's command line over `options` (see the top of this file).
// Throws std::invalid_argument naming the flag.
inline Options parse_options(int argc, char** argv, Options options)
{
    for (int i = 1; i < argc; ++i) {
        const std::string flag = argv[i];
        if (flag == "-h" || flag == "--help") {
            throw std::invalid_argument(
                "usage: " + options.name +
                "_fuzz [--seconds S] [--seed LIST] [--runs N] [--reproducer-dir DIR] [--max-size BYTES] "
                "[--timeout S] [--replay FILE]\n  --seed takes numbers and 'time' (a seed from the clock), e.g. "
                "--seed 1,2,3,time; the budget is split evenly over the seeds");
        }
        if (i + 1 >= argc) {
            throw std::invalid_argument(flag + " needs a value (see --help)");
        }
        const std::string value = argv[++i];
        const auto number = [&] {
            char* end = nullptr;
            const double parsed = std::strtod(value.c_str(), &end);
            if (end == value.c_str() || *end != '\0' || parsed < 0) {
                throw std::invalid_argument(flag + ": '" + value + "' is not a non-negative number");
            }
            return parsed;
        };
        if (flag == "--seconds") {
            options.seconds = number();
        } else if (flag == "--seed") {
            options.seeds = detail::parse_seeds(value);
        } else if (flag == "--runs") {
            options.runs = static_cast<std::uint64_t>(number());
        } else if (flag == "--reproducer-dir") {
            options.reproducer_dir = value;
        } else if (flag == "--max-size") {
            options.max_size = static_cast<std::size_t>(number());
        } else if (flag == "--timeout") {
            options.call_timeout_seconds = number();
        } else if (flag == "--replay") {
            options.replay.push_back(value);
        } else {
            throw std::invalid_argument("unknown option '" + flag + "' (see --help)");
        }
    }
    return options;
}

// Fuzzes `target` from `corpus` as `options` say; prints what it did.
inline Result run(const Target& target, const std::vector<std::string>& corpus, const Options& options)
{
    Result result;
    detail::Current& c = detail::current();
    std::snprintf(c.directory, sizeof(c.directory), "%s", options.reproducer_dir.c_str());
    std::snprintf(c.name, sizeof(c.name), "%s", options.name.c_str());
    ::mkdir(options.reproducer_dir.c_str(), 0755);
    detail::install_handlers();
    detail::Watchdog watchdog(options.call_timeout_seconds);

    auto finding = [&](const std::string& what) {
        static char path[1400];
        std::fflush(stdout);
        result.failed = true;
        result.reproducer = detail::write_reproducer("finding", path, sizeof(path)) ? path : "(could not be written)";
        std::fprintf(stderr, "%s: FINDING at seed %llu, call %llu: %s\nreproducer: %s (rerun: --replay %s)\n",
                     options.name.c_str(), static_cast<unsigned long long>(c.seed),
                     static_cast<unsigned long long>(c.call.load()), what.c_str(), result.reproducer.c_str(),
                     result.reproducer.c_str());
    };

    const auto start = std::chrono::steady_clock::now();
    if (!options.replay.empty()) {
        for (const std::string& file : options.replay) {
            std::ifstream in(file, std::ios::binary);
            if (!in) {
                throw std::invalid_argument("--replay: cannot read " + file);
            }
            const std::string input((std::istreambuf_iterator<char>(in)), {});
            std::string what;
            c.call.fetch_add(1);
            ++result.calls;
            if (!detail::call_target(target, input, what)) {
                finding(what);
                break;
            }
        }
        result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        return result;
    }

    const double share = options.seconds / static_cast<double>(options.seeds.size());
    const std::uint64_t runs_share = (options.runs + options.seeds.size() - 1) / options.seeds.size();
    for (std::uint64_t seed : options.seeds) {
        c.seed = seed;
        c.call.store(0);
        detail::Random random(seed);
        const auto seed_start = std::chrono::steady_clock::now();
        const auto deadline = seed_start + std::chrono::duration<double>(share);
        std::uint64_t calls = 0;
        std::string previous;
        while (!result.failed) {
            std::string input;
            // The corpus itself first: every valid input must pass unchanged.
            if (calls < corpus.size()) {
                input = corpus[calls];
            } else {
                if ((options.runs > 0 && calls >= runs_share) ||
                    ((calls & 15) == 0 && std::chrono::steady_clock::now() >= deadline)) {
                    break;
                }
                // Mostly a fresh mutation of a corpus input; sometimes a
                // mutation of the last input, to go deeper.
                const bool deeper = !previous.empty() && random.one_in(4);
                input = detail::mutate(deeper ? previous : corpus[random.below(corpus.size())], random, corpus,
                                       options.dictionary, options.max_size);
            }
            c.call.store(calls);
            std::string what;
            if (!detail::call_target(target, input, what)) {
                finding(what);
            }
            ++calls;
            previous = std::move(input);
        }
        result.calls += calls;
        result.calls_per_seed.emplace_back(seed, calls);
        std::printf("%s: seed %llu: %llu calls in %.1f s\n", options.name.c_str(),
                     static_cast<unsigned long long>(seed), static_cast<unsigned long long>(calls),
                     std::chrono::duration<double>(std::chrono::steady_clock::now() - seed_start).count());
        if (result.failed) {
            break;
        }
    }
    result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return result;
}

// The whole program of a fuzz target: options, corpus, run, summary, exit code.
inline int main_with(int argc, char** argv, const std::string& name,
                     const std::function<std::vector<std::string>()>& make_corpus, const Target& target,
                     std::vector<std::string> dictionary = {})
{
    Options options;
    options.name = name;
    options.dictionary = std::move(dictionary);
    try {
        options = parse_options(argc, argv, options);
        const std::vector<std::string> corpus = make_corpus();
        if (corpus.empty()) {
            std::fprintf(stderr, "%s: the corpus is empty; nothing to mutate\n", name.c_str());
            return 2;
        }
        const Result result = run(target, corpus, options);
        std::printf("%s: %llu calls over %zu seed(s) in %.1f s (%.0f calls/s), corpus %zu input(s): %s\n",
                    name.c_str(), static_cast<unsigned long long>(result.calls),
                    options.replay.empty() ? options.seeds.size() : std::size_t{0}, result.seconds,
                    result.seconds > 0 ? static_cast<double>(result.calls) / result.seconds : 0.0, corpus.size(),
                    result.failed ? "1 finding" : "0 findings");
        return result.failed ? 1 : 0;
    } catch (const std::invalid_argument& error) {
        std::fprintf(stderr, "%s: %s\n", name.c_str(), error.what());
        return 2;
    }
}

}  // namespace nbits::fuzz
