// Random draws on neuron, one path for eager kernels and compiled programs. Every draw comes from
// the neuron generator (see Generator.h), so torch.neuron.manual_seed and get/set_rng_state
// govern randn/rand/randint/bernoulli/dropout on device, eager or compiled. The values are
// computed by ATen's CPU distributions from a CPU generator seeded by the (seed, offset) the draw
// reserves, one value per element: fill_on_host and dropout_on_host below are the one definition
// of each distribution's fill and of dropout.
//
// Eager: the in-place fills and native_dropout are neuron kernels running them on host views.
// Compiled: a program is CPU code, whose random ops would draw from the CPU default generator;
// torch_neuronx/dynamo/random_ops.py rewrites them in the program's CPU graph into the ops
// neuron_program::fill_random and neuron_program::dropout defined here, which reserve from the
// program device's generator at run time and run the same fills, so a compiled draw gives the
// numbers eager neuron gives at the same point of the stream, and advances it as eager does.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/mul.h>
#include <torch/library.h>

#include <array>
#include <string>
#include <string_view>
#include <tuple>

#include "backend/core/Generator.h"
#include "backend/core/HostView.h"
#include "backend/core/FlopModels.h"
#include "backend/core/KernelLaunch.h"

namespace torch_neuronx {
namespace {

using OptGen = std::optional<at::Generator>;

// The distributions of the in-place fills, by the names random_ops.py gives them in programs.
enum class Fill {
  kUniform,
  kNormal,
  kRandom,
  kRandomTo,
  kRandomFrom,
  kBernoulliFloat,
  kBernoulliTensor,
  kExponential,
  kLogNormal,
  kCauchy,
  kGeometric,
};
constexpr std::array<std::pair<std::string_view, Fill>, 11> kFillNames{{
    {"uniform", Fill::kUniform},
    {"normal", Fill::kNormal},
    {"random", Fill::kRandom},
    {"random_to", Fill::kRandomTo},
    {"random_from", Fill::kRandomFrom},
    {"bernoulli_float", Fill::kBernoulliFloat},
    {"bernoulli_tensor", Fill::kBernoulliTensor},
    {"exponential", Fill::kExponential},
    {"log_normal", Fill::kLogNormal},
    {"cauchy", Fill::kCauchy},
    {"geometric", Fill::kGeometric},
}};

Fill fill_named(std::string_view name) {
  std::string known;
  for (const auto& [fill_name, fill] : kFillNames) {
    if (fill_name == name) return fill;
    known += (known.empty() ? "" : ", ") + std::string(fill_name);
  }
  TORCH_CHECK(false, "neuron_program::fill_random: unknown distribution '", name,
              "'; expected one of ", known);
}

// A fill's parameters: `a`, `b` the floating ones (from/to, mean/std, p, lambda, ...), `low`,
// `high` the integer ones, `p` the probabilities of bernoulli_(Tensor) (a CPU tensor).
struct FillArgs {
  double a = 0, b = 0;
  int64_t low = 0;
  std::optional<int64_t> high;
  at::Tensor p;
};

// The one definition of each fill: `t` (a host view of a neuron tensor, or a program's CPU
// tensor) filled from `generator`, one value per element.
void fill_on_host(at::Tensor& t, Fill kind, const FillArgs& args, at::Generator& generator) {
  switch (kind) {
    case Fill::kUniform: t.uniform_(args.a, args.b, generator); break;
    case Fill::kNormal: t.normal_(args.a, args.b, generator); break;
    case Fill::kRandom: t.random_(generator); break;
    case Fill::kRandomTo: t.random_(*args.high, generator); break;
    case Fill::kRandomFrom: t.random_(args.low, args.high, generator); break;
    case Fill::kBernoulliFloat: t.bernoulli_(args.a, generator); break;
    case Fill::kBernoulliTensor: t.bernoulli_(args.p, generator); break;
    case Fill::kExponential: t.exponential_(args.a, generator); break;
    case Fill::kLogNormal: t.log_normal_(args.a, args.b, generator); break;
    case Fill::kCauchy: t.cauchy_(args.a, args.b, generator); break;
    case Fill::kGeometric: t.geometric_(args.a, generator); break;
  }
}

// The one definition of dropout, as ATen's CPU kernel computes it: a bool mask kept with
// probability 1 - p (one draw per element), and the kept values scaled by 1 / (1 - p).
void dropout_on_host(const at::Tensor& input, double p, at::Tensor& output, at::Tensor& mask,
                     at::Generator& generator) {
  const double keep = 1. - p;
  const double scale = keep == 0. ? 0. : 1. / keep;
  mask.bernoulli_(keep, generator);
  at::mul_out(output, input, mask).mul_(scale);
}

// --- eager kernels ------------------------------------------------------------------------------

at::Tensor& random_fill(at::Tensor& self, const OptGen& generator, const char* op, Fill kind,
                        const FillArgs& args = {}) {
  if (self.numel() == 0) return self;
  at::Generator host =
      host_generator_for(generator, self.device().index(), static_cast<uint64_t>(self.numel()));
  // One draw per element, generated on GpSimd (its PRNG), written once.
  Kernel kernel(op, self.device(), Engine::kGpSimd);
  kernel.writes(self).ops(flops::elementwise(self)).run([&] {
    at::Tensor view = host_view(self);
    fill_on_host(view, kind, args, host);
  });
  return self;
}

at::Tensor& normal_(at::Tensor& self, double mean, double std, OptGen gen) {
  return random_fill(self, gen, "aten::normal_", Fill::kNormal, {.a = mean, .b = std});
}
at::Tensor& uniform_(at::Tensor& self, double from, double to, OptGen gen) {
  return random_fill(self, gen, "aten::uniform_", Fill::kUniform, {.a = from, .b = to});
}
at::Tensor& random_(at::Tensor& self, OptGen gen) {
  return random_fill(self, gen, "aten::random_", Fill::kRandom);
}
at::Tensor& random_to(at::Tensor& self, int64_t to, OptGen gen) {
  return random_fill(self, gen, "aten::random_.to", Fill::kRandomTo, {.high = to});
}
at::Tensor& random_from(at::Tensor& self, int64_t from, std::optional<int64_t> to, OptGen gen) {
  return random_fill(self, gen, "aten::random_.from", Fill::kRandomFrom, {.low = from, .high = to});
}
at::Tensor& bernoulli_float(at::Tensor& self, double p, OptGen gen) {
  return random_fill(self, gen, "aten::bernoulli_.float", Fill::kBernoulliFloat, {.a = p});
}
at::Tensor& bernoulli_tensor(at::Tensor& self, const at::Tensor& p, OptGen gen) {
  TORCH_CHECK(p.device() == self.device() || (p.device().is_cpu() && p.dim() == 0),
              "bernoulli_: p must be on ", self.device(), " like self, got ", p.device());
  return random_fill(self, gen, "aten::bernoulli_.Tensor", Fill::kBernoulliTensor,
                     {.p = p.device().is_cpu() ? p : host_view(p)});
}
at::Tensor& exponential_(at::Tensor& self, double lambd, OptGen gen) {
  return random_fill(self, gen, "aten::exponential_", Fill::kExponential, {.a = lambd});
}
at::Tensor& log_normal_(at::Tensor& self, double mean, double std, OptGen gen) {
  return random_fill(self, gen, "aten::log_normal_", Fill::kLogNormal, {.a = mean, .b = std});
}
at::Tensor& cauchy_(at::Tensor& self, double median, double sigma, OptGen gen) {
  return random_fill(self, gen, "aten::cauchy_", Fill::kCauchy, {.a = median, .b = sigma});
}
at::Tensor& geometric_(at::Tensor& self, double p, OptGen gen) {
  return random_fill(self, gen, "aten::geometric_", Fill::kGeometric, {.a = p});
}

// native_dropout (what F.dropout and nn.Dropout reach on neuron in training) takes no generator:
// through the CPU fallback it would draw from the CPU default generator, out of reach of
// torch.neuron.manual_seed and set_rng_state.
std::tuple<at::Tensor, at::Tensor> native_dropout(const at::Tensor& input, double p,
                                                  std::optional<bool> train) {
  TORCH_CHECK(p >= 0 && p <= 1, "dropout probability has to be between 0 and 1, but got ", p,
              " (aten::native_dropout on ", input.device(), ")");
  // The mask and the output take the input's layout (channels-last stays channels-last), as the
  // CPU kernel lays them out.
  at::Tensor mask = at::empty_like(input, input.options().dtype(at::kBool));
  if (train.has_value() && !*train) return {input.clone(), mask.fill_(true)};
  at::Tensor output = at::empty_like(input);
  if (input.numel() == 0) return {output, mask};
  at::Generator host = host_generator_for(std::nullopt, input.device().index(),
                                          static_cast<uint64_t>(input.numel()));
  // A draw and a multiply per element.
  Kernel kernel("aten::native_dropout", input.device(), Engine::kGpSimd);
  kernel.reads(input).writes(output).writes(mask).ops(2 * flops::elementwise(input)).run([&] {
    at::Tensor mask_view = host_view(mask);
    at::Tensor output_view = host_view(output);
    dropout_on_host(host_view(input), p, output_view, mask_view, host);
  });
  return {output, mask};
}

// --- programs: the same draws inside a compiled program's CPU code -------------------------------

// A fresh tensor like `templ` (size, dtype, layout) filled as the eager kernel `kind` fills it,
// drawing numel values from neuron:`device`'s generator.
at::Tensor program_fill_random(const at::Tensor& templ, c10::string_view kind, double a, double b,
                               int64_t low, std::optional<int64_t> high,
                               const std::optional<at::Tensor>& p, int64_t device) {
  const Fill fill = fill_named(std::string_view(kind.data(), kind.size()));
  at::Tensor out = at::empty_like(templ);
  if (out.numel() == 0) return out;
  at::Generator host = host_generator_for(std::nullopt, static_cast<c10::DeviceIndex>(device),
                                          static_cast<uint64_t>(out.numel()));
  fill_on_host(out, fill, {.a = a, .b = b, .low = low, .high = high, .p = p.value_or(at::Tensor())},
               host);
  return out;
}

at::Tensor program_fill_random_meta(const at::Tensor& templ, c10::string_view, double, double,
                                    int64_t, std::optional<int64_t>,
                                    const std::optional<at::Tensor>&, int64_t) {
  return at::empty_like(templ);
}

// native_dropout in training, drawing from neuron:`device`'s generator.
std::tuple<at::Tensor, at::Tensor> program_dropout(const at::Tensor& input, double p,
                                                   int64_t device) {
  at::Tensor output = at::empty_like(input, at::MemoryFormat::Contiguous);
  at::Tensor mask = at::empty_like(input, input.options().dtype(at::kBool),
                                   at::MemoryFormat::Contiguous);
  if (input.numel() == 0) return {output, mask};
  at::Generator host = host_generator_for(std::nullopt, static_cast<c10::DeviceIndex>(device),
                                          static_cast<uint64_t>(input.numel()));
  dropout_on_host(input, p, output, mask, host);
  return {output, mask};
}

std::tuple<at::Tensor, at::Tensor> program_dropout_meta(const at::Tensor& input, double,
                                                        int64_t) {
  return {at::empty_like(input, at::MemoryFormat::Contiguous),
          at::empty_like(input, input.options().dtype(at::kBool), at::MemoryFormat::Contiguous)};
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("normal_", TORCH_FN(normal_));
  m.impl("uniform_", TORCH_FN(uniform_));
  m.impl("random_", TORCH_FN(random_));
  m.impl("random_.to", TORCH_FN(random_to));
  m.impl("random_.from", TORCH_FN(random_from));
  m.impl("bernoulli_.float", TORCH_FN(bernoulli_float));
  m.impl("bernoulli_.Tensor", TORCH_FN(bernoulli_tensor));
  m.impl("exponential_", TORCH_FN(exponential_));
  m.impl("log_normal_", TORCH_FN(log_normal_));
  m.impl("cauchy_", TORCH_FN(cauchy_));
  m.impl("geometric_", TORCH_FN(geometric_));
  m.impl("native_dropout", TORCH_FN(native_dropout));
}

// The program ops: CPU code (programs are CPU code over host views) drawing from a neuron
// generator. Seeded draws: Inductor must neither fold nor deduplicate them.
TORCH_LIBRARY(neuron_program, m) {
  m.def("fill_random(Tensor template, str kind, float a, float b, int low, int? high, "
        "Tensor? p, int device) -> Tensor",
        {at::Tag::nondeterministic_seeded});
  m.def("dropout(Tensor input, float p, int device) -> (Tensor, Tensor)",
        {at::Tag::nondeterministic_seeded});
}

TORCH_LIBRARY_IMPL(neuron_program, CPU, m) {
  m.impl("fill_random", TORCH_FN(program_fill_random));
  m.impl("dropout", TORCH_FN(program_dropout));
}

TORCH_LIBRARY_IMPL(neuron_program, Meta, m) {
  m.impl("fill_random", TORCH_FN(program_fill_random_meta));
  m.impl("dropout", TORCH_FN(program_dropout_meta));
}

}  // namespace
}  // namespace torch_neuronx
