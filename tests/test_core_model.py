import numpy as np
import pytest
import torch

from _reference import naive_sample
from chain import P0, P, chain_simulator, exact_marginals
from focus_tune.scoring.montecarlo import marginal_probs
from focus_tune.sim.model import Simulator


def images(n, size=32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (n, 3, size, size), generator=g, dtype=torch.uint8)


@pytest.mark.parametrize("encoder", ["small", "resnet18"])
def test_forward_shapes_and_teacher_forcing(encoder):
    torch.manual_seed(0)
    sim = Simulator(5, encoder=encoder, embed_dim=16, hidden=8).eval()
    x, seq = images(3), torch.randint(0, 5, (3, 7))
    z = sim(x, seq)
    assert z.shape == (3, 7, 5)
    # Teacher forcing: logits at entry i depend on y_<i only.
    seq2 = seq.clone()
    seq2[:, 4] = (seq2[:, 4] + 1) % 5
    z2 = sim(x, seq2)
    torch.testing.assert_close(z[:, :5], z2[:, :5])
    assert not torch.allclose(z[:, 5], z2[:, 5])


def test_chain_simulator_is_the_chain():
    sim = chain_simulator()
    seq = torch.tensor([[0, 1, 1, 2, 2]])
    logp = torch.log_softmax(sim(images(1), seq), dim=-1)[0].detach().numpy()
    expected = np.log(np.vstack([P0, P[[0, 1, 1, 2]]]).clip(1e-300))
    np.testing.assert_allclose(np.exp(logp), np.exp(expected), atol=1e-9)


def test_sampling_reproducible_from_seed():
    torch.manual_seed(0)
    sim = Simulator(4, encoder="small", embed_dim=8, hidden=8)
    x = images(2)
    a = sim.sample(x, 5, 12, generator=torch.Generator().manual_seed(7), forced_event=3)
    b = sim.sample(x, 5, 12, generator=torch.Generator().manual_seed(7), forced_event=3)
    c = sim.sample(x, 5, 12, generator=torch.Generator().manual_seed(8), forced_event=3)
    assert a.shape == (2, 5, 12) and a.dtype == torch.long
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert sim.training, "sample() must restore the training mode"


@pytest.mark.parametrize("absorbing", [None, 2])
def test_fast_sampler_matches_naive_reference_draw_for_draw(absorbing):
    # float64 model: the two implementations then agree to ~1e-16 and no draw flips.
    torch.manual_seed(1)
    sim = Simulator(3, encoder="small", embed_dim=6, hidden=6).double()
    with torch.no_grad():
        sim.head.bias[2] += 1.0  # make the absorbing class common, so rows drop out
    x = images(4)
    fast = sim.sample(x, 50, 25, generator=torch.Generator().manual_seed(3), forced_event=absorbing)
    slow = naive_sample(sim, x, 50, 25, generator=torch.Generator().manual_seed(3), forced_event=absorbing)
    assert torch.equal(fast, slow)
    if absorbing is not None:
        # once absorbed, always absorbed; and the shortcut actually fired
        hit = (fast == absorbing).cumsum(-1) > 0
        assert torch.all(fast[hit] == absorbing)
        assert hit[..., 5].float().mean() > 0.3


def test_temperature_matches_naive_reference_draw_for_draw():
    torch.manual_seed(2)
    sim = Simulator(4, encoder="small", embed_dim=6, hidden=6).double()
    x, L = images(3), 9
    temperature = torch.linspace(0.5, 2.0, L, dtype=torch.float64)
    fast = sim.sample(x, 40, L, generator=torch.Generator().manual_seed(4), temperature=temperature)
    slow = naive_sample(sim, x, 40, L, generator=torch.Generator().manual_seed(4), temperature=temperature)
    plain = sim.sample(x, 40, L, generator=torch.Generator().manual_seed(4))
    assert torch.equal(fast, slow) and not torch.equal(fast, plain)
    ones = sim.sample(x, 40, L, generator=torch.Generator().manual_seed(4), temperature=torch.ones(L))
    assert torch.equal(ones, plain)


def test_temperature_samples_the_tempered_chain():
    # Entry i drawn from softmax(log P[prev] / T_i): the tempered chain's marginals.
    sim = chain_simulator()
    L, M = 6, 4000
    temperature = torch.tensor([2.0, 0.5, 1.0, 3.0, 1.0, 0.7], dtype=torch.float64)
    s = sim.sample(images(1), M, L, generator=torch.Generator().manual_seed(5), temperature=temperature)

    def tempered(p, t):
        q = np.exp(np.log(np.clip(p, 1e-300, None)).clip(min=-200.0) / t)
        return q / q.sum(axis=-1, keepdims=True)

    cur, exact = tempered(P0, 2.0), []
    exact.append(cur)
    for t in temperature[1:].tolist():
        cur = cur @ tempered(P, t)
        exact.append(cur)
    exact = np.array(exact)
    est = marginal_probs(s, 3)[0]
    se = np.sqrt(exact * (1 - exact) / M) + 1e-12
    assert np.all(np.abs(est - exact) <= 4 * se + 1e-9)


def test_sampled_marginals_match_the_chain():
    sim = chain_simulator()
    L, M = 8, 4000
    s = sim.sample(images(1), M, L, generator=torch.Generator().manual_seed(0), forced_event=2)
    est = marginal_probs(s, 3)[0]
    exact = exact_marginals(L)
    se = np.sqrt(exact * (1 - exact) / M) + 1e-12
    assert np.all(np.abs(est - exact) <= 4 * se + 1e-9)


def test_forced_prefix_gives_exact_conditionals():
    sim = chain_simulator()
    L, M = 8, 4000
    s = sim.sample(images(1), M, L, generator=torch.Generator().manual_seed(1), prefix=[1])
    assert torch.all(s[..., 0] == 1)
    est = marginal_probs(s, 3)[0]
    exact = exact_marginals(L, start=1)  # P(Y_i | Y_1 = 1)
    se = np.sqrt(exact * (1 - exact) / M) + 1e-12
    assert np.all(np.abs(est - exact) <= 4 * se + 1e-9)


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="encoder"):
        Simulator(3, encoder="vgg")
    sim = Simulator(3, encoder="small", embed_dim=4, hidden=4)
    with pytest.raises(TypeError, match="uint8"):
        sim(torch.zeros(1, 3, 8, 8), torch.zeros(1, 2, dtype=torch.long))
    with pytest.raises(ValueError, match="prefix"):
        sim.sample(images(1, 8), 2, 3, prefix=[0, 1, 2, 0])
    with pytest.raises(ValueError, match="absorbing"):
        sim.sample(images(1, 8), 2, 3, forced_event=5)
    with pytest.raises(ValueError, match="temperature"):
        sim.sample(images(1, 8), 2, 3, temperature=torch.tensor([1.0, 0.0, 1.0]))
    with pytest.raises(ValueError, match="temperature"):
        sim.sample(images(1, 8), 2, 3, temperature=torch.ones(4))


def test_resnet18_width_keeps_the_architecture():
    """encoder_width narrows every stage of ResNet-18 and keeps its depth and layout."""
    import torchvision

    standard = Simulator(5, "resnet18", 32, 32).encoder
    reference = torchvision.models.resnet18(weights=None, num_classes=32)
    assert [p.shape for p in standard.parameters()] == [p.shape for p in reference.parameters()]

    narrow = Simulator(5, "resnet18", 32, 32, encoder_width=32).encoder
    convs = [m for m in narrow.modules() if isinstance(m, torch.nn.Conv2d)]
    ref_convs = [m for m in reference.modules() if isinstance(m, torch.nn.Conv2d)]
    assert len(convs) == len(ref_convs) == 20  # 17 3x3/7x7 convs + 3 downsampling 1x1
    for a, b in zip(convs, ref_convs):
        assert a.kernel_size == b.kernel_size and a.stride == b.stride
        assert a.out_channels * 2 == b.out_channels
    n_narrow = sum(p.numel() for p in narrow.parameters())
    n_ref = sum(p.numel() for p in reference.parameters())
    assert 0.2 < n_narrow / n_ref < 0.3  # channels halved -> about a quarter of the weights
    out = Simulator(5, "resnet18", 32, 32, encoder_width=16)(
        torch.zeros(2, 3, 32, 32, dtype=torch.uint8), torch.zeros(2, 4, dtype=torch.long))
    assert out.shape == (2, 4, 5)


def _torchvision_resnet18(in_channels: int, embed_dim: int, width: int):
    """The encoder as it was built with torchvision's own classes (the reference)."""
    import torchvision
    from torchvision.models.resnet import BasicBlock

    net = torchvision.models.resnet.ResNet(BasicBlock, [2, 2, 2, 2], num_classes=embed_dim)
    if width == 64:
        if in_channels != 3:
            net.conv1 = torch.nn.Conv2d(in_channels, 64, kernel_size=7, stride=2, padding=3, bias=False)
        return net
    net.conv1 = torch.nn.Conv2d(in_channels, width, kernel_size=7, stride=2, padding=3, bias=False)
    net.bn1 = torch.nn.BatchNorm2d(width)
    net.inplanes = width
    net.layer1 = net._make_layer(BasicBlock, width, 2)
    net.layer2 = net._make_layer(BasicBlock, 2 * width, 2, stride=2)
    net.layer3 = net._make_layer(BasicBlock, 4 * width, 2, stride=2)
    net.layer4 = net._make_layer(BasicBlock, 8 * width, 2, stride=2)
    net.fc = torch.nn.Linear(8 * width, embed_dim)
    for m in net.modules():
        if isinstance(m, torch.nn.Conv2d):
            torch.nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
    return net


@pytest.mark.parametrize("width,in_channels", [(64, 3), (64, 1), (32, 3), (16, 1)])
def test_own_resnet18_equals_torchvisions_bit_for_bit(width, in_channels):
    """The encoder is built without importing torchvision; under one seed it has torchvision's
    weights, buffers and outputs exactly (in training and eval mode), so seeds and saved models
    of earlier versions still mean the same network."""
    from focus_tune.sim.model import _resnet18

    torch.manual_seed(3)
    ours = _resnet18(in_channels, 24, width)
    torch.manual_seed(3)
    ref = _torchvision_resnet18(in_channels, 24, width)
    a, b = ours.state_dict(), ref.state_dict()
    assert list(a) == list(b)
    for name in a:
        assert torch.equal(a[name], b[name]), name
    x = torch.randn(4, in_channels, 32, 32)
    for mode in (True, False):
        ours.train(mode), ref.train(mode)
        assert torch.equal(ours(x), ref(x))


def test_building_a_model_does_not_import_torchvision():
    """torchvision's import pulls in torch._dynamo (seconds of CPU in every trial's process)."""
    import subprocess
    import sys

    code = ("import sys, focus_tune.search.trainable, focus_tune.sim.model as m; m.Simulator(5, 'resnet18', 32, 32, "
            "encoder_width=16); "
            "print(sorted(k for k in sys.modules if k.startswith(('torchvision', 'torch._dynamo'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
