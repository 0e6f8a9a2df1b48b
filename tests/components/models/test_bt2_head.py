"""BT² head (components/models/heads/bt2.py; the BT² paper §3.3–3.4, Algorithm 1)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from components.models import build_model
from components.models.heads.bt2 import BT2Head, orthonormal_from_skew
from tests.helpers import tiny_spec


def _randomise(head: BT2Head, seed: int = 0) -> None:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        head.b1.copy_(torch.randn(head.b1.shape, generator=g))
        head.b2.copy_(torch.randn(head.b2.shape, generator=g))


def test_orthonormal_from_skew_is_orthonormal_and_uses_only_the_upper_triangle():
    g = torch.Generator().manual_seed(0)
    u = torch.randn(6, 6, generator=g, dtype=torch.float64)
    p = orthonormal_from_skew(u)
    eye = torch.eye(6, dtype=torch.float64)
    assert torch.allclose(p @ p.t(), eye, atol=1e-10)
    assert torch.allclose(p.t() @ p, eye, atol=1e-10)
    assert float(torch.linalg.det(p)) == pytest.approx(1.0, abs=1e-10)  # exp of a skew matrix: a rotation
    assert not torch.allclose(p, eye, atol=1e-3)
    # A = U − Uᵀ with U the strict upper triangle: the lower triangle and the diagonal are ignored
    v = u.clone()
    v += torch.randn(6, 6, generator=g, dtype=torch.float64).tril(0)
    assert torch.allclose(orthonormal_from_skew(v), p, atol=1e-12)
    # ...but the upper triangle matters
    w = u.clone()
    w[0, 3] += 0.5
    assert not torch.allclose(orthonormal_from_skew(w), p, atol=1e-3)
    # exp(0) = I, and a single upper entry θ at (0, 1) is a plane rotation by θ
    assert torch.allclose(orthonormal_from_skew(torch.zeros(4, 4)), torch.eye(4))
    r = torch.zeros(2, 2, dtype=torch.float64)
    r[0, 1] = 0.3
    c, s = torch.cos(torch.tensor(0.3, dtype=torch.float64)), torch.sin(torch.tensor(0.3, dtype=torch.float64))
    assert torch.allclose(
        orthonormal_from_skew(r), torch.stack([torch.stack([c, s]), torch.stack([-s, c])]), atol=1e-12
    )


def _feats(b=5, f=12, seed=1):
    return torch.randn(b, f, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("m,n,d", [(6, 5, 2), (8, 8, 3), (6, 4, 0)])
def test_head_shapes_unit_norm_and_compat_prefix(m, n, d):
    torch.manual_seed(0)
    head = BT2Head(12, m, n, d)
    _randomise(head)
    out = head(_feats())
    assert out.z.shape == (5, m + d) and out.emb.shape == (5, m + d)
    assert torch.allclose(out.emb.norm(dim=-1), torch.ones(5), atol=1e-6)
    assert torch.allclose(out.emb, F.normalize(out.z, dim=-1))
    assert out.aux["compat"].shape == (5, n)
    assert torch.allclose(out.aux["compat"], F.normalize(out.z[:, :n], dim=-1), atol=1e-6)
    # the classifier and the "independent" part both see φ3 = normalise(φ1[:m])
    phi1 = head.neck(_feats())
    phi3 = F.normalize(phi1[:, :m], dim=-1)
    assert torch.allclose(out.cls_input, phi3, atol=1e-6) and torch.allclose(out.aux["independent"], phi3, atol=1e-6)
    assert not out.clipped.any()


def test_identity_transforms_and_no_extra_dims_give_phi3():
    """Algorithm 1 with B1 = B2 = I, C = 1, d = 0: φ4 = φ3, φ5 = φ3[:n], φ_new = [φ3[:n]; φ3[n:]] = φ3."""
    torch.manual_seed(0)
    head = BT2Head(12, 6, 4, 0, scale_c=1.0)
    x = _feats()
    out = head(x)
    phi3 = F.normalize(head.neck(x)[:, :6], dim=-1)
    assert torch.allclose(out.z, phi3, atol=1e-6)


def test_identity_transforms_with_extra_dims_put_phi2_first():
    """B1 = B2 = I, C = 1: φ_new = [normalise(f(φ1)); φ3] — φ3 kept whole behind the d new dimensions."""
    torch.manual_seed(0)
    m, n, d = 6, 5, 2
    head = BT2Head(12, m, n, d, scale_c=1.0)
    x = _feats()
    out = head(x)
    phi1 = head.neck(x)
    phi2 = F.normalize(head.f(phi1), dim=-1)
    phi3 = F.normalize(phi1[:, :m], dim=-1)
    assert torch.allclose(out.z[:, :d], phi2, atol=1e-6)
    assert torch.allclose(out.z[:, d:], phi3, atol=1e-6)


@pytest.mark.parametrize("c", [1.0, 2.0])
def test_basis_transformations_preserve_the_information_of_phi3(c):
    """Lemma 3: with any orthonormal B1, B2, ⟨φ_new(x_i), φ_new(x_j)⟩ (before the final normalisation)
    = C²⟨φ3_i, φ3_j⟩ + ⟨φ2_i, φ2_j⟩; with d = 0, z zᵀ = C² φ3 φ3ᵀ exactly."""
    torch.manual_seed(0)
    x = _feats(b=6)
    for m, n, d in [(6, 5, 2), (6, 4, 0)]:
        head = BT2Head(12, m, n, d, scale_c=c)
        _randomise(head, seed=3)
        out = head(x)
        phi1 = head.neck(x)
        phi3 = F.normalize(phi1[:, :m], dim=-1)
        gram = c**2 * phi3 @ phi3.t()
        if d:
            phi2 = F.normalize(head.f(phi1), dim=-1)
            gram = gram + phi2 @ phi2.t()
        assert torch.allclose(out.z @ out.z.t(), gram, atol=1e-5)
        assert torch.allclose(out.z.norm(dim=-1) ** 2, torch.full((6,), c**2 + (1.0 if d else 0.0)), atol=1e-5)


def test_explicit_algorithm_1_with_random_bases():
    """φ4 = C B1 φ3; φ5 = B2 [φ2; φ4[:n−d]]; φ_new = [φ5; φ4[n−d:]] with B = exp(U − Uᵀ), computed by hand."""
    torch.manual_seed(0)
    m, n, d, c = 6, 5, 2, 1.5
    head = BT2Head(12, m, n, d, scale_c=c)
    _randomise(head, seed=5)
    x = _feats()
    out = head(x)

    def rot(params):
        u = params.detach().double().triu(1)
        return torch.linalg.matrix_exp(u - u.t())

    phi1 = head.neck(x).detach().double()
    phi2 = F.normalize(head.f(head.neck(x)).detach().double(), dim=-1)
    phi3 = F.normalize(phi1[:, :m], dim=-1)
    phi4 = c * phi3 @ rot(head.b1).t()  # rows: (B1 φ3)ᵀ
    phi5 = torch.cat([phi2, phi4[:, : n - d]], dim=1) @ rot(head.b2).t()
    expected = torch.cat([phi5, phi4[:, n - d :]], dim=1)
    assert torch.allclose(out.z.double(), expected, atol=1e-5)


def test_bt2_model_builds_from_spec():
    torch.manual_seed(0)
    spec = tiny_spec(geometry="euclidean", head="bt2", compat_dim=16, extra_dims=4)
    assert spec.output_dim == 20
    model = build_model(spec).eval()
    x = torch.rand(3, 1, 8, 8)
    with torch.no_grad():
        out = model(x)
    assert out.z.shape == (3, 20) and out.emb.shape == (3, 20)
    assert out.logits.shape == (3, 10)
    assert out.aux["compat"].shape == (3, 16)
    # logits come from φ3 (the independent part), not from the BT² output
    assert torch.allclose(out.logits, model.classifier(out.aux["independent"]), atol=1e-6)
    with pytest.raises(ValueError):
        tiny_spec(geometry="lorentz", head="bt2", compat_dim=16, extra_dims=4)
    with pytest.raises(ValueError):
        tiny_spec(geometry="euclidean", head="bt2", compat_dim=16, extra_dims=17)
    with pytest.raises(ValueError):
        tiny_spec(geometry="euclidean", extra_dims=4)  # standard head


def test_the_head_leaves_matrix_exp_out_of_compile_without_importing_dynamo_at_import_and_pickles_to_a_new_process(
    tmp_path,
):
    """Importing the head catalog does not import torch._dynamo (2 s of every command's start-up); a built head
    holds orthonormal_from_skew under torch.compiler.disable, and pickles by that wrapper's module name, so the
    spawn of distributed training hands it to a new process that answers the same."""
    import pickle
    import subprocess
    import sys

    code = "import sys, components.models.heads.bt2; print('torch._dynamo' in sys.modules)"
    imported = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert imported.stdout.strip() == "False", imported.stderr
    head = BT2Head(8, 4, 4, 2)
    _randomise(head)
    assert getattr(head._orthonormal, "_torchdynamo_disable", False)  # left out of torch.compile
    x = torch.randn(3, 8)
    torch.save(x, tmp_path / "x.pt")
    (tmp_path / "head.pkl").write_bytes(pickle.dumps(head))
    torch.save(head(x).emb.detach(), tmp_path / "emb.pt")
    check = (
        "import pickle, sys, torch; head = pickle.loads(open(sys.argv[1], 'rb').read()); "
        "x, emb = torch.load(sys.argv[2]), torch.load(sys.argv[3]); print(torch.equal(head(x).emb, emb))"
    )
    args = [str(tmp_path / n) for n in ("head.pkl", "x.pt", "emb.pt")]
    answered = subprocess.run([sys.executable, "-c", check, *args], capture_output=True, text=True, check=True)
    assert answered.stdout.strip() == "True", answered.stderr
