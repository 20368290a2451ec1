// JSON through Debian's nlohmann-json3-dev (a build requirement: native/build.cjs says how to install it).
// Native code reads JSON only where the data sits next to the tensors it loads: safetensors headers and
// model.safetensors.index.json. Model and adapter configs are read in TypeScript and passed in.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

namespace mcprl {

using Json = nlohmann::ordered_json;  // keeps the file's key order

// Parses text. Throws EngineError "<what>: invalid JSON at byte N: ..." on bad input (including a malformed
// \u escape) and "<what>: key '<k>' appears twice in one object" for duplicate keys, which nlohmann would
// otherwise resolve silently to the last value.
Json json_parse(const std::string& text, const std::string& what);

}  // namespace mcprl
