"""Shared helpers of the Triton kernel tests (imported only after torch is known to be present)."""

import torch

#: upper bounds of norm(out - ref) / norm(ref) per input dtype (fp32 accumulate everywhere)
TOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1e-2}


def relerr(out, ref):
    """Relative error against a float64 reference; unwritten (NaN-poisoned) elements fail."""
    out = out.double()
    assert not torch.isnan(out).any(), "output has unwritten (NaN) elements"
    return float((out - ref).norm() / ref.norm())
