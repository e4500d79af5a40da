#include "runtime/Copy.h"

#include <cstring>
#include <string>

#include "runtime/Error.h"
#include "runtime/Launch.h"
#include "runtime/Runtime.h"

namespace nrtsim {

namespace {
void require_device_pointer(Runtime& runtime, const void* ptr, size_t bytes, const char* role) {
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
  Runtime& runtime = stream.core().runtime();
  const char* op = nullptr;
  LaunchKind launch_kind = LaunchKind::kCopyDeviceToDevice;
  switch (kind) {
    case CopyKind::kHostToDevice:
      require_device_pointer(runtime, dst, bytes, "destination");
      op = "nrtsim::copy_host_to_device";
      launch_kind = LaunchKind::kCopyHostToDevice;
      break;
    case CopyKind::kDeviceToHost:
      require_device_pointer(runtime, src, bytes, "source");
      op = "nrtsim::copy_device_to_host";
      launch_kind = LaunchKind::kCopyDeviceToHost;
      break;
    case CopyKind::kDeviceToDevice:
      require_device_pointer(runtime, src, bytes, "source");
      require_device_pointer(runtime, dst, bytes, "destination");
      op = "nrtsim::copy_device_to_device";
      break;
  }
  if (trace_name != nullptr) op = trace_name;
  Work work;
  work[Engine::kDma].bytes_read = bytes;
  work[Engine::kDma].bytes_written = bytes;
  launch(stream, op, launch_kind, work, [&] { std::memmove(dst, src, bytes); });
}

}  // namespace nrtsim
