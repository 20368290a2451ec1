#include "napi_util.h"

#include <algorithm>

namespace mcprl {

namespace {

class PromiseWorker : public Napi::AsyncWorker {
 public:
  PromiseWorker(Napi::Env env, std::function<void()> work, std::function<Napi::Value(Napi::Env)> done)
      : Napi::AsyncWorker(env), deferred_(Napi::Promise::Deferred::New(env)), work_(std::move(work)), done_(std::move(done)) {}
  void Execute() override {
    try {
      work_();
    } catch (const std::exception& e) {
      SetError(e.what());
    } catch (...) {
      SetError("unknown native error");
    }
  }
  void OnOK() override {
    try {
      deferred_.Resolve(done_ ? done_(Env()) : Env().Undefined());
    } catch (const Napi::Error& e) {
      deferred_.Reject(e.Value());
    } catch (const std::exception& e) {
      deferred_.Reject(Napi::Error::New(Env(), e.what()).Value());
    }
  }
  void OnError(const Napi::Error& e) override { deferred_.Reject(e.Value()); }
  Napi::Promise Promise() { return deferred_.Promise(); }

 private:
  Napi::Promise::Deferred deferred_;
  std::function<void()> work_;
  std::function<Napi::Value(Napi::Env)> done_;
};

}  // namespace

Napi::Value run_async(Napi::Env env, std::function<void()> work, std::function<Napi::Value(Napi::Env)> done) {
  auto* w = new PromiseWorker(env, std::move(work), std::move(done));
  Napi::Promise p = w->Promise();
  w->Queue();
  return p;
}

std::vector<int32_t> to_i32(const Napi::Value& v, const char* what) {
  if (!v.IsTypedArray() || v.As<Napi::TypedArray>().TypedArrayType() != napi_int32_array)
    throw Napi::TypeError::New(v.Env(), std::string(what) + " must be an Int32Array");
  auto a = v.As<Napi::Int32Array>();
  return std::vector<int32_t>(a.Data(), a.Data() + a.ElementLength());
}

std::vector<float> to_f32(const Napi::Value& v, const char* what) {
  if (!v.IsTypedArray() || v.As<Napi::TypedArray>().TypedArrayType() != napi_float32_array)
    throw Napi::TypeError::New(v.Env(), std::string(what) + " must be a Float32Array");
  auto a = v.As<Napi::Float32Array>();
  return std::vector<float>(a.Data(), a.Data() + a.ElementLength());
}

std::vector<std::string> to_names(const Napi::Value& v, const char* what) {
  if (!v.IsArray()) throw Napi::TypeError::New(v.Env(), std::string(what) + " must be an array of string|null");
  auto a = v.As<Napi::Array>();
  std::vector<std::string> out(a.Length());
  for (uint32_t i = 0; i < a.Length(); ++i) {
    Napi::Value e = a.Get(i);
    if (e.IsString()) out[i] = e.As<Napi::String>().Utf8Value();
    else if (!e.IsNull() && !e.IsUndefined()) throw Napi::TypeError::New(v.Env(), std::string(what) + " entries must be string|null");
  }
  return out;
}

Napi::Float32Array f32_array(Napi::Env env, const std::vector<float>& v) {
  auto a = Napi::Float32Array::New(env, v.size());
  std::copy(v.begin(), v.end(), a.Data());
  return a;
}

Napi::Int32Array i32_array(Napi::Env env, const std::vector<int32_t>& v) {
  auto a = Napi::Int32Array::New(env, v.size());
  std::copy(v.begin(), v.end(), a.Data());
  return a;
}

}  // namespace mcprl
