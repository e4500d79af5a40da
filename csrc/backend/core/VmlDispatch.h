// Resolves oneMKL VML's kernel dispatch once, on one thread, before any kernel can call it from
// several threads at once. See VmlDispatch.cpp for why.
#pragma once

namespace torch_neuronx {

// Idempotent and cheap (a few dozen 16-element CPU ops on the first call, nothing afterwards).
void resolve_vml_dispatch();

}  // namespace torch_neuronx
