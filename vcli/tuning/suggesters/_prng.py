"""numpy's default generator in pure Python, for the suggesters that must run without numpy.

`uniforms(key, n)` returns the same floats as `numpy.random.default_rng(key).random(n)`
(SeedSequence entropy mixing, PCG64 with the XSL-RR output, 53-bit doubles), so RANDOM_SEARCH
draws what it drew when it used numpy, and a base install (no `tune` extra) reproduces a study
seeded with numpy. tests/test_suggesters.py checks the equality against numpy itself.

Slow (pure-Python 128-bit arithmetic), which does not matter for a few draws per trial.
"""

from __future__ import annotations

from typing import Sequence

__all__ = ["uniforms"]

_MASK32 = 0xFFFFFFFF
_MASK64 = (1 << 64) - 1
_MASK128 = (1 << 128) - 1

# numpy/random/bit_generator.pyx (SeedSequence)
_INIT_A = 0x43B0D7E5
_MULT_A = 0x931E8875
_INIT_B = 0x8B51F9DD
_MULT_B = 0x58F38DED
_MIX_MULT_L = 0xCA01F9DD
_MIX_MULT_R = 0x4973F715
_XSHIFT = 16
_POOL_SIZE = 4

# numpy/random/src/pcg64 (PCG_DEFAULT_MULTIPLIER_128)
_PCG_MULT = 0x2360ED051FC65DA44385DF649FCCF645


def _words(value: int) -> list[int]:
    """An entropy integer as little-endian 32-bit words (0 -> [0]), as SeedSequence coerces it."""
    if value < 0:
        raise ValueError(f"seed entropy must be non-negative, got {value}")
    if value == 0:
        return [0]
    out = []
    while value:
        out.append(value & _MASK32)
        value >>= 32
    return out


class _Hash:
    """SeedSequence's running hash constant and its `hashmix`."""

    def __init__(self) -> None:
        self.const = _INIT_A

    def mix(self, value: int) -> int:
        value ^= self.const
        self.const = (self.const * _MULT_A) & _MASK32
        value = (value * self.const) & _MASK32
        return value ^ (value >> _XSHIFT)


def _mix(x: int, y: int) -> int:
    result = (_MIX_MULT_L * x - _MIX_MULT_R * y) & _MASK32
    return result ^ (result >> _XSHIFT)


def _pool(key: Sequence[int]) -> list[int]:
    """SeedSequence(key).pool."""
    entropy = [w for part in key for w in _words(int(part))]
    h = _Hash()
    pool = [h.mix(entropy[i]) if i < len(entropy) else h.mix(0) for i in range(_POOL_SIZE)]
    for src in range(_POOL_SIZE):
        for dst in range(_POOL_SIZE):
            if src != dst:
                pool[dst] = _mix(pool[dst], h.mix(pool[src]))
    for src in range(_POOL_SIZE, len(entropy)):
        for dst in range(_POOL_SIZE):
            pool[dst] = _mix(pool[dst], h.mix(entropy[src]))
    return pool


def _state_words64(pool: list[int], n: int) -> list[int]:
    """SeedSequence.generate_state(n, uint64)."""
    const = _INIT_B
    words32 = []
    for i in range(2 * n):
        value = pool[i % _POOL_SIZE] ^ const
        const = (const * _MULT_B) & _MASK32
        value = (value * const) & _MASK32
        words32.append(value ^ (value >> _XSHIFT))
    return [words32[2 * i] | (words32[2 * i + 1] << 32) for i in range(n)]


def uniforms(key: Sequence[int], n: int) -> list[float]:
    """`numpy.random.default_rng(list(key)).random(n)` as Python floats in [0, 1)."""
    s0, s1, i0, i1 = _state_words64(_pool(key), 4)
    inc = ((((i0 << 64) | i1) << 1) | 1) & _MASK128
    state = 0
    state = (state * _PCG_MULT + inc) & _MASK128
    state = (state + ((s0 << 64) | s1)) & _MASK128
    state = (state * _PCG_MULT + inc) & _MASK128
    out = []
    for _ in range(n):
        state = (state * _PCG_MULT + inc) & _MASK128
        rot = state >> 122
        value = ((state >> 64) ^ state) & _MASK64
        value = ((value >> rot) | (value << (64 - rot))) & _MASK64 if rot else value
        out.append((value >> 11) * (1.0 / 9007199254740992.0))
    return out
