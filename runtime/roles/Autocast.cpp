#include "runtime/roles/Autocast.h"

#include <ATen/autocast_mode.h>
#include <fmt/format.h>
#include <torch/torch.h>
#include <torch/version.h>

#include "runtime/Errors.h"

// libtorch 2.4 names autocast's state by device type; 1.13 to 2.3 have a call per device.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
#define PSTRAIN_AUTOCAST_BY_DEVICE_TYPE 1
#endif
// Autocast on MPS came with libtorch 2.5, to float16 only; to bfloat16 with 2.6.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 5)
#define PSTRAIN_AUTOCAST_MPS_FP16 1
#endif
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 6)
#define PSTRAIN_AUTOCAST_MPS_BF16 1
#endif

namespace pstrain::roles {
namespace {

c10::ScalarType dtypeOf(config::PrecisionKind precision) {
  switch (precision) {
    case config::PrecisionKind::Bf16: return c10::ScalarType::BFloat16;
    case config::PrecisionKind::Fp16: return c10::ScalarType::Half;
    case config::PrecisionKind::Fp32: return c10::ScalarType::Float;
  }
  throw InternalError("a precision row without a dtype");
}

// Whether this build has an autocast for `type` to `precision` (whether it computes in that
// dtype is then checked by use: CPU autocast takes float16 only in newer libtorch).
bool hasAutocast(c10::DeviceType type, config::PrecisionKind precision) {
  if (type == c10::kCPU || type == c10::kCUDA) return true;
  bool mps = false;
#if defined(PSTRAIN_AUTOCAST_MPS_BF16)
  mps = true;
#elif defined(PSTRAIN_AUTOCAST_MPS_FP16)
  mps = precision == config::PrecisionKind::Fp16;
#endif
  (void)precision;
  return type == c10::kMPS && mps;
}

bool enabled(c10::DeviceType type) {
#ifdef PSTRAIN_AUTOCAST_BY_DEVICE_TYPE
  return at::autocast::is_autocast_enabled(type);
#else
  return type == c10::kCPU ? at::autocast::is_cpu_enabled() : at::autocast::is_enabled();
#endif
}

void setEnabled(c10::DeviceType type, bool on) {
#ifdef PSTRAIN_AUTOCAST_BY_DEVICE_TYPE
  at::autocast::set_autocast_enabled(type, on);
#else
  if (type == c10::kCPU) at::autocast::set_cpu_enabled(on);
  else at::autocast::set_enabled(on);
#endif
}

c10::ScalarType autocastType(c10::DeviceType type) {
#ifdef PSTRAIN_AUTOCAST_BY_DEVICE_TYPE
  return at::autocast::get_autocast_dtype(type);
#else
  return type == c10::kCPU ? at::autocast::get_autocast_cpu_dtype() : at::autocast::get_autocast_gpu_dtype();
#endif
}

void setAutocastType(c10::DeviceType type, c10::ScalarType dtype) {
#ifdef PSTRAIN_AUTOCAST_BY_DEVICE_TYPE
  at::autocast::set_autocast_dtype(type, dtype);
#else
  if (type == c10::kCPU) at::autocast::set_autocast_cpu_dtype(dtype);
  else at::autocast::set_autocast_gpu_dtype(dtype);
#endif
}

}  // namespace

void checkPrecision(c10::Device device, const config::PrecisionInfo& row) {
  const config::PrecisionKind precision = row.kind;
  if (precision == config::PrecisionKind::Fp32) return;
  const std::string where = fmt::format("--precision {} on {}", row.name, device.str());
  if (!hasAutocast(device.type(), precision)) {
    const bool half = precision == config::PrecisionKind::Fp16;
    throw ConfigError(fmt::format("{}: this libtorch ({}) has no autocast for that device; {} needs {}, or use "
                                  "--precision fp32", where, TORCH_VERSION, row.name,
                                  !device.is_mps() ? "a CPU or CUDA device"
                                  : half          ? "libtorch 2.5 or newer"
                                                  : "libtorch 2.6 or newer"));
  }
  // A matrix product is on every autocast list: it must come out in the row's dtype.
  c10::ScalarType got = c10::ScalarType::Undefined;
  try {
    AutocastScope scope(device, precision);
    auto a = torch::ones({2, 2}, torch::TensorOptions().device(device));
    got = torch::mm(a, a).scalar_type();
  } catch (const std::exception& e) {
    const std::string why = e.what();  // a c10::Error's first line; a backtrace follows
    throw ConfigError(fmt::format("{}: this libtorch ({}) refuses it ({}); use --precision {}", where, TORCH_VERSION,
                                  why.substr(0, why.find('\n')),
                                  precision == config::PrecisionKind::Fp16 && device.is_cpu() ? "bf16 or fp32" : "fp32"));
  }
  if (got != dtypeOf(precision)) {
    throw ConfigError(fmt::format("{}: this libtorch ({}) computed a matrix product in {} under autocast; use "
                                  "--precision fp32", where, TORCH_VERSION, c10::toString(got)));
  }
}

AutocastScope::AutocastScope(c10::Device device, config::PrecisionKind precision) : type_(device.type()) {
  if (precision == config::PrecisionKind::Fp32) return;
  active_ = true;
  wasEnabled_ = enabled(type_);
  previousType_ = autocastType(type_);
  setEnabled(type_, true);
  setAutocastType(type_, dtypeOf(precision));
  at::autocast::increment_nesting();
}

AutocastScope::~AutocastScope() {
  if (!active_) return;
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  setEnabled(type_, wasEnabled_);
  setAutocastType(type_, previousType_);
}

}  // namespace pstrain::roles
