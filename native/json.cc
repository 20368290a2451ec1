#include "json.h"

#include <cstdlib>

#include "common.h"

namespace mcprl {

const Json* Json::get(const std::string& key) const {
  for (auto& kv : obj)
    if (kv.first == key) return &kv.second;
  return nullptr;
}

namespace {

struct Parser {
  const std::string& s;
  const std::string& what;
  size_t i = 0;
  int depth = 0;

  [[noreturn]] void bad(const std::string& m) { FAIL(what + ": invalid JSON at byte " + std::to_string(i) + ": " + m); }
  void ws() { while (i < s.size() && (s[i] == ' ' || s[i] == '\n' || s[i] == '\r' || s[i] == '\t')) ++i; }
  void expect(char c) {
    ws();
    if (i >= s.size() || s[i] != c) bad(std::string("expected '") + c + "'");
    ++i;
  }
  std::string string() {
    expect('"');
    std::string out;
    while (true) {
      if (i >= s.size()) bad("unterminated string");
      char c = s[i++];
      if (c == '"') break;
      if (c != '\\') { out += c; continue; }
      if (i >= s.size()) bad("unterminated escape");
      char e = s[i++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          if (i + 4 > s.size()) bad("short \\u escape");
          unsigned cp = (unsigned)std::strtoul(s.substr(i, 4).c_str(), nullptr, 16);
          i += 4;
          // UTF-8 encode (surrogate pairs are not needed for tensor names; keep them as-is).
          if (cp < 0x80) out += (char)cp;
          else if (cp < 0x800) { out += (char)(0xC0 | (cp >> 6)); out += (char)(0x80 | (cp & 0x3F)); }
          else { out += (char)(0xE0 | (cp >> 12)); out += (char)(0x80 | ((cp >> 6) & 0x3F)); out += (char)(0x80 | (cp & 0x3F)); }
          break;
        }
        default: bad("bad escape");
      }
    }
    return out;
  }
  Json value() {
    ws();
    if (i >= s.size()) bad("unexpected end");
    if (++depth > 64) bad("nesting too deep");
    Json v;
    char c = s[i];
    if (c == '{') {
      v.kind = Json::Object;
      ++i;
      ws();
      if (i < s.size() && s[i] == '}') { ++i; }
      else {
        while (true) {
          std::string k = string();
          expect(':');
          v.obj.emplace_back(std::move(k), value());
          ws();
          if (i < s.size() && s[i] == ',') { ++i; continue; }
          expect('}');
          break;
        }
      }
    } else if (c == '[') {
      v.kind = Json::Array;
      ++i;
      ws();
      if (i < s.size() && s[i] == ']') { ++i; }
      else {
        while (true) {
          v.arr.push_back(value());
          ws();
          if (i < s.size() && s[i] == ',') { ++i; continue; }
          expect(']');
          break;
        }
      }
    } else if (c == '"') {
      v.kind = Json::String;
      v.str = string();
    } else if (s.compare(i, 4, "true") == 0) { v.kind = Json::Bool; v.b = true; i += 4; }
    else if (s.compare(i, 5, "false") == 0) { v.kind = Json::Bool; i += 5; }
    else if (s.compare(i, 4, "null") == 0) { i += 4; }
    else {
      const char* start = s.c_str() + i;
      char* end = nullptr;
      v.num = std::strtod(start, &end);
      if (end == start) bad("unexpected character");
      v.kind = Json::Number;
      i += (size_t)(end - start);
    }
    --depth;
    return v;
  }
};

}  // namespace

Json json_parse(const std::string& text, const std::string& what) {
  Parser p{text, what};
  Json v = p.value();
  p.ws();
  if (p.i != text.size()) p.bad("trailing characters");
  return v;
}

}  // namespace mcprl
