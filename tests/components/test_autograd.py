"""components/autograd.py: scale_grad leaves values alone and multiplies the gradient."""

from __future__ import annotations

import pytest
import torch

from components.autograd import scale_grad


@pytest.mark.parametrize("factor", [2.0, -0.5, 0.0])
def test_scale_grad_is_identity_forward_and_scales_backward(factor):
    x = torch.randn(4, 3, requires_grad=True)
    y = scale_grad(x, factor)
    assert torch.equal(y, x)
    (y * torch.arange(12.0).view(4, 3)).sum().backward()
    torch.testing.assert_close(x.grad, factor * torch.arange(12.0).view(4, 3))
