// Parsing of the environment variables the runtime honours. Kept separate from the topology so
// that every variable has one parser with one error message.
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

// "0-1,4,6-7" -> {0,1,4,6,7}; sorted, duplicates rejected. Throws naming the variable.
std::vector<int> parse_core_list(std::string_view variable, std::string_view text);

// "1073741824", "512MiB", "1.5GiB", "64M", "2G" -> bytes. Throws naming the variable.
uint64_t parse_bytes(std::string_view variable, std::string_view text);

}  // namespace nrtsim::env
