// N-API bindings of the training half (native/train): the Trainer class.
#pragma once
#include <napi.h>

namespace mcprl {

// Adds Trainer to the addon's exports (called by InitAll in native/addon/addon.cc).
void init_train(Napi::Env env, Napi::Object exports);

}  // namespace mcprl
