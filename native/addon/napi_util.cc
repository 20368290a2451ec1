#include "napi_util.h"

#include "../kernels/gemm.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>

namespace mcprl {

namespace {

std::atomic<int> g_task_threads{0};

// The one thread that runs every native task of the process, one at a time, in the order they reach it.
// libgomp gives each thread that opens a parallel region a team of its own; when libuv's pool threads took
// turns running tasks, the process held several teams, more OpenMP threads than cores, and their workers woke and
// slept in futexes at every barrier: in a batch-64 decode of the bundled model a fifth of the CPU samples were
// futex wake-ups and two threads decoded no faster than one (perf). With one master thread there is one team and
// the decode runs 2x faster (src/engine/native.ts sets how long its workers spin). The libuv worker that queued a
// task waits for it (the JS thread never does). Which thread computes what inside a task does not change, so
// neither does any result.
class ComputeThread {
 public:
  static ComputeThread& get() {
    static ComputeThread* t = new ComputeThread();  // never destroyed: the thread may outlive static destructors
    return *t;
  }
  // Runs f on the compute thread and returns when it is done; an exception of f is rethrown here.
  void run(const std::function<void()>& f) {
    Job job{&f, nullptr, false};
    {
      std::lock_guard<std::mutex> g(mu_);
      queue_.push_back(&job);
    }
    ready_.notify_one();
    std::unique_lock<std::mutex> g(mu_);
    done_.wait(g, [&] { return job.done; });
    if (job.error) std::rethrow_exception(job.error);
  }

 private:
  struct Job {
    const std::function<void()>* f;
    std::exception_ptr error;
    bool done;
  };
  ComputeThread() { std::thread([this] { loop(); }).detach(); }
  [[noreturn]] void loop() {
    g_task_threads.fetch_add(1);
    for (;;) {
      Job* job;
      {
        std::unique_lock<std::mutex> g(mu_);
        ready_.wait(g, [&] { return !queue_.empty(); });
        job = queue_.front();
        queue_.pop_front();
      }
      std::exception_ptr error;
      try {
        (*job->f)();
      } catch (...) {
        error = std::current_exception();
      }
      {
        std::lock_guard<std::mutex> g(mu_);
        job->error = error;
        job->done = true;
      }
      done_.notify_all();
    }
  }
  std::mutex mu_;
  std::condition_variable ready_, done_;
  std::deque<Job*> queue_;
};

class PromiseWorker : public Napi::AsyncWorker {
 public:
  PromiseWorker(Napi::Env env, std::function<void()> work, std::function<Napi::Value(Napi::Env)> done)
      : Napi::AsyncWorker(env), deferred_(Napi::Promise::Deferred::New(env)), work_(std::move(work)), done_(std::move(done)) {}
  void Execute() override {
    try {
      ComputeThread::get().run(work_);
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

int task_threads() { return g_task_threads.load(); }

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

static const char* type_name(const Napi::Value& v) {
  switch (v.Type()) {
    case napi_undefined: return "undefined";
    case napi_null: return "null";
    case napi_boolean: return "a boolean";
    case napi_number: return "a number";
    case napi_string: return "a string";
    case napi_object: return v.IsArray() ? "an array" : "an object";
    default: return "another type";
  }
}

static std::string fmt_num(double d) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", d);
  return buf;
}

[[noreturn]] static void type_error(const Napi::Value& v, const std::string& what, const char* want) {
  if (v.IsUndefined()) throw Napi::TypeError::New(v.Env(), what + " is required (" + want + ")");
  throw Napi::TypeError::New(v.Env(), what + " must be " + want + ", got " + type_name(v));
}

std::string str_arg(const Napi::Value& v, const std::string& what) {
  if (!v.IsString()) type_error(v, what, "a string");
  return v.As<Napi::String>().Utf8Value();
}

bool bool_arg(const Napi::Value& v, const std::string& what) {
  if (!v.IsBoolean()) type_error(v, what, "a boolean");
  return v.As<Napi::Boolean>().Value();
}

double num_arg(const Napi::Value& v, const std::string& what) {
  if (!v.IsNumber()) type_error(v, what, "a number");
  double d = v.As<Napi::Number>().DoubleValue();
  if (!std::isfinite(d)) throw Napi::RangeError::New(v.Env(), what + " must be a finite number, got " + fmt_num(d));
  return d;
}

int64_t int_arg(const Napi::Value& v, const std::string& what, int64_t lo, int64_t hi) {
  if (!v.IsNumber()) type_error(v, what, "an integer");
  double d = v.As<Napi::Number>().DoubleValue();
  if (!(d == std::floor(d) && d >= (double)lo && d <= (double)hi))
    throw Napi::RangeError::New(v.Env(), what + " must be an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                                             "], got " + fmt_num(d));
  return (int64_t)d;
}

Napi::Object obj_arg(const Napi::Value& v, const std::string& what) {
  if (!v.IsObject() || v.IsArray()) type_error(v, what, "an object");
  return v.As<Napi::Object>();
}

std::string str_field(const Napi::Object& o, const std::string& what, const char* key) {
  return str_arg(o.Get(key), what + "." + key);
}
bool bool_field(const Napi::Object& o, const std::string& what, const char* key) {
  return bool_arg(o.Get(key), what + "." + key);
}
double num_field(const Napi::Object& o, const std::string& what, const char* key) {
  return num_arg(o.Get(key), what + "." + key);
}
int64_t int_field(const Napi::Object& o, const std::string& what, const char* key, int64_t lo, int64_t hi) {
  return int_arg(o.Get(key), what + "." + key, lo, hi);
}

TokenMasks to_masks(const Napi::Value& idx, const Napi::Value& bits, const std::string& what) {
  TokenMasks m;
  if (idx.IsNull() || idx.IsUndefined()) return m;
  m.idx = to_i32(idx, (what + ".maskIdx").c_str());
  if (!bits.IsTypedArray() || bits.As<Napi::TypedArray>().TypedArrayType() != napi_uint32_array)
    throw Napi::TypeError::New(bits.Env(), what + ".masks must be a Uint32Array");
  auto a = bits.As<Napi::Uint32Array>();
  m.bits.assign(a.Data(), a.Data() + a.ElementLength());
  return m;
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

void set_gemm_info(Napi::Object& o) {
  o.Set("openblas", gemm_have_blas());
  o.Set("portableGemm", !gemm_have_blas() || gemm_portable_forced());
  o.Set("gemmAvx512", gemm_avx512());
  const BlasForkStats bf = blas_fork_stats();
  o.Set("blasCalls", (double)bf.blas_calls);
  o.Set("forks", (double)bf.forks);
}

Napi::Value set_portable_gemm(const Napi::CallbackInfo& info) {
  gemm_set_portable(bool_arg(info[0], "portable"));
  return info.Env().Undefined();
}

}  // namespace mcprl
