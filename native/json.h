// A small JSON reader for safetensors headers (objects of strings, numbers and arrays).
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace mcprl {

struct Json {
  enum Kind { Null, Bool, Number, String, Array, Object } kind = Null;
  bool b = false;
  double num = 0.0;
  std::string str;
  std::vector<Json> arr;
  std::vector<std::pair<std::string, Json>> obj;  // insertion order kept
  const Json* get(const std::string& key) const;
};

// Parses text; throws EngineError with `what` (e.g. the file name) and the byte offset on bad input.
Json json_parse(const std::string& text, const std::string& what);

}  // namespace mcprl
