#include "runtime/Copy.h"

#include <cstring>
#include <string>

#include "runtime/Error.h"
#include "runtime/KernelLaunch.h"
#include "runtime/Runtime.h"

namespace nrtsim {

namespace {
void require_device_pointer(const void* ptr, size_t bytes, const char* role) {
  Runtime& runtime = Runtime::get();
  // Checking both ends is not enough: the range could run from one allocation into another
  // over host memory that is no tensor's.
  const int device = runtime.device_of(ptr);
  if (device < 0 || !runtime.core(device).hbm().owns(ptr, bytes)) {
    throw Error(ErrorCode::kInvalidArgument,
                std::string("copy: the ") + role + " range of " + std::to_string(bytes) +
                    " bytes is not inside one allocation in neuron HBM");
  }
}
}  // namespace

void copy(Stream& stream, void* dst, const void* src, size_t bytes, CopyKind kind,
          const char* trace_name) {
  if (bytes == 0) return;
  if (dst == nullptr || src == nullptr) {
    throw Error(ErrorCode::kInvalidArgument, "copy: null pointer");
  }
  const char* op = nullptr;
  switch (kind) {
    case CopyKind::kHostToDevice:
      require_device_pointer(dst, bytes, "destination");
      op = "nrtsim::copy_host_to_device";
      break;
    case CopyKind::kDeviceToHost:
      require_device_pointer(src, bytes, "source");
      op = "nrtsim::copy_device_to_host";
      break;
    case CopyKind::kDeviceToDevice:
      require_device_pointer(src, bytes, "source");
      require_device_pointer(dst, bytes, "destination");
      op = "nrtsim::copy_device_to_device";
      break;
  }
  if (trace_name != nullptr) op = trace_name;
  launch(stream, KernelInfo{op, 0, bytes, Engine::kDma}, [&] { std::memmove(dst, src, bytes); });
}

}  // namespace nrtsim
