"""The one counter-based generator (fpreduce.base.counter): splitmix64's bits in every form.

The Python-integer reference gives splitmix64's published outputs; the numpy twin, the
plain scalar form and the scalar form compiled inside a kernel give the same words and
uniforms on edge and random counters.
"""

import numpy as np
import pytest

from fpreduce.base import counter, jit

needs_jit = pytest.mark.skipif(not jit.AVAILABLE, reason="numba not installed (or FPREDUCE_NO_JIT)")
M64 = (1 << 64) - 1
EDGES = [0, 1, 2, 12345, (1 << 63) - 1, 1 << 63, M64 - 1, M64]


def words(n, seed=0):
    rng = np.random.default_rng(seed)
    return np.concatenate([np.array(EDGES, dtype=np.uint64), rng.integers(0, M64, n, dtype=np.uint64, endpoint=True)])


def test_splitmix64_reference_outputs():
    """splitmix64 seeded with 0: state += GOLD, output mix(state); its first two outputs."""
    assert counter.mix_int(counter.GOLD) == 0xE220A8397B1DCDAF
    assert counter.mix_int(2 * counter.GOLD) == 0x6E789E6AA1B965F4
    with np.errstate(over="ignore"):
        assert int(counter.draw(np.uint64(0), 0)) == 0xE220A8397B1DCDAF
        assert int(counter.draw(np.uint64(0), 1)) == 0x6E789E6AA1B965F4
    assert counter.draw_numpy(0, [0, 1]).tolist() == [0xE220A8397B1DCDAF, 0x6E789E6AA1B965F4]


def test_numpy_twin_equals_the_scalar_form_and_the_reference():
    z, t = words(300, seed=1), words(300, seed=2)
    ref_mix = [counter.mix_int(int(v)) for v in z]
    ref_draw = [counter.mix_int(int(a) + (int(b) + 1) * counter.GOLD) for a, b in zip(z, t, strict=True)]
    assert counter.mix_numpy(z).tolist() == ref_mix
    assert counter.draw_numpy(z, t).tolist() == ref_draw
    with np.errstate(over="ignore"):
        assert [int(counter.mix(v)) for v in z] == ref_mix
        assert [int(counter.draw(a, b)) for a, b in zip(z, t, strict=True)] == ref_draw
        scalar_u = [float(counter.uniform(a, b)) for a, b in zip(z, t, strict=True)]
    u = counter.uniform_numpy(z, t)
    assert u.tolist() == scalar_u
    assert u.tolist() == [(w >> 11) * 2.0**-53 for w in ref_draw]
    assert u.min() >= 0.0
    assert u.max() < 1.0
    e = np.arange(5, dtype=np.uint64)  # broadcasting: elements by additions
    grid = counter.uniform_numpy(counter.draw_numpy(7, e[None, :]), np.arange(3)[:, None])
    assert grid.shape == (3, 5)
    assert grid[2, 4] == counter.uniform_numpy(counter.draw_numpy(7, 4), 2)


@needs_jit
def test_compiled_form_equals_the_numpy_twin():
    numba = jit.numba()

    @numba.njit
    def kernel(z, t, w, u):  # the scalar forms inside a kernel (inlined there)
        for i in range(z.size):
            w[i] = counter.mix(counter.draw(z[i], t[i]))
            u[i] = counter.uniform(counter.draw(z[i], i), t[i])

    z, t = words(500, seed=3), words(500, seed=4)
    w, u = np.empty_like(z), np.empty(z.size)
    kernel(z, t, w, u)
    assert w.tolist() == counter.mix_numpy(counter.draw_numpy(z, t)).tolist()
    i = np.arange(z.size, dtype=np.uint64)
    assert u.tolist() == counter.uniform_numpy(counter.draw_numpy(z, i), t).tolist()
