#ifdef USE_KINETO

#include "backend/profiler/NeuronProfilerSession.h"

#include <output_base.h>  // libkineto::ActivityLogger

#include <c10/util/ApproximateClock.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <map>
#include <sstream>
#include <tuple>

#include "runtime/Launch.h"
#include "runtime/Runtime.h"

namespace torch_neuronx::profiler {

namespace {

using libkineto::ActivityType;

// Kineto's correlation ids arrive per thread, nested like the ops they belong to. Each thread
// keeps what it has to restore; the generation tells a stack left over from an earlier session
// (whose pops will never come) from this session's.
struct CorrelationStacks {
  uint64_t generation = 0;
  std::vector<uint64_t> restore;  // the runtime's correlation id before each push
  std::vector<uint64_t> user;     // record_function ranges (Kineto's "user" correlation ids)
};
thread_local CorrelationStacks t_stacks;

CorrelationStacks& stacks_of(uint64_t generation) {
  if (t_stacks.generation != generation) {
    // Ids of an earlier session name no op of this one.
    if (!t_stacks.restore.empty()) nrtsim::set_correlation_id(0);
    t_stacks.restore.clear();
    t_stacks.user.clear();
    t_stacks.generation = generation;
  }
  return t_stacks;
}

std::atomic<uint64_t> g_next_generation{1};

// tid of a device event: launches on one stream, and launches on one engine, run in order on the
// simulated clock; launches of two streams may overlap even when their main engine is the same
// (the engine is then busy with one while the other waits on a different engine), so each
// (stream, engine) pair gets its own track.
constexpr int32_t kEnginesPerStream = 8;
int32_t track_of(uint32_t stream, nrtsim::Engine engine) {
  return static_cast<int32_t>(stream) * kEnginesPerStream +
         static_cast<int32_t>(nrtsim::index_of(engine));
}
std::string track_name(int32_t track) {
  const auto engine = static_cast<nrtsim::Engine>(track % kEnginesPerStream);
  const int32_t stream = track / kEnginesPerStream;
  std::string name = std::string(nrtsim::engine_name(engine)) + " engine";
  if (stream != 0) name += ", stream " + std::to_string(stream);
  return name;
}

bool is_copy(nrtsim::LaunchKind kind) {
  switch (kind) {
    case nrtsim::LaunchKind::kCopyHostToDevice:
    case nrtsim::LaunchKind::kCopyDeviceToHost:
    case nrtsim::LaunchKind::kCopyDeviceToDevice:
    case nrtsim::LaunchKind::kScalarRead:
    case nrtsim::LaunchKind::kResize:
      return true;
    default:
      return false;
  }
}

// A device event is named after what ran on the device, not after the CPU op that launched it,
// as CUDA's kernels are: in key_averages() the op's row ("aten::mm") carries its CPU time and the
// device time of its launches, and the launches get rows of their own named after the op and the
// engine they ran on ("aten::mm [tensor]"). Copies say which way they go, as CUDA's
// "Memcpy HtoD (...)" do; the ATen op that asked for the transfer stays visible in parentheses.
std::string event_name(const DeviceEvent& e) {
  const std::string op = e.op;
  switch (e.kind) {
    case nrtsim::LaunchKind::kCopyHostToDevice: return "Memcpy HtoD (" + op + ")";
    case nrtsim::LaunchKind::kCopyDeviceToHost: return "Memcpy DtoH (" + op + ")";
    case nrtsim::LaunchKind::kCopyDeviceToDevice: return "Memcpy DtoD (" + op + ")";
    case nrtsim::LaunchKind::kScalarRead: return "Scalar read DtoH (" + op + ")";
    case nrtsim::LaunchKind::kResize: return "Resize DtoD (" + op + ")";
    case nrtsim::LaunchKind::kHostFallback: return "CPU fallback (" + op + ")";
    default: return op + " [" + nrtsim::engine_name(e.engine) + "]";
  }
}

std::string busy_json(const std::array<double, nrtsim::kEngineCount>& busy) {
  std::ostringstream out;
  out.precision(17);
  out << '{';
  bool first = true;
  for (nrtsim::Engine e : nrtsim::kAllEngines) {
    const double ns = busy[nrtsim::index_of(e)];
    if (ns == 0) continue;
    out << (first ? "" : ", ") << '"' << nrtsim::engine_name(e) << "\": " << ns;
    first = false;
  }
  out << '}';
  return out.str();
}

// Where one engine was busy during a launch that occupies several engines at once, on the device's
// simulated clock.
struct EngineSpan {
  nrtsim::Engine engine = nrtsim::Engine::kDma;
  double sim_begin_ns = 0;
  double sim_end_ns = 0;
  double busy_ns = 0;
  double utilization = 0;  // busy time over the launch's time on the engines (without its fixed cost)
};

// An NKI kernel's spans come from its instruction timeline: on each engine it used, from its first
// instruction's start to its last one's end (the timeline begins after the launch's fixed cost,
// so it ends with the launch). A compiled program has no instruction timeline; the clock's model
// of it (EngineModel.h: every engine starts after the launch cost and is busy for its work's time,
// the busiest one ending the launch) gives its spans. Other launches run on their main engine
// only and get none.
std::vector<EngineSpan> engine_spans(const DeviceEvent& e) {
  std::vector<EngineSpan> spans;
  const auto& busy = e.engine_busy_ns;
  if (e.kind == nrtsim::LaunchKind::kNkiKernel && e.work.has_timeline) {
    const double origin = e.sim_end_ns - e.work.timeline_ns;
    const double makespan = e.work.timeline_ns > 0 ? e.work.timeline_ns : 1.0;
    for (nrtsim::Engine engine : nrtsim::kAllEngines) {
      const size_t i = nrtsim::index_of(engine);
      if (busy[i] <= 0) continue;
      spans.push_back({engine, origin + e.work.timeline_begin_ns[i],
                       origin + e.work.timeline_end_ns[i], busy[i], busy[i] / makespan});
    }
  } else if (e.kind == nrtsim::LaunchKind::kProgram) {
    const double longest = *std::max_element(busy.begin(), busy.end());
    if (longest <= 0) return spans;
    const double origin = e.sim_end_ns - longest;
    for (nrtsim::Engine engine : nrtsim::kAllEngines) {
      const size_t i = nrtsim::index_of(engine);
      if (busy[i] <= 0) continue;
      spans.push_back({engine, origin, origin + busy[i], busy[i], busy[i] / longest});
    }
  }
  return spans;
}

// The same offset onto the profiler's time base as the launch itself got (DeviceTimeline.h).
TimelineSpan place_like(const DeviceEvent& e, double sim_begin_ns, double sim_end_ns) {
  const int64_t offset = e.placed.begin_ns - std::llround(e.sim_begin_ns);
  return {offset + std::llround(sim_begin_ns), offset + std::llround(sim_end_ns)};
}

int32_t kineto_id(uint64_t correlation_id) {
  // Kineto keeps activity ids as int32 (its CPU ops are stored the same way).
  return static_cast<int32_t>(correlation_id);
}

}  // namespace

NeuronProfilerSession::NeuronProfilerSession(const std::set<ActivityType>& activity_types)
    : device_events_(activity_types.count(ActivityType::CONCURRENT_KERNEL) != 0 ||
                     activity_types.count(ActivityType::GPU_MEMCPY) != 0),
      runtime_events_(activity_types.count(ActivityType::PRIVATEUSE1_RUNTIME) != 0),
      user_annotations_(activity_types.count(ActivityType::GPU_USER_ANNOTATION) != 0),
      generation_(g_next_generation.fetch_add(1)) {}

NeuronProfilerSession::~NeuronProfilerSession() { observe(false); }

void NeuronProfilerSession::observe(bool on) {
  if (on == observing_) return;
  // remove_observer waits for on_launch calls in flight, so nothing reaches a destroyed session.
  if (on) {
    nrtsim::add_observer(this);
  } else {
    nrtsim::remove_observer(this);
  }
  observing_ = on;
}

void NeuronProfilerSession::start() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    // Records time themselves with the steady clock; Kineto's time base is Unix nanoseconds.
    steady_to_profiler_ns_ = c10::getTime() - nrtsim::host_now_ns();
    start_ns_ = c10::getTime();
    events_.clear();
  }
  observe(true);
  status_ = libkineto::TraceStatus::RECORDING;
}

void NeuronProfilerSession::stop() {
  observe(false);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    end_ns_ = c10::getTime();
  }
  // The stopping thread may still be inside ops whose pops will not reach this session.
  CorrelationStacks& stacks = stacks_of(generation_);
  if (!stacks.restore.empty()) nrtsim::set_correlation_id(stacks.restore.front());
  stacks.restore.clear();
  stacks.user.clear();
  status_ = libkineto::TraceStatus::PROCESSING;
}

void NeuronProfilerSession::on_launch(const nrtsim::LaunchRecord& record) {
  DeviceEvent e;
  e.op = record.op;
  e.kind = record.kind;
  e.device = record.device;
  e.stream = record.stream;
  e.engine = record.work.main_engine();
  e.work = record.work;
  e.engine_busy_ns = record.engine_busy_ns;
  e.correlation_id = record.correlation_id;
  const CorrelationStacks& stacks = stacks_of(generation_);
  e.user_correlation_id = stacks.user.empty() ? 0 : stacks.user.back();
  e.host_thread = libkineto::systemThreadId();
  e.sim_begin_ns = record.sim_begin_ns;
  e.sim_end_ns = record.sim_end_ns;
  std::lock_guard<std::mutex> lock(mutex_);
  e.host_begin_ns = record.host_begin_ns + steady_to_profiler_ns_;
  e.host_end_ns = record.host_end_ns + steady_to_profiler_ns_;
  e.placed = timeline_.place(e.device, e.sim_begin_ns, e.sim_end_ns, e.host_begin_ns);
  e.flow_id = static_cast<uint32_t>(events_.size() + 1);
  events_.push_back(e);
}

void NeuronProfilerSession::pushCorrelationId(uint64_t id) {
  CorrelationStacks& stacks = stacks_of(generation_);
  stacks.restore.push_back(nrtsim::current_correlation_id());
  nrtsim::set_correlation_id(id);
}

void NeuronProfilerSession::popCorrelationId() {
  CorrelationStacks& stacks = stacks_of(generation_);
  if (stacks.restore.empty()) return;
  nrtsim::set_correlation_id(stacks.restore.back());
  stacks.restore.pop_back();
}

void NeuronProfilerSession::pushUserCorrelationId(uint64_t id) {
  stacks_of(generation_).user.push_back(id);
}

void NeuronProfilerSession::popUserCorrelationId() {
  CorrelationStacks& stacks = stacks_of(generation_);
  if (!stacks.user.empty()) stacks.user.pop_back();
}

libkineto::GenericTraceActivity& NeuronProfilerSession::add_activity(ActivityType type,
                                                                     const std::string& name) {
  buffer_->emplace_activity(buffer_->span, type, name);
  return *buffer_->activities.back();
}

void NeuronProfilerSession::add_device_activity(
    const DeviceEvent& e, const libkineto::getLinkedActivityCallback& linked,
    libkineto::ActivityLogger& logger) {
  auto& act = add_activity(
      is_copy(e.kind) ? ActivityType::GPU_MEMCPY : ActivityType::CONCURRENT_KERNEL, event_name(e));
  act.startTime = e.placed.begin_ns;
  act.endTime = e.placed.end_ns;
  act.device = e.device;
  act.resource = track_of(e.stream, e.engine);
  act.id = kineto_id(e.correlation_id);
  if (e.correlation_id != 0 && linked) act.linked = linked(act.id);
  if (runtime_events_) {
    act.flow.id = e.flow_id;
    act.flow.type = libkineto::kLinkAsyncCpuGpu;
    act.flow.start = 0;
  }
  const auto& w = e.work;
  uint64_t elements = 0;
  for (nrtsim::Engine engine :
       {nrtsim::Engine::kVector, nrtsim::Engine::kScalar, nrtsim::Engine::kGpSimd}) {
    elements += w[engine].ops;
  }
  act.addMetadata("device", e.device);
  act.addMetadata("stream", e.stream);
  act.addMetadataQuoted("engine", nrtsim::engine_name(e.engine));
  act.addMetadataQuoted("kind", nrtsim::launch_kind_name(e.kind));
  act.addMetadataQuoted("op", e.op);
  act.addMetadata("flops", w[nrtsim::Engine::kTensor].ops);
  act.addMetadata("elements", elements);
  act.addMetadata("bytes_read", w.bytes_read());
  act.addMetadata("bytes_written", w.bytes_written());
  act.addMetadataQuoted("precision", nrtsim::precision_name(w.precision));
  act.addMetadata("engine_busy_ns", busy_json(e.engine_busy_ns));
  act.addMetadata("sim_begin_ns", e.sim_begin_ns);
  act.addMetadata("sim_end_ns", e.sim_end_ns);
  act.addMetadata("sim_duration_ns", e.sim_end_ns - e.sim_begin_ns);
  act.addMetadata("host_duration_ns", e.host_end_ns - e.host_begin_ns);
  act.addMetadata("correlation", e.correlation_id);
  logger.handleActivity(act);
}

void NeuronProfilerSession::add_engine_spans(const DeviceEvent& e,
                                             libkineto::ActivityLogger& logger) {
  // GPU user annotations, not kernels: PyTorch sums every device event linked to a CPU op into
  // that op's device time, and adds every device event that is not a user annotation to the
  // table's total, so the launch's own event stays the one that counts (once, with its modelled
  // duration) and these only draw it on the other tracks. They are linked to nothing.
  const std::string name = e.op;  // the span names its engine itself
  for (const EngineSpan& span : engine_spans(e)) {
    TimelineSpan placed = place_like(e, span.sim_begin_ns, span.sim_end_ns);
    if (span.engine == e.engine) {
      // On the launch's own track the span nests inside the launch's event. The Chrome trace
      // writer widens every GPU user annotation by 1 ns on each side (Kineto's
      // ChromeTraceLogger), which would push a span that ends with the launch 1 ns past it and
      // break the nesting trace viewers need; so it is drawn 1 ns inside.
      placed.begin_ns = std::max(placed.begin_ns, e.placed.begin_ns + 1);
      placed.end_ns = std::max(placed.begin_ns, std::min(placed.end_ns, e.placed.end_ns - 1));
    }
    auto& act = add_activity(ActivityType::GPU_USER_ANNOTATION,
                             name + " (" + nrtsim::engine_name(span.engine) + " engine)");
    act.startTime = placed.begin_ns;
    act.endTime = placed.end_ns;
    act.device = e.device;
    act.resource = track_of(e.stream, span.engine);
    act.id = kineto_id(e.correlation_id);
    act.addMetadataQuoted("engine_span", nrtsim::engine_name(span.engine));
    act.addMetadataQuoted("op", e.op);
    act.addMetadataQuoted("kind", nrtsim::launch_kind_name(e.kind));
    act.addMetadata("busy_ns", span.busy_ns);
    act.addMetadata("utilization", span.utilization);
    act.addMetadata("sim_begin_ns", span.sim_begin_ns);
    act.addMetadata("sim_end_ns", span.sim_end_ns);
    act.addMetadata("correlation", e.correlation_id);
    logger.handleActivity(act);
  }
}

void NeuronProfilerSession::add_runtime_activity(
    const DeviceEvent& e, const libkineto::getLinkedActivityCallback& linked,
    libkineto::ActivityLogger& logger) {
  auto& act = add_activity(ActivityType::PRIVATEUSE1_RUNTIME,
                           std::string("nrtsim::") + nrtsim::launch_kind_name(e.kind));
  act.startTime = e.host_begin_ns;
  act.endTime = e.host_end_ns;
  act.device = libkineto::processId();
  act.resource = e.host_thread;
  act.threadId = e.host_thread;
  act.id = kineto_id(e.correlation_id);
  if (e.correlation_id != 0 && linked) act.linked = linked(act.id);
  act.flow.id = e.flow_id;
  act.flow.type = libkineto::kLinkAsyncCpuGpu;
  act.flow.start = 1;
  act.addMetadataQuoted("op", e.op);
  act.addMetadata("device", e.device);
  act.addMetadata("stream", e.stream);
  act.addMetadata("correlation", e.correlation_id);
  logger.handleActivity(act);
}

void NeuronProfilerSession::add_user_annotations(
    const libkineto::getLinkedActivityCallback& linked, libkineto::ActivityLogger& logger) {
  if (!linked) return;
  // A record_function range (an optimizer step is one) on each device track it launched work on,
  // named after the range, as Kineto does for CUDA streams. PyTorch counts a user annotation's
  // duration as the range's device time, so the range is drawn over its launches only: one span
  // per run of launches that follow each other without a gap on the track, never over the time
  // the device waited for the host. Its device time is then the sum of its launches' (tracks
  // never overlap their own launches). The launches' engine spans on other tracks are not
  // covered: they are the same launch's time, already counted once.
  std::map<std::tuple<uint64_t, int, int32_t>, std::vector<TimelineSpan>> runs;
  for (const DeviceEvent& e : events_) {
    if (e.user_correlation_id == 0) continue;
    runs[{e.user_correlation_id, e.device, track_of(e.stream, e.engine)}].push_back(e.placed);
  }
  for (auto& [key, spans] : runs) {
    const auto& [user_id, device, track] = key;
    const libkineto::ITraceActivity* range = linked(kineto_id(user_id));
    if (range == nullptr) continue;
    std::sort(spans.begin(), spans.end(),
              [](const TimelineSpan& a, const TimelineSpan& b) { return a.begin_ns < b.begin_ns; });
    std::vector<TimelineSpan> merged;
    for (const TimelineSpan& s : spans) {
      if (!merged.empty() && s.begin_ns <= merged.back().end_ns) {
        merged.back().end_ns = std::max(merged.back().end_ns, s.end_ns);
      } else {
        merged.push_back(s);
      }
    }
    for (const TimelineSpan& s : merged) {
      auto& act = add_activity(ActivityType::GPU_USER_ANNOTATION, range->name());
      act.startTime = s.begin_ns;
      act.endTime = s.end_ns;
      act.device = device;
      act.resource = track;
      act.id = kineto_id(user_id);
      logger.handleActivity(act);
    }
  }
}

libkineto::DeviceInfo NeuronProfilerSession::device_info(int device) const {
  std::string label = "NeuronCore (nrtsim, simulated clock)";
  if (nrtsim::Runtime::is_initialized()) {
    const auto& topology = nrtsim::Runtime::get().topology();
    label = topology.instance().chip.name + " logical NeuronCore " + std::to_string(device) +
            " (nrtsim, simulated clock)";
  }
  // Sorted after every host process (Kineto's convention for device rows).
  return libkineto::DeviceInfo{device, libkineto::kExceedMaxPid + device,
                               "neuron:" + std::to_string(device), label};
}

void NeuronProfilerSession::processTrace(libkineto::ActivityLogger& logger) {
  processTrace(logger, nullptr, start_ns_, end_ns_);
}

void NeuronProfilerSession::processTrace(libkineto::ActivityLogger& logger,
                                         libkineto::getLinkedActivityCallback get_linked_activity,
                                         int64_t /*start_time*/, int64_t /*end_time*/) {
  std::lock_guard<std::mutex> lock(mutex_);
  buffer_ = std::make_unique<libkineto::CpuTraceBuffer>();
  buffer_->span = libkineto::TraceSpan(start_ns_, end_ns_, "neuron");
  buffer_->gpuOpCount = device_events_ ? static_cast<int>(events_.size()) : 0;
  buffer_->span.opCount = buffer_->gpuOpCount;
  for (const DeviceEvent& e : events_) {
    if (device_events_) add_device_activity(e, get_linked_activity, logger);
    if (device_events_ && user_annotations_) add_engine_spans(e, logger);
    if (runtime_events_) add_runtime_activity(e, get_linked_activity, logger);
  }
  if (device_events_ && user_annotations_) add_user_annotations(get_linked_activity, logger);
  // Kineto asks a session for one device (getDeviceInfo); the others are named here.
  bool first = true;
  for (int device : devices_used()) {
    if (!first) logger.handleDeviceInfo(device_info(device), start_ns_);
    first = false;
  }
}

std::set<int> NeuronProfilerSession::devices_used() const {
  std::set<int> devices;
  if (device_events_) {
    for (const DeviceEvent& e : events_) devices.insert(e.device);
  }
  return devices;
}

std::unique_ptr<libkineto::DeviceInfo> NeuronProfilerSession::getDeviceInfo() {
  std::lock_guard<std::mutex> lock(mutex_);
  const std::set<int> devices = devices_used();
  return std::make_unique<libkineto::DeviceInfo>(device_info(devices.empty() ? 0 : *devices.begin()));
}

std::vector<libkineto::ResourceInfo> NeuronProfilerSession::getResourceInfos() {
  std::lock_guard<std::mutex> lock(mutex_);
  std::set<std::pair<int, int32_t>> tracks;
  if (device_events_) {
    for (const DeviceEvent& e : events_) {
      tracks.emplace(e.device, track_of(e.stream, e.engine));
      if (!user_annotations_) continue;
      for (const EngineSpan& span : engine_spans(e)) {
        tracks.emplace(e.device, track_of(e.stream, span.engine));
      }
    }
  }
  std::vector<libkineto::ResourceInfo> infos;
  for (const auto& [device, track] : tracks) {
    infos.push_back(libkineto::ResourceInfo{track, track, device, track_name(track)});
  }
  return infos;
}

std::unique_ptr<libkineto::CpuTraceBuffer> NeuronProfilerSession::getTraceBuffer() {
  std::lock_guard<std::mutex> lock(mutex_);
  return std::move(buffer_);
}

}  // namespace torch_neuronx::profiler

#endif  // USE_KINETO
