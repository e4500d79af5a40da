// The runtime's one reader of its INI data files (neuron_cores.ini, estimate.ini): [sections] of
// `key = value` lines and comment lines. It knows the syntax only; what a key means, and which
// keys a section must have, is the caller's (EngineModel, cost/CostData). Torch-free.
#pragma once

#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace nrtsim {

struct IniValue {
  std::string text;
  int line = 0;
};

struct IniSection {
  std::string name;
  int line = 0;
  std::vector<std::pair<std::string, IniValue>> entries;  // in file order; keys are unique

  const IniValue* find(const std::string& key) const;
};

// What is wrong with a file, and on which line (0: the file as a whole). Callers turn it into
// their own Error, naming the file's role and how to fix it.
class IniError : public std::runtime_error {
 public:
  IniError(int line, const std::string& what) : std::runtime_error(what), line_(line) {}
  int line() const { return line_; }

 private:
  int line_;
};

struct IniSyntax {
  // Lines whose first character is '#' or ';' are comments. With inline_comments, a '#' or ';'
  // anywhere starts one (engine model files); without, values may contain them (sources, URLs).
  bool inline_comments = false;
};

// The sections in file order. Throws IniError for an unclosed section header, a section or a key
// that appears twice, a line that is not `key = value`, or a key before any section.
std::vector<IniSection> parse_ini(const std::string& text, IniSyntax syntax = {});

// The whole file; throws IniError(0, "cannot be read").
std::string read_ini_file(const std::string& path);

// `text` as a non-negative decimal number (the only kind the data files hold), or nullopt.
std::optional<double> parse_non_negative(const std::string& text);

}  // namespace nrtsim
