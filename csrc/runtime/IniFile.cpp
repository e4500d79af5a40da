#include "runtime/IniFile.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

namespace nrtsim {

namespace {

std::string trim(const std::string& s) {
  const auto begin = s.find_first_not_of(" \t\r");
  if (begin == std::string::npos) return "";
  const auto end = s.find_last_not_of(" \t\r");
  return s.substr(begin, end - begin + 1);
}

}  // namespace

const IniValue* IniSection::find(const std::string& key) const {
  for (const auto& [k, v] : entries) {
    if (k == key) return &v;
  }
  return nullptr;
}

std::vector<IniSection> parse_ini(const std::string& text, IniSyntax syntax) {
  std::vector<IniSection> sections;
  std::istringstream in(text);
  std::string raw;
  int line_no = 0;
  while (std::getline(in, raw)) {
    ++line_no;
    if (syntax.inline_comments) {
      const auto comment = raw.find_first_of("#;");
      if (comment != std::string::npos) raw.resize(comment);
    }
    const std::string line = trim(raw);
    if (line.empty() || line.front() == '#' || line.front() == ';') continue;
    if (line.front() == '[') {
      if (line.back() != ']') throw IniError(line_no, "unclosed section header '" + line + "'");
      IniSection s;
      s.name = trim(line.substr(1, line.size() - 2));
      s.line = line_no;
      for (const auto& other : sections) {
        if (other.name == s.name) throw IniError(line_no, "section [" + s.name + "] appears twice");
      }
      sections.push_back(std::move(s));
      continue;
    }
    const auto eq = line.find('=');
    if (eq == std::string::npos) throw IniError(line_no, "expected 'key = value', got '" + line + "'");
    if (sections.empty()) throw IniError(line_no, "'" + line + "' comes before any [section]");
    IniSection& section = sections.back();
    std::string key = trim(line.substr(0, eq));
    if (section.find(key) != nullptr) {
      throw IniError(line_no, "key '" + key + "' appears twice in [" + section.name + "]");
    }
    section.entries.emplace_back(std::move(key), IniValue{trim(line.substr(eq + 1)), line_no});
  }
  return sections;
}

std::string read_ini_file(const std::string& path) {
  std::ifstream file(path);
  if (!file) throw IniError(0, "cannot be read");
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

std::optional<double> parse_non_negative(const std::string& text) {
  char* end = nullptr;
  const double n = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || !(n >= 0)) return std::nullopt;
  return n;
}

}  // namespace nrtsim
