"""The smoke step's parameter fingerprints (trl_doctor/facts/trainer_run/fingerprint.py): every change an optimizer step can
make is seen, an untouched tensor is never reported, and they cost a bounded scratch instead of a model copy."""

import pytest

from conftest import LazyModule
from trl_doctor.facts.trainer_run.fingerprint import CHUNK_WORDS, changed, fingerprints

pytestmark = pytest.mark.release_free  # the doctor's own snapshot arithmetic: no release changes it
torch = LazyModule("torch")


def _fp(t):
    return fingerprints([("t", t)])["t"]


@pytest.mark.parametrize("name", ["bfloat16", "float16", "float32"])
def test_one_ulp_of_one_element_is_seen(name):
    dtype = getattr(torch, name)
    t = torch.randn(1000, 37, generator=torch.Generator().manual_seed(0)).to(dtype)
    moved = t.clone()
    moved.view(-1)[12345] = torch.nextafter(moved.view(-1)[12345].float(), torch.tensor(float("inf"))).to(dtype) \
        if dtype == torch.float32 else _next_16bit(moved.view(-1)[12345])
    assert not torch.equal(t, moved)
    assert _fp(t) != _fp(moved)
    assert _fp(t) == _fp(t.clone())


def _next_16bit(x):
    """The next representable 16-bit float above x (one ulp: the bit pattern plus one)."""
    bits = x.reshape(1).view(torch.int16) + 1
    return bits.view(x.dtype)[0]


def test_compensating_changes_and_permutations_are_seen():
    t = torch.randn(4096).to(torch.bfloat16)
    bits = t.view(torch.int16).clone()
    bits[10] += 3  # +3 ulps here, -3 there: the plain sum of the words stays equal
    bits[2000] -= 3
    assert _fp(t) != _fp(bits.view(torch.bfloat16))
    assert _fp(t) != _fp(t.flip(0).contiguous())  # the same values in another order


def test_a_realistic_optimizer_step_on_bf16_and_a_sign_flip_are_seen():
    torch.manual_seed(0)
    w = torch.nn.Parameter(torch.randn(64, 64).to(torch.bfloat16))
    before, copy = fingerprints([("w", w)]), w.detach().clone()
    w.grad = torch.randn_like(w) * 1e-3
    torch.optim.AdamW([w], lr=1e-4).step()  # small steps: most bf16 elements round back to themselves
    moved = int((w.detach() != copy).sum())
    assert 0 < moved < w.numel() // 4, moved  # a few elements moved, as in a real low-learning-rate step
    assert changed(before, _holding(w)) == ["w"]
    x = torch.tensor([1.5, -2.0])
    assert _fp(x) != _fp(-x)


def test_other_dtypes_views_and_sizes():
    for t in (torch.zeros(0), torch.arange(7, dtype=torch.int8), torch.tensor([True, False, True]),
              torch.randn(8, 6)[:, ::2], torch.randn(CHUNK_WORDS + 5)):  # empty, 1-byte, bool, strided, two chunks
        assert _fp(t) == _fp(t.clone())
        if t.numel():
            moved = t.clone()
            flat = moved.view(-1)
            flat[-1] = ~flat[-1] if t.dtype in (torch.bool, torch.int8) else flat[-1] + 1
            assert _fp(t) != _fp(moved), t.dtype


def test_frozen_and_trained_tensors_of_a_model():
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 2))
    model[0].requires_grad_(False)
    trainable = fingerprints((n, p) for n, p in model.named_parameters() if p.requires_grad)
    frozen = fingerprints((n, p) for n, p in model.named_parameters() if not p.requires_grad)
    model(torch.randn(4, 8)).sum().backward()
    torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1).step()
    assert changed(trainable, model) == ["1.weight", "1.bias"]
    assert changed(frozen, model) == []
    with torch.no_grad():
        model[0].bias[3] += 1e-3  # a frozen tensor that something wrongly touched
    assert changed(frozen, model) == ["0.bias"]


def _holding(w):
    """A module holding the one parameter `w`."""
    holder = torch.nn.Module()
    holder.w = w
    return holder
