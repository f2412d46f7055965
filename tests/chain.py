"""A known Markov chain, and a Simulator whose weights encode it exactly.

With W_hh = 0, a closed forget gate and an open input gate, the LSTM's hidden state is a
function of the previous token alone, so the simulator *is* a first-order Markov chain:
p(y_i | x, y_<i) = P[y_{i-1}, y_i] (start token row = initial distribution).
"""

import numpy as np
import torch

from focus_tune.sim.model import Simulator

# 3 classes: 0 and 1 mix, 2 is absorbing.
P = np.array([[0.7, 0.2, 0.1], [0.3, 0.5, 0.2], [0.0, 0.0, 1.0]])
P0 = np.array([0.5, 0.4, 0.1])  # distribution of Y_1


def chain_simulator(P=P, p0=P0) -> Simulator:
    c = P.shape[0]
    rows = np.vstack([P, p0])  # token c is the start token
    H = c + 1
    sim = Simulator(c, encoder="small", embed_dim=H, hidden=H).double()
    big = 40.0
    with torch.no_grad():
        sim.lstm.weight_hh_l0.zero_()
        sim.lstm.bias_hh_l0.zero_()
        sim.lstm.weight_ih_l0.zero_()
        sim.token.weight.copy_(torch.eye(H, dtype=torch.float64))
        b = torch.zeros(4 * H, dtype=torch.float64)
        b[:H] = big  # input gate open
        b[H : 2 * H] = -big  # forget gate closed: h_0 is forgotten
        b[3 * H :] = big  # output gate open
        sim.lstm.bias_ih_l0.copy_(b)
        # cell gate g: +big on the unit of the previous token, -big elsewhere.
        w = torch.full((H, H), -big, dtype=torch.float64) + 2 * big * torch.eye(H, dtype=torch.float64)
        sim.lstm.weight_ih_l0[2 * H : 3 * H].copy_(w)
        # h = tanh(tanh(+-big)) = +-t, so logits = W h + b with W[a, u] = log rows[u, a] / (2 t)
        # and b[a] = t * sum_u W[a, u] give logits[a] = log rows[prev, a].
        t = np.tanh(1.0)
        logp = np.log(np.clip(rows, 1e-300, None)).clip(min=-200.0)  # (H, c)
        W = torch.tensor(logp.T / (2 * t))
        sim.head.weight.copy_(W)
        sim.head.bias.copy_(t * W.sum(dim=1))
    return sim.eval()


def exact_marginals(L: int, P=P, p0=P0, start=None) -> np.ndarray:
    """[L, c]: P(Y_i = a), optionally given Y_1 = start."""
    cur = p0 if start is None else np.eye(P.shape[0])[start]
    out = [cur]
    for _ in range(L - 1):
        cur = cur @ P
        out.append(cur)
    return np.array(out)


def draw_chain(n: int, m: int, L: int, rng: np.random.Generator, P=P, p0=P0) -> np.ndarray:
    """[n, m, L] sequences drawn from the chain with numpy (independent of the simulator)."""
    c = P.shape[0]
    out = np.empty((n, m, L), dtype=np.int64)
    cdf0, cdf = np.cumsum(p0), np.cumsum(P, axis=1)
    out[..., 0] = np.searchsorted(cdf0, rng.random((n, m)), side="right")
    for i in range(1, L):
        u = rng.random((n, m))
        out[..., i] = (u[..., None] >= cdf[out[..., i - 1]]).sum(-1).clip(max=c - 1)
    return out
