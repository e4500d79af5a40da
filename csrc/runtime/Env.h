// The environment variables the runtime honours, and their parsers: every variable is read here,
// through get(), and parsed by one of these functions, whose errors name the variable, the value
// and what is accepted. Kept separate from the topology so that every kind of value (count, core
// list, size, switch, path) has one parser and one message, whoever reads it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace nrtsim::env {

// The variable's value, or nullopt when it is unset or empty.
std::optional<std::string> get(const char* name);

// "3" -> 3. Throws Error(kConfiguration) naming the variable on anything else.
int parse_int(std::string_view variable, std::string_view text);

// "0-1,4,6-7" -> {0,1,4,6,7}; sorted, duplicates rejected, a range must run upwards ("9-3" is
// refused as reversed). Throws naming the variable.
std::vector<int> parse_core_list(std::string_view variable, std::string_view text);

// A size: "512MiB", "1.5GiB", "64M", "2G", "4096B" (K/M/G/T are binary, as in MiB) or a bare
// byte count of at least 1 MiB ("1073741824"). A bare number below 1 MiB is refused, naming the
// reason: "512" meant as MiB would silently become 512 bytes. Throws naming the variable.
uint64_t parse_bytes(std::string_view variable, std::string_view text);

// An on/off switch: 1, true, yes, on / 0, false, no, off (any case). Anything else throws,
// listing these.
bool parse_switch(std::string_view variable, std::string_view text);

// A switch that may also be "auto" (nullopt): the error lists auto with the switch's words.
std::optional<bool> parse_auto_switch(std::string_view variable, std::string_view text);

// The parsed value of `variable`, or nullopt when it is unset or empty.
std::optional<bool> switch_value(const char* variable);
std::optional<uint64_t> bytes_value(const char* variable);
std::optional<int> int_value(const char* variable);

}  // namespace nrtsim::env
