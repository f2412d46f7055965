"""Procedural face images in which age shows, noisily.

Each face is drawn from its *apparent* age, the true age blurred by a person-specific
factor (`apparent = age * exp(N(0, 0.15)) + N(0, 2.5)`, so a 60-year-old looks 51-69 about
two times in three), then rendered with age cues that real faces carry:

- proportions: children have rounder heads, eyes lower on the face and larger, small
  mouths; the lower face widens (jowls) after ~45;
- hair: colour drawn per person, greying from a person-specific onset (~52 +- 8 years),
  thin baby hair, a receding hairline for some men;
- skin: forehead lines, crow's feet, nasolabial folds and under-eye bags that deepen from
  ~28 years, age spots from ~50, eyelids that droop;
- nuisances that do not depend on age: skin tone, hair and eye colour, background and
  clothing colour, lighting, head position, size and tilt, beard, pixel noise.

Everything is vectorised float32 numpy over a batch of faces, drawn on a grid of at least
64 x 64 and box-downsampled to the requested size, so thousands of faces take seconds.
"""
from __future__ import annotations

import numpy as np

_SKIN_LIGHT = np.array([236, 200, 172], np.float32)
_SKIN_DARK = np.array([92, 60, 44], np.float32)
_HAIR = np.array([[25, 20, 18], [70, 45, 30], [125, 85, 50], [200, 165, 105], [150, 70, 35]], np.float32)
_HAIR_P = np.array([0.40, 0.30, 0.14, 0.10, 0.06])
_GREY = np.array([205, 205, 208], np.float32)
_IRIS = np.array([[60, 35, 20], [95, 65, 35], [70, 110, 150], [85, 120, 80]], np.float32)


APPARENT_LOG_SD = 0.15  # the person-specific factor exp(N(0, 0.15)) of `apparent_age`
APPARENT_SD = 2.5  # the additive N(0, 2.5) years of `apparent_age`
APPARENT_MAX = 120.0  # apparent ages are clipped to [0, APPARENT_MAX]


def apparent_age(ages: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """How old each face looks: float32 [N] in [0, 120]."""
    ages = np.asarray(ages, np.float32)
    noisy = ages * np.exp(rng.normal(0, APPARENT_LOG_SD, len(ages))) + rng.normal(0, APPARENT_SD, len(ages))
    return np.clip(noisy, 0, APPARENT_MAX).astype(np.float32)


def render_faces(ages: np.ndarray, size: int, rng: np.random.Generator, batch: int = 256) -> np.ndarray:
    """Faces of the given true ages: ages [N] -> uint8 [N, 3, size, size]."""
    return render_looks(apparent_age(ages, rng), size, rng, batch)


def render_looks(looks: np.ndarray, size: int, rng: np.random.Generator, batch: int = 256) -> np.ndarray:
    """Faces that look the given (apparent) ages: looks [N] -> uint8 [N, 3, size, size].

    The image depends on the true age only through the look: everything else is drawn
    independently of age, which is what makes the image-Bayes predictor of FaceMed exact.
    """
    out = np.empty((len(looks), 3, size, size), np.uint8)
    for start in range(0, len(looks), batch):
        out[start:start + batch] = _render(looks[start:start + batch], size, rng)
    return out


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 + 0.5 * np.tanh(0.5 * x)  # no overflow for large |x|


def _col(x: np.ndarray) -> np.ndarray:
    """Per-face scalar [n] -> [n, 1, 1] to broadcast over the pixel grid."""
    return np.asarray(x, np.float32)[:, None, None]


def _paint(img: np.ndarray, mask: np.ndarray, colour: np.ndarray) -> np.ndarray:
    """Blend colour [n, 3] (or [n, R, R, 3]) into img [n, R, R, 3] with alpha mask [n, R, R]."""
    if colour.ndim == 2:
        colour = colour[:, None, None, :]
    step = colour - img
    step *= mask[..., None]
    img += step
    return img


def _ellipse(u, v, cu, cv, au, av, edge):
    """Soft mask of an ellipse: 1 inside, 0 outside, a ramp of width ~edge."""
    d = np.sqrt(((u - cu) / au) ** 2 + ((v - cv) / av) ** 2) - 1.0
    return _sigmoid(-d / edge)


def _lines(x: np.ndarray, period: np.ndarray, sharp: float = 10.0) -> np.ndarray:
    """Thin periodic lines along x: ~1 on a line, ~0 between lines."""
    return (0.5 + 0.5 * np.cos(2 * np.pi * x / period)) ** sharp


def _render(look: np.ndarray, size: int, rng: np.random.Generator) -> np.ndarray:
    n, factor = len(look), max(1, -(-64 // size))  # draw small faces at >= 64 px, then downsample
    res = size * factor
    grid = (np.arange(res, dtype=np.float32) + 0.5) / res * 2 - 1
    v0, u0 = np.meshgrid(grid, grid, indexing="ij")  # v down, u right, both in [-1, 1]

    # Pose: tilt, shift and scale; every feature is drawn in the head's own frame (u, v).
    tilt = _col(rng.normal(0, 0.08, n))
    scale = _col(rng.normal(1.0, 0.06, n))
    du, dv = _col(rng.normal(0, 0.05, n)), _col(rng.normal(0.02, 0.04, n))
    u = (np.cos(tilt) * (u0 - du) + np.sin(tilt) * (v0 - dv)) / scale
    v = (-np.sin(tilt) * (u0 - du) + np.cos(tilt) * (v0 - dv)) / scale

    growth = _col(np.clip(look / 18, 0, 1))  # 0 = newborn, 1 = adult proportions
    wrinkle = _col(np.clip((look - 28) / 45, 0, 1.2) ** 1.2 * rng.uniform(0.6, 1.3, n))
    spots = _col(np.clip((look - 50) / 30, 0, 1) * rng.uniform(0.4, 1.4, n))
    sag = _col(np.clip((look - 45) / 40, 0, 1))
    grey = np.clip(_sigmoid((look - rng.normal(52, 8, n)) / 6), 0, 1)
    male = rng.random(n) < 0.5
    recede = _col(male * np.clip((look - 25) / 40, 0, 1) * rng.uniform(0, 1, n) ** 2)

    # Colours.
    tone = rng.beta(2.0, 2.0, n).astype(np.float32)[:, None]
    skin = _SKIN_LIGHT + tone * (_SKIN_DARK - _SKIN_LIGHT)
    skin = skin * rng.normal(1.0, 0.04, (n, 3)).astype(np.float32)
    base_hair = _HAIR[rng.choice(len(_HAIR), n, p=_HAIR_P)]
    base_hair = np.where(tone > 0.6, _HAIR[0], base_hair)  # darker skin, dark hair
    hair = base_hair + grey.astype(np.float32)[:, None] * (_GREY - base_hair)
    background = rng.uniform(40, 220, (n, 3)).astype(np.float32)
    clothes = rng.uniform(20, 230, (n, 3)).astype(np.float32)
    iris = _IRIS[rng.integers(0, len(_IRIS), n)]

    # Background with a vertical gradient, then shoulders.
    img = np.broadcast_to(background[:, None, None, :], (n, res, res, 3)).copy()
    img *= (1 + _col(rng.normal(0, 0.15, n)) * v0)[..., None]
    img = _paint(img, _ellipse(u, v, 0, 1.35, 0.95, 0.55, 0.03), clothes)

    # Head geometry: rounder for children, wider jaw with age.
    au = 0.52 + 0.08 * (1 - growth)
    av = au * (1.0 + 0.3 * growth)
    cv = -0.05
    long_hair = _col(rng.random(n) < np.where(male, 0.1, 0.7))
    hair_alpha = _col(np.clip(0.25 + look / 4, 0, 1))  # babies: thin hair
    img = _paint(img, long_hair * hair_alpha * _ellipse(u, v, 0, cv + 0.25, au * 1.25, av * 1.1, 0.03), hair)
    img = _paint(img, _ellipse(u, v, 0, 0.75, 0.16, 0.35, 0.03), skin * 0.85)  # neck
    jowl = 1 + 0.10 * sag * np.clip((v - cv) / av, 0, 1)
    face = _ellipse(u / jowl, v, 0, cv, au, av, 0.02)
    shade = 1 - 0.22 * np.clip(((u / au) ** 2 + ((v - cv) / av) ** 2), 0, 1)
    light = 1 + _col(rng.normal(0, 0.12, n)) * u
    skin_map = skin[:, None, None, :] * (shade * light)[..., None]

    # Skin texture: fine grain everywhere, age spots (a few dark round blotches) with age.
    texture = 1 - 0.03 * rng.standard_normal((n, res, res), dtype=np.float32)
    for _ in range(6):
        su, sv = _col(rng.uniform(-0.4, 0.4, n)), _col(rng.uniform(-0.55, 0.35, n))
        radius = _col(rng.uniform(0.02, 0.05, n))
        texture -= 0.3 * spots * np.exp(-((u - su) ** 2 + (v - sv) ** 2) / radius ** 2)
    skin_map = skin_map * texture[..., None]

    # Wrinkles: a darkening map on the skin.
    eye_v = cv + av * (0.16 - 0.24 * growth)  # eyes sit lower on a child's face
    brow_v = eye_v - 0.13
    hairline_v = cv - av * 0.62 - recede * (0.25 + 0.6 * u ** 2)
    forehead = np.clip((brow_v - 0.04 - v) * 12, 0, 1) * np.clip((v - hairline_v - 0.05) * 12, 0, 1)
    lines = forehead * _lines(v - brow_v, _col(rng.uniform(0.045, 0.06, n)))
    eye_u = 0.40 * au
    corner = np.minimum(np.hypot(np.abs(u) - eye_u - 0.13, v - eye_v), 1.0)
    feet = np.exp(-((corner - 0.05) / 0.03) ** 2) * _lines(np.arctan2(v - eye_v, np.abs(u) - eye_u) * 0.3, 0.12)
    mouth_v = cv + av * (0.55 - 0.05 * growth)
    fold_u = 0.12 + 0.05 * growth + 0.6 * np.clip(v - eye_v - 0.12, 0, None) ** 1.5
    folds = np.exp(-((np.abs(u) - fold_u) / 0.018) ** 2) * ((v > eye_v + 0.18) & (v < mouth_v + 0.05))
    bags = np.exp(-((np.hypot((np.abs(u) - eye_u) / 1.4, v - eye_v - 0.05) - 0.075) / 0.015) ** 2) * (v > eye_v)
    dark = wrinkle * (0.30 * lines + 0.35 * feet + 0.35 * folds + 0.25 * bags)
    skin_map = skin_map * (1 - np.clip(dark, 0, 0.6))[..., None]
    img = _paint(img, face, skin_map)

    # Eyebrows and eyes: large and round in children, narrowing and drooping with age.
    brow = _ellipse(np.abs(u), v, eye_u, brow_v, 0.11, 0.025 + 0.01 * growth, 0.03) * face
    img = _paint(img, 0.8 * brow * hair_alpha, hair * 0.8)
    eye_r = 0.075 + 0.04 * (1 - growth)
    open_ = eye_r * (0.55 - 0.25 * sag)
    eye = _ellipse(np.abs(u), v, eye_u, eye_v, eye_r * 1.3, open_, 0.05)
    img = _paint(img, eye, np.full((n, 3), 235, np.float32))
    img = _paint(img, eye * _ellipse(np.abs(u), v, eye_u, eye_v, eye_r * 0.6, eye_r * 0.6, 0.05), iris)
    img = _paint(img, eye * _ellipse(np.abs(u), v, eye_u, eye_v, eye_r * 0.25, eye_r * 0.25, 0.05),
                 np.full((n, 3), 15, np.float32))

    # Nose and mouth; lips thin with age, the mouth widens as children grow.
    nose = _ellipse(u, v, 0, (eye_v + mouth_v) / 2 + 0.03, 0.05, 0.04, 0.08) * face
    img = _paint(img, 0.35 * nose, skin * 0.6)
    lip_h = 0.045 - 0.02 * sag
    mouth = _ellipse(u, v, 0, mouth_v, 0.07 + 0.09 * growth, lip_h, 0.06) * face
    lips = skin * np.array([0.85, 0.55, 0.55], np.float32)
    img = _paint(img, 0.85 * mouth, lips)

    # Beard for some adult men (grey like the hair).
    beard = _col(male & (look > 18) & (rng.random(n) < 0.3)) * face * np.clip((v - mouth_v + 0.12) * 8, 0, 1)
    img = _paint(img, 0.7 * beard, hair)

    # Hair on top: inside a cap slightly larger than the head, above the hairline.
    strands = 1 + 0.06 * np.sin(u * 60 + _col(rng.uniform(0, 6, n))) * np.sin(v * 7)
    cap = _ellipse(u, v, 0, cv - 0.06, au * 1.12, av * 1.02, 0.02) * _sigmoid((hairline_v - v) / 0.02)
    img = _paint(img, hair_alpha * cap, hair[:, None, None, :] * strands[..., None])

    # Camera: noise, then 2x2 box downsampling.
    img += 4 * rng.standard_normal(img.shape, dtype=np.float32)
    img = img.reshape(n, size, factor, size, factor, 3).mean(axis=(2, 4))
    return np.clip(img, 0, 255).astype(np.uint8).transpose(0, 3, 1, 2)
