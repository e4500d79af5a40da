// In-place random fills on neuron tensors, and dropout, drawn from the neuron generator (see
// Generator.h), so torch.neuron.manual_seed and get/set_rng_state govern
// randn/rand/randint/bernoulli/dropout on device.
// The values are computed by ATen's CPU distributions on the device buffer, seeded from the
// (seed, offset) the kernel reserves.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/mul.h>
#include <torch/library.h>

#include <tuple>

#include "backend/core/Generator.h"
#include "backend/core/HostView.h"
#include "backend/core/FlopModels.h"
#include "backend/core/KernelLaunch.h"

namespace torch_neuronx {
namespace {

using OptGen = std::optional<at::Generator>;

template <class Fill>
at::Tensor& random_fill(at::Tensor& self, const OptGen& generator, const char* op, Fill&& fill) {
  if (self.numel() == 0) return self;
  at::Generator host =
      host_generator_for(generator, self.device().index(), static_cast<uint64_t>(self.numel()));
  // One draw per element, generated on GpSimd (its PRNG), written once.
  Kernel kernel(op, self.device(), Engine::kGpSimd);
  kernel.writes(self).ops(flops::elementwise(self)).run([&] {
    at::Tensor view = host_view(self);
    fill(view, host);
  });
  return self;
}

at::Tensor& normal_(at::Tensor& self, double mean, double std, OptGen gen) {
  return random_fill(self, gen, "aten::normal_",
                     [&](at::Tensor& v, at::Generator& g) { v.normal_(mean, std, g); });
}
at::Tensor& uniform_(at::Tensor& self, double from, double to, OptGen gen) {
  return random_fill(self, gen, "aten::uniform_",
                     [&](at::Tensor& v, at::Generator& g) { v.uniform_(from, to, g); });
}
at::Tensor& random_(at::Tensor& self, OptGen gen) {
  return random_fill(self, gen, "aten::random_",
                     [&](at::Tensor& v, at::Generator& g) { v.random_(g); });
}
at::Tensor& random_to(at::Tensor& self, int64_t to, OptGen gen) {
  return random_fill(self, gen, "aten::random_.to",
                     [&](at::Tensor& v, at::Generator& g) { v.random_(to, g); });
}
at::Tensor& random_from(at::Tensor& self, int64_t from, std::optional<int64_t> to, OptGen gen) {
  return random_fill(self, gen, "aten::random_.from",
                     [&](at::Tensor& v, at::Generator& g) { v.random_(from, to, g); });
}
at::Tensor& bernoulli_float(at::Tensor& self, double p, OptGen gen) {
  return random_fill(self, gen, "aten::bernoulli_.float",
                     [&](at::Tensor& v, at::Generator& g) { v.bernoulli_(p, g); });
}
at::Tensor& bernoulli_tensor(at::Tensor& self, const at::Tensor& p, OptGen gen) {
  TORCH_CHECK(p.device() == self.device() || (p.device().is_cpu() && p.dim() == 0),
              "bernoulli_: p must be on ", self.device(), " like self, got ", p.device());
  const at::Tensor p_host = p.device().is_cpu() ? p : host_view(p);
  return random_fill(self, gen, "aten::bernoulli_.Tensor",
                     [&](at::Tensor& v, at::Generator& g) { v.bernoulli_(p_host, g); });
}
at::Tensor& exponential_(at::Tensor& self, double lambd, OptGen gen) {
  return random_fill(self, gen, "aten::exponential_",
                     [&](at::Tensor& v, at::Generator& g) { v.exponential_(lambd, g); });
}
at::Tensor& log_normal_(at::Tensor& self, double mean, double std, OptGen gen) {
  return random_fill(self, gen, "aten::log_normal_",
                     [&](at::Tensor& v, at::Generator& g) { v.log_normal_(mean, std, g); });
}
at::Tensor& cauchy_(at::Tensor& self, double median, double sigma, OptGen gen) {
  return random_fill(self, gen, "aten::cauchy_",
                     [&](at::Tensor& v, at::Generator& g) { v.cauchy_(median, sigma, g); });
}
at::Tensor& geometric_(at::Tensor& self, double p, OptGen gen) {
  return random_fill(self, gen, "aten::geometric_",
                     [&](at::Tensor& v, at::Generator& g) { v.geometric_(p, g); });
}

// native_dropout (what F.dropout and nn.Dropout reach on neuron in training) takes no generator:
// through the CPU fallback it would draw from the CPU default generator, out of reach of
// torch.neuron.manual_seed and set_rng_state. Same results as ATen's CPU kernel: a bool mask kept
// with probability 1 - p, and the kept values scaled by 1 / (1 - p).
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
  const double keep = 1. - p;
  const double scale = keep == 0. ? 0. : 1. / keep;
  at::Generator host = host_generator_for(std::nullopt, input.device().index(),
                                          static_cast<uint64_t>(input.numel()));
  // A draw and a multiply per element.
  Kernel kernel("aten::native_dropout", input.device(), Engine::kGpSimd);
  kernel.reads(input).writes(output).writes(mask).ops(2 * flops::elementwise(input)).run([&] {
    at::Tensor mask_view = host_view(mask);
    mask_view.bernoulli_(keep, host);
    at::Tensor output_view = host_view(output);
    at::mul_out(output_view, host_view(input), mask_view).mul_(scale);
  });
  return {output, mask};
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

}  // namespace
}  // namespace torch_neuronx
