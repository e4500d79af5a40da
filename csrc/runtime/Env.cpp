#include "runtime/Env.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>

#include "runtime/Error.h"

namespace nrtsim::env {

namespace {
[[noreturn]] void bad(std::string_view variable, std::string_view text, std::string_view expected) {
  throw Error(ErrorCode::kConfiguration, std::string(variable) + "='" + std::string(text) +
                                             "' is not valid: expected " + std::string(expected));
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

bool parse_nonnegative(std::string_view text, long long& out) {
  text = trim(text);
  if (text.empty() || text.size() > 18) return false;
  long long value = 0;
  for (char c : text) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
    value = value * 10 + (c - '0');
  }
  out = value;
  return true;
}
}  // namespace

std::optional<std::string> get(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return std::nullopt;
  return std::string(value);
}

int parse_int(std::string_view variable, std::string_view text) {
  long long value = 0;
  if (!parse_nonnegative(text, value) || value > 1'000'000) bad(variable, text, "a non-negative integer");
  return static_cast<int>(value);
}

std::vector<int> parse_core_list(std::string_view variable, std::string_view text) {
  static constexpr std::string_view kExpected =
      "a comma-separated list of core indices or ranges, e.g. '0', '0-3' or '0,2-3'";
  std::vector<int> cores;
  std::string_view rest = text;
  while (true) {
    const size_t comma = rest.find(',');
    std::string_view item = trim(rest.substr(0, comma));
    const size_t dash = item.find('-');
    long long first = 0, last = 0;
    if (dash == std::string_view::npos) {
      if (!parse_nonnegative(item, first)) bad(variable, text, kExpected);
      last = first;
    } else if (!parse_nonnegative(item.substr(0, dash), first) ||
               !parse_nonnegative(item.substr(dash + 1), last)) {
      bad(variable, text, kExpected);
    } else if (last < first) {
      bad(variable, text,
          std::string(kExpected) + "; the range '" + std::string(item) +
              "' is reversed: a range runs from the lower core to the higher, as '" +
              std::to_string(last) + "-" + std::to_string(first) + "'");
    }
    if (last > 100'000) bad(variable, text, kExpected);
    for (long long c = first; c <= last; ++c) cores.push_back(static_cast<int>(c));
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  std::sort(cores.begin(), cores.end());
  if (std::adjacent_find(cores.begin(), cores.end()) != cores.end()) {
    bad(variable, text, "each core to be listed once");
  }
  return cores;
}

uint64_t parse_bytes(std::string_view variable, std::string_view text) {
  static constexpr std::string_view kExpected =
      "a size with a unit such as '512MiB', '1.5GiB', '64M', '2G' or '4096B' (K, M, G, T are "
      "binary), or a bare byte count of at least 1 MiB such as '1073741824'";
  constexpr double kMiB = 1024.0 * 1024;
  std::string_view s = trim(text);
  size_t number_end = 0;
  while (number_end < s.size() &&
         (std::isdigit(static_cast<unsigned char>(s[number_end])) || s[number_end] == '.')) {
    ++number_end;
  }
  if (number_end == 0) bad(variable, text, kExpected);
  char* end = nullptr;
  const std::string number(s.substr(0, number_end));
  const double value = std::strtod(number.c_str(), &end);
  if (end != number.c_str() + number.size() || !(value > 0)) bad(variable, text, kExpected);

  std::string unit(trim(s.substr(number_end)));
  std::transform(unit.begin(), unit.end(), unit.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  double scale = 0;
  if (unit.empty()) {
    // A bare number is bytes; below 1 MiB it is far more likely a size in another unit (the
    // variable once read "512" as 512 bytes, giving a core 0 MB of HBM without a word).
    if (value < kMiB) {
      bad(variable, text,
          std::string(kExpected) + "; a bare number below 1 MiB is refused because it would be "
              "taken as bytes: write the unit, e.g. '" + number + "MiB' or '" + number + "B'");
    }
    scale = 1;
  } else if (unit == "b") scale = 1;
  else if (unit == "k" || unit == "kb" || unit == "kib") scale = 1024.0;
  else if (unit == "m" || unit == "mb" || unit == "mib") scale = kMiB;
  else if (unit == "g" || unit == "gb" || unit == "gib") scale = kMiB * 1024;
  else if (unit == "t" || unit == "tb" || unit == "tib") scale = kMiB * 1024 * 1024;
  else bad(variable, text, kExpected);
  const double bytes = std::floor(value * scale);
  if (bytes < 1 || bytes > 9.0e18) bad(variable, text, kExpected);
  return static_cast<uint64_t>(bytes);
}

namespace {
constexpr std::string_view kSwitchWords =
    "1, true, yes, on (to turn it on) or 0, false, no, off (to turn it off)";

std::string lower(std::string_view text) {
  std::string word(trim(text));
  std::transform(word.begin(), word.end(), word.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return word;
}

std::optional<bool> switch_word(const std::string& word) {
  if (word == "1" || word == "true" || word == "yes" || word == "on") return true;
  if (word == "0" || word == "false" || word == "no" || word == "off") return false;
  return std::nullopt;
}
}  // namespace

bool parse_switch(std::string_view variable, std::string_view text) {
  if (auto on = switch_word(lower(text))) return *on;
  bad(variable, text, "one of " + std::string(kSwitchWords));
}

std::optional<bool> parse_auto_switch(std::string_view variable, std::string_view text) {
  const std::string word = lower(text);
  if (word == "auto") return std::nullopt;
  if (auto on = switch_word(word)) return on;
  bad(variable, text, "auto (the default) or one of " + std::string(kSwitchWords));
}

std::optional<bool> switch_value(const char* variable) {
  if (auto v = get(variable)) return parse_switch(variable, *v);
  return std::nullopt;
}

std::optional<uint64_t> bytes_value(const char* variable) {
  if (auto v = get(variable)) return parse_bytes(variable, *v);
  return std::nullopt;
}

std::optional<int> int_value(const char* variable) {
  if (auto v = get(variable)) return parse_int(variable, *v);
  return std::nullopt;
}

}  // namespace nrtsim::env
