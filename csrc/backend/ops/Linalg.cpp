// Dense linear algebra: triangular solves, Cholesky, LU, QR, eigen- and singular-value
// decompositions, inverses, determinants and least squares, with the helpers their derivatives
// call. Models reach them in small sizes (gated delta-rule attention solves a triangular system
// per chunk; optimizers and samplers take Cholesky factors), so the CPU's LAPACK on the device
// buffers is the kernel. On a NeuronCore these are matrix products: the Tensor engine.
#include <torch/library.h>

#include "backend/core/BoxedHostMath.h"

namespace torch_neuronx {
namespace {

constexpr OpFamily kLinalg{"linalg", nrtsim::Engine::kTensor, &flops::factorization};

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  register_host_math_ops(m, kLinalg, {
      // solves
      "linalg_solve_triangular", "triangular_solve", "_linalg_solve_ex", "linalg_lu_solve",
      "_cholesky_solve_helper", "linalg_ldl_solve", "linalg_lstsq",
      // factorizations
      "linalg_cholesky_ex", "cholesky", "cholesky_inverse", "linalg_lu_factor_ex", "linalg_lu",
      "lu_unpack", "linalg_ldl_factor_ex", "linalg_qr", "geqrf", "ormqr",
      "linalg_householder_product",
      // spectra
      "_linalg_eigh", "linalg_eig", "_linalg_eigvals", "_linalg_svd",
      // inverses and determinants
      "linalg_inv_ex", "_linalg_det", "_linalg_slogdet", "linalg_matrix_exp", "linalg_cross",
  });
}

}  // namespace
}  // namespace torch_neuronx
