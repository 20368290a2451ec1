#include "json.h"

#include <set>
#include <vector>

#include "common.h"

namespace mcprl {

Json json_parse(const std::string& text, const std::string& what) {
  std::vector<std::set<std::string>> keys;  // the keys seen so far in each open object
  std::string dup;
  auto cb = [&](int /*depth*/, Json::parse_event_t ev, Json& parsed) {
    if (ev == Json::parse_event_t::object_start) keys.emplace_back();
    else if (ev == Json::parse_event_t::object_end) keys.pop_back();
    else if (ev == Json::parse_event_t::key && dup.empty() && !keys.back().insert(parsed.get<std::string>()).second)
      dup = parsed.get<std::string>();
    return true;
  };
  Json j;
  try {
    j = Json::parse(text, cb);
  } catch (const Json::parse_error& e) {
    std::string m = e.what();
    size_t p = m.find("] ");  // "[json.exception.parse_error.101] parse error at line 1, ..."
    FAIL(what + ": invalid JSON at byte " + std::to_string(e.byte > 0 ? e.byte - 1 : 0) + ": " +
         (p == std::string::npos ? m : m.substr(p + 2)));
  }
  if (!dup.empty()) FAIL(what + ": key '" + dup + "' appears twice in one object");
  return j;
}

}  // namespace mcprl
