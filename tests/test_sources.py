import math
import re

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import fpreduce as fr
from fpreduce.run import model as _model
from fpreduce.run.sources import (
    BLOCK,
    FileSpec,
    ModelSource,
    ModelSpec,
    SyntheticSpec,
    open_source,
    spec_from_dict,
)

DISTS = ["normal", "student_t", "lognormal", "sparse"]


def bits(a):
    a = np.asarray(a)
    return a.view({2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize])


def same_bits(a, b):
    return a.shape == b.shape and a.dtype == b.dtype and bool(np.all(bits(a) == bits(b)))


def excess_kurtosis(x):
    x = np.asarray(x, dtype=np.float64).ravel()
    d = x - x.mean()
    return float(np.mean(d**4) / np.mean(d**2) ** 2 - 3.0)


# ---------------------------------------------------------------- specs


@pytest.mark.parametrize("spec", [SyntheticSpec(), ModelSpec(), FileSpec("g.npy")], ids=["syn", "model", "file"])
def test_to_dict_round_trips_with_every_field(spec):
    d = spec.to_dict()
    assert d["kind"] == spec.kind
    assert set(d) == {"kind", *spec.__dataclass_fields__}
    assert type(spec).from_dict(d) == spec
    assert spec_from_dict(d) == spec


def test_spec_from_dict_defaults_to_synthetic_and_converts_int_to_float():
    s = spec_from_dict({"signal": 2, "elements": 16})
    assert s == SyntheticSpec(signal=2.0, elements=16)
    assert type(s.signal) is float


@pytest.mark.parametrize(
    ("d", "words"),
    [
        ({"nosie": 1.0}, ["source.nosie", "did you mean 'noise'"]),
        ({"dist": "gaussian"}, ["source.dist", "'gaussian'", "did you mean 'normal'"]),
        ({"dist": "studnet_t"}, ["source.dist", "did you mean 'student_t'"]),
        ({"outlier_kind": "scaled"}, ["source.outlier_kind", "did you mean 'scale'"]),
        ({"kind": "modle"}, ["source.kind", "did you mean 'model'"]),
        ({"elements": True}, ["source.elements", "integer"]),
        ({"elements": 4096.0}, ["source.elements", "integer"]),
        ({"signal": "1"}, ["source.signal", "number"]),
        ({"signal": False}, ["source.signal", "number"]),
        ({"dist": 3}, ["source.dist", "string"]),
        ({"sparsity": 1.0}, ["source.sparsity"]),
        ({"df": 0}, ["source.df"]),
        ({"noise": -1.0}, ["source.noise"]),
        ({"noise": math.nan}, ["source.noise"]),
        ({"outlier_worker": -2}, ["source.outlier_worker"]),
        ({"elements": 0}, ["source.elements"]),
        ({"kind": "model", "hidden": True}, ["source.hidden", "integer"]),
        ({"kind": "model", "momentum": 1.0}, ["source.momentum"]),
        ({"kind": "model", "lr": 0}, ["source.lr"]),
        ({"kind": "model", "activation": "Relu"}, ["source.activation", "did you mean 'relu'"]),
        ({"kind": "model", "batch_size": 4}, ["source.batch_size", "did you mean 'batch_per_worker'"]),
        ({"kind": "file"}, ["source.path", "required"]),
        ({"kind": "file", "path": ""}, ["source.path"]),
        ({"kind": "file", "path": 3}, ["source.path", "string"]),
    ],
    ids=lambda v: str(v) if isinstance(v, dict) else "",
)
def test_bad_source_tables_name_the_key(d, words):
    with pytest.raises(fr.InvalidArgument) as e:
        spec_from_dict(d)
    msg = str(e.value)
    assert "\n" not in msg
    for w in words:
        assert w in msg


def test_from_dict_rejects_a_kind_of_another_spec():
    with pytest.raises(fr.InvalidArgument, match="source.kind"):
        ModelSpec.from_dict({"kind": "file"})


@pytest.mark.parametrize(
    ("kw", "key"),
    [
        ({"workers": 0, "seed": 0}, "experiment.workers"),
        ({"workers": True, "seed": 0}, "experiment.workers"),
        ({"workers": 2, "seed": -1}, "experiment.seed"),
    ],
)
def test_open_source_checks_workers_and_seed(kw, key):
    with pytest.raises(fr.InvalidArgument, match=key):
        open_source(SyntheticSpec(), **kw)


def test_outlier_worker_must_exist():
    with pytest.raises(fr.InvalidArgument, match="source.outlier_worker"):
        open_source(SyntheticSpec(outlier_worker=4), workers=4, seed=0)


# ---------------------------------------------------------------- synthetic


def syn(workers=8, seed=0, **kw):
    return open_source(SyntheticSpec(**kw), workers=workers, seed=seed)


@pytest.mark.parametrize("dist", DISTS)
def test_synthetic_shape_dtype_and_reproducible_step_by_step(dist):
    a = syn(dist=dist, elements=300)
    assert (a.kind, a.elements, a.max_steps) == ("synthetic", 300, None)
    g5 = a.gradients(5)
    assert g5.shape == (8, 300)
    assert g5.dtype == np.float32
    assert np.all(np.isfinite(g5))
    b = syn(dist=dist, elements=300)
    for t in range(5):  # generating earlier steps first changes nothing
        b.gradients(t)
    assert same_bits(b.gradients(5), g5)
    assert same_bits(a.gradients(5), g5)  # and re-asking gives the same bits
    assert not np.array_equal(a.gradients(4), g5)
    assert not np.array_equal(syn(dist=dist, elements=300, seed=1).gradients(5), g5)


@given(
    spec=st.builds(
        SyntheticSpec,
        dist=st.sampled_from(DISTS),
        elements=st.integers(1, 40),
        signal=st.floats(0, 10),
        noise=st.floats(0, 10),
        decay=st.floats(0, 1),
        outlier_kind=st.sampled_from(["scale", "corrupt", "nan"]),
        outlier_worker=st.integers(-1, 0),
    ),
    workers=st.integers(1, 5),
    seed=st.integers(0, 2**64 - 1),
    step=st.integers(0, 10**9),
)
def test_any_synthetic_spec_round_trips_and_is_reproducible(spec, workers, seed, step):
    assert SyntheticSpec.from_dict(spec.to_dict()) == spec
    g = open_source(spec, workers=workers, seed=seed).gradients(step)
    assert g.shape == (workers, spec.elements)
    assert g.dtype == np.float32
    assert same_bits(open_source(spec, workers=workers, seed=seed).gradients(step), g)


def test_adding_workers_keeps_the_first_rows():
    assert same_bits(syn(workers=8).gradients(2)[:4], syn(workers=4).gradients(2))


@pytest.mark.parametrize(
    "kw",
    [
        {"dist": "normal"},
        {"dist": "student_t"},
        {"dist": "lognormal"},
        {"dist": "sparse"},
        {"outlier_worker": 2, "outlier_kind": "corrupt"},
    ],
)
def test_any_element_range_equals_the_slice_of_the_whole(kw):
    m = 2 * BLOCK + 123
    src = syn(workers=5, elements=m, **kw)
    whole = src.gradients(3)
    assert whole.shape == (5, m)
    for lo, hi in [
        (0, m),
        (0, 1),
        (BLOCK - 7, BLOCK + 9),
        (BLOCK, 2 * BLOCK),
        (m - 5, m),
        (17, 2 * BLOCK + 5),
        (40, 40),
    ]:
        assert same_bits(src.gradients(3, lo=lo, hi=hi), whole[:, lo:hi])
    assert same_bits(syn(workers=9, elements=m, **kw).gradients(3)[:5], whole)  # more workers: same first rows
    assert not np.array_equal(whole[:, :BLOCK], whole[:, BLOCK : 2 * BLOCK])  # blocks draw fresh values


@pytest.mark.parametrize(("lo", "hi"), [(-1, 3), (5, 4), (0, 4097)])
def test_element_range_outside_the_gradient_is_refused(lo, hi):
    with pytest.raises(fr.InvalidArgument, match="element range"):
        syn(elements=4096).gradients(0, lo=lo, hi=hi)


def test_shared_signal_correlates_workers():
    g = syn(workers=2, elements=50_000).gradients(0).astype(np.float64)
    assert abs(np.corrcoef(g)[0, 1] - 0.5) < 0.02  # signal 1, noise 1: corr = 1/2
    g = syn(workers=2, elements=50_000, signal=0.0).gradients(0).astype(np.float64)
    assert abs(np.corrcoef(g)[0, 1]) < 0.02
    g = syn(workers=3, elements=100, noise=0.0).gradients(0)
    assert same_bits(g[0], g[2])


def test_noise_is_redrawn_every_step():
    src = syn(workers=2, elements=50_000, signal=0.0)
    a, b = src.gradients(4).astype(np.float64), src.gradients(5).astype(np.float64)
    assert abs(np.corrcoef(a[0], b[0])[0, 1]) < 0.02
    assert abs(np.corrcoef(a[1], b[1])[0, 1]) < 0.02


def test_student_t_has_heavy_tails_and_normal_does_not():
    kt = excess_kurtosis(syn(dist="student_t", df=4.5, signal=0.0, elements=20_000).gradients(0))
    kn = excess_kurtosis(syn(dist="normal", signal=0.0, elements=20_000).gradients(0))
    assert abs(kn) < 0.1  # sd of the estimate ~ sqrt(24/160000) = 0.012
    assert kt > 2.0  # theory: 6 / (df - 4) = 12


def test_lognormal_magnitudes_and_signs():
    g = syn(dist="lognormal", log_sigma=2.0, signal=0.0, elements=20_000).gradients(0)
    logs = np.log(np.abs(g.astype(np.float64)))
    assert abs(logs.std() - 2.0) < 0.05
    assert abs(logs.mean()) < 0.05
    assert abs(np.mean(g > 0) - 0.5) < 0.01


def test_sparse_fraction_and_independent_masks():
    w, m, p = 4, 50_000, 0.7
    g = syn(dist="sparse", sparsity=p, workers=w, elements=m).gradients(3)
    zero = g == 0
    assert abs(zero.mean() - p) < 4 * math.sqrt(p * (1 - p) / (w * m))
    assert np.all(bits(g[zero]) == 0)  # untouched entries are +0.0, never -0.0
    all_zero = zero.all(axis=0).mean()
    assert abs(all_zero - p**w) < 4 * math.sqrt(p**w / m)  # masks independent across workers


def test_outlier_scale_multiplies_one_row_only():
    base = syn(elements=1000).gradients(1)
    g = syn(elements=1000, outlier_worker=3, outlier_scale=10.0).gradients(1)
    rest = [0, 1, 2, 4, 5, 6, 7]
    assert same_bits(g[rest], base[rest])
    np.testing.assert_allclose(g[3], 10.0 * base[3].astype(np.float64), rtol=2**-23)


def test_outlier_corrupt_is_large_and_uncorrelated():
    g = syn(workers=3, elements=50_000, outlier_worker=1, outlier_kind="corrupt").gradients(0)
    base = syn(workers=3, elements=50_000).gradients(0)
    assert same_bits(g[[0, 2]], base[[0, 2]])
    c = np.corrcoef(g.astype(np.float64))
    assert abs(c[0, 1]) < 0.02
    assert c[0, 2] > 0.45
    assert abs(g[1].std() - 10.0) < 0.2


def test_outlier_nan_row():
    g = syn(workers=3, elements=10, outlier_worker=2, outlier_kind="nan").gradients(0)
    assert np.all(np.isnan(g[2]))
    assert np.all(np.isfinite(g[:2]))


def test_decay_scales_by_exp():
    t, d = 7, 0.3
    base = syn(elements=500).gradients(t).astype(np.float64)
    g = syn(elements=500, decay=d).gradients(t)
    np.testing.assert_allclose(g, base * math.exp(-d * t), rtol=2**-22)
    tiny = syn(elements=500, decay=1.0).gradients(200)  # exp(-200): below fp32 subnormals
    assert np.all(tiny == 0)


@pytest.mark.parametrize("step", [-1, True, 1.5])
def test_bad_step(step):
    with pytest.raises(fr.InvalidArgument, match="step"):
        syn().gradients(step)


# ---------------------------------------------------------------- model


@pytest.mark.parametrize("act", ["tanh", "relu"])
def test_backprop_matches_finite_differences(act):
    i, h, o = 5, 7, 3
    rng = np.random.default_rng(1)
    p = rng.standard_normal(_model.n_params(i, h, o))
    x = rng.standard_normal((2, 6, i))  # two workers' shards: gradients are per shard
    y = rng.standard_normal((2, 6, o))
    _, g = _model.loss_and_grad(p, x, y, i, h, o, act)
    assert g.shape == (2, p.size)
    eps = 1e-6
    fd = np.empty_like(g)
    for k in range(p.size):
        e = np.zeros_like(p)
        e[k] = eps
        fd[:, k] = (
            _model.loss_and_grad(p + e, x, y, i, h, o, act)[0] - _model.loss_and_grad(p - e, x, y, i, h, o, act)[0]
        ) / (2 * eps)
    np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-8)


def model(workers=4, seed=0, **kw):
    src = open_source(ModelSpec(**kw), workers=workers, seed=seed)
    assert isinstance(src, ModelSource)
    return src


def test_model_shapes_and_layout():
    src = model()
    p = src.init_params()
    assert (src.kind, src.max_steps) == ("model", None)
    assert src.elements == 32 * 64 + 64 + 64 * 8 + 8 == p.size
    assert p.dtype == np.float32
    g = src.gradients(0, p)
    assert g.shape == (4, src.elements)
    assert g.dtype == np.float32


def test_worker_gradients_average_to_the_full_batch_gradient():
    src = model(workers=5, batch_per_worker=3)
    p = src.init_params()
    x, y = src.batch(2)
    full = _model.loss_and_grad(p.astype(np.float64), x.reshape(15, -1), y.reshape(15, -1), *src.dims, "tanh")[1]
    mean = src.gradients(2, p).astype(np.float64).mean(axis=0)
    np.testing.assert_allclose(mean, full, rtol=0, atol=1e-6 * np.abs(full).max())
    shard_losses = _model.loss_and_grad(p.astype(np.float64), x, y, *src.dims, "tanh")[0]
    assert src.loss(2, p) == pytest.approx(shard_losses.mean(), rel=1e-12)


def test_model_is_deterministic_and_step_independent():
    a, b = model(), model()
    p = a.init_params()
    assert same_bits(b.init_params(), p)
    g3 = a.gradients(3, p)
    b.gradients(0, p)
    assert same_bits(b.gradients(3, p), g3)
    assert not np.array_equal(model(seed=1).init_params(), p)


@pytest.mark.parametrize(
    ("kw", "factor"), [({}, 0.2), ({"activation": "relu", "momentum": 0.5}, 0.3)], ids=["sgd-tanh", "momentum-relu"]
)
def test_training_with_exact_sums_reduces_the_loss(kw, factor):
    src = model(**kw)
    p, state = src.init_params(), src.init_state()
    held_out = 10**6  # a step never trained on
    before = src.loss(held_out, p)
    for t in range(100):
        p = src.update(p, fr.exact_sum(src.gradients(t, p)).to_float64(), state)
    assert p.dtype == np.float32
    assert src.loss(held_out, p) < factor * before


def test_loss_scale_is_divided_out():
    a, b = model(), model(loss_scale=1024.0)
    p = a.init_params()
    ga, gb = a.gradients(1, p), b.gradients(1, p)
    assert same_bits(gb, ga * np.float32(1024))
    assert same_bits(b.update(p, gb.sum(axis=0), {}), a.update(p, ga.sum(axis=0), {}))


def test_sgd_update_and_momentum_closed_form():
    src = model(workers=4, lr=0.1)
    p = src.init_params()
    g_sum = np.linspace(-1, 1, src.elements)
    state: dict = src.init_state()
    assert state == {}
    new = src.update(p, g_sum, state)
    np.testing.assert_allclose(new, p - 0.1 * g_sum / 4, rtol=2**-23, atol=2**-30)
    assert same_bits(src.update(p, np.zeros(src.elements), {}), p)
    mom = model(workers=4, lr=0.1, momentum=0.9)
    state = mom.init_state()
    q = p
    for _ in range(5):
        q = mom.update(q, g_sum, state)
    geo = sum(0.9**j for j in range(5))  # v_5 = g (1 + 0.9 + ... + 0.9^4)
    np.testing.assert_allclose(state["velocity"], geo * g_sum / 4, rtol=1e-6, atol=1e-7)
    disp = sum(sum(0.9**j for j in range(k + 1)) for k in range(5))
    np.testing.assert_allclose(q, p - 0.1 * disp * g_sum / 4, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("params", [None, np.zeros(3, np.float32)], ids=["none", "wrong-shape"])
def test_model_needs_params(params):
    with pytest.raises(fr.InvalidArgument, match="params"):
        model().gradients(0, params)


def test_update_checks_the_sum_shape():
    src = model()
    with pytest.raises(fr.InvalidArgument, match="g_sum"):
        src.update(src.init_params(), np.zeros((4, src.elements)), {})


# ---------------------------------------------------------------- files


def fsrc(path, workers=3):
    return open_source(FileSpec(str(path)), workers=workers, seed=0)


def test_npy_float64_is_rounded_to_float32(tmp_path):
    a = np.random.default_rng(0).standard_normal((4, 3, 5))
    a[1, 0, 0], a[2, 1, 1], a[3, 2, 2] = np.nan, -np.inf, 1e300  # passed through / overflows float32: refused
    np.save(tmp_path / "g.npy", a)
    src = fsrc(tmp_path / "g.npy")
    assert (src.kind, src.max_steps, src.workers, src.elements) == ("file", 4, 3, 5)
    for t in range(3):
        want = a[t].astype(np.float32)
        got = src.gradients(t)
        assert got.dtype == np.float32
        assert same_bits(got, want)
    assert same_bits(src.gradients(3, lo=0, hi=2), a[3, :, :2].astype(np.float32))
    with pytest.raises(fr.InvalidArgument, match=r"step 3: 1 float64 gradient value\(s\) overflow float32"):
        src.gradients(3)  # never silently inf (issue 26, item 5)
    with pytest.raises(fr.InvalidArgument, match="< 4"):
        src.gradients(4)


def test_big_endian_and_float16(tmp_path):
    a = np.arange(24, dtype=">f4").reshape(2, 3, 4)
    np.save(tmp_path / "be.npy", a)
    assert np.array_equal(fsrc(tmp_path / "be.npy").gradients(1), a[1])
    np.save(tmp_path / "h.npy", a.astype(np.float16))
    assert np.array_equal(fsrc(tmp_path / "h.npy").gradients(1), a[1])


def test_npz_prefers_grads_then_first(tmp_path):
    ones, twos = np.ones((2, 3, 4)), np.full((2, 3, 4), 2.0)
    np.savez(tmp_path / "a.npz", other=ones, grads=twos)
    assert np.all(fsrc(tmp_path / "a.npz").gradients(0) == 2)
    np.savez(tmp_path / "b.npz", first=ones, second=twos)
    assert np.all(fsrc(tmp_path / "b.npz").gradients(0) == 1)


def test_file_element_ranges(tmp_path):
    a = np.arange(2 * 3 * 10, dtype=np.float32).reshape(2, 3, 10)
    np.save(tmp_path / "g.npy", a)
    (tmp_path / "d").mkdir()
    np.save(tmp_path / "d" / "step_000000.npy", a[1])
    for src in (fsrc(tmp_path / "g.npy"), fsrc(tmp_path / "d")):
        assert np.array_equal(src.gradients(src.max_steps - 1, lo=2, hi=7), a[1][:, 2:7])
        with pytest.raises(fr.InvalidArgument, match="element range"):
            src.gradients(0, lo=3, hi=11)


def test_directory_of_step_files_in_step_order(tmp_path):
    for k in (10, 2, 1, 0, 1_000_000):
        np.save(tmp_path / f"step_{k:06d}.npy", np.full((3, 4), float(k), np.float32))
    (tmp_path / "notes.txt").write_text("never read")
    (tmp_path / "x.npy").mkdir()  # a directory: never read
    with pytest.raises(fr.InvalidArgument, match="step_000003.npy is missing .* source.gaps = true"):
        fsrc(tmp_path)  # a gap (0, 1, 2, 10, 10^6) is an error unless asked for
    src = open_source(FileSpec(str(tmp_path), gaps=True), workers=3, seed=0)
    assert (src.max_steps, src.elements) == (5, 4)
    assert [float(src.gradients(t)[0, 0]) for t in range(5)] == [0.0, 1.0, 2.0, 10.0, 1e6]  # by number, not name


@pytest.mark.parametrize("name", ["a.npy", ".step_000001.npy", "step_1.npy", "step_0000001.npy", "step_000001.NPY"])
def test_a_directory_holds_step_files_and_nothing_else(tmp_path, name):
    """A stray or hidden .npy beside the step files is refused in one line naming it, never read as a step
    (issue 26: a stray grads/a.npy became step 0 of the A/B run)."""
    for k in range(2):
        np.save(tmp_path / f"step_{k:06d}.npy", np.full((3, 4), float(k), np.float32))
    np.save(tmp_path / "x.npy", np.zeros((3, 4), np.float32))
    (tmp_path / "x.npy").rename(tmp_path / name)
    with pytest.raises(fr.InvalidArgument, match=f"{re.escape(name)}: not a step file"):
        fsrc(tmp_path)


def _object_npz(p):
    np.savez(p, a=np.array([[[1, "x"]]], dtype=object))


@pytest.mark.parametrize(
    ("name", "make", "words"),
    [
        ("g.npy", lambda p: None, "no such file"),
        ("g.npy", lambda p: np.save(p, np.array([[[1, "x"]]], dtype=object), allow_pickle=True), "Python objects"),
        ("g.npz", lambda p: np.savez(p, a=np.array([[[1, "x"]]], dtype=object)), "Python objects"),
        ("g.npy", lambda p: np.save(p, np.zeros((3, 4))), "expected (steps, workers, elements)"),
        ("g.npy", lambda p: np.save(p, np.zeros((2, 5, 4))), "holds 5 workers"),
        ("g.npy", lambda p: np.save(p, np.zeros((2, 3, 4), np.int32)), "dtype int32"),
        ("g.npy", lambda p: np.save(p, np.zeros((2, 3, 4), np.complex64)), "dtype complex64"),
        ("g.npy", lambda p: np.save(p, np.zeros((0, 3, 4))), "empty"),
        ("g.npz", lambda p: np.savez(p), "empty"),
        ("g.npz", lambda p: np.savez(p, grads=np.zeros((2, 3))), "expected (steps, workers, elements)"),
        ("g.npy", lambda p: p.write_bytes(b"junk"), "not a readable .npy"),
    ],
    ids=[
        "missing",
        "object-npy",
        "object-npz",
        "2d",
        "workers",
        "int",
        "complex",
        "empty",
        "empty-npz",
        "2d-npz",
        "junk",
    ],
)
def test_file_errors_are_one_line_and_name_the_file(tmp_path, name, make, words):
    p = tmp_path / name
    make(p)
    with pytest.raises(fr.InvalidArgument) as e:
        fsrc(p)
    msg = str(e.value)
    assert "\n" not in msg
    assert str(p) in msg
    assert words in msg


def test_directory_errors(tmp_path):
    with pytest.raises(fr.InvalidArgument, match="no step files"):
        fsrc(tmp_path)
    np.save(tmp_path / "step_000000.npy", np.zeros((3, 4), np.float32))
    np.save(tmp_path / "step_000001.npy", np.zeros((3, 5), np.float32))
    with pytest.raises(fr.InvalidArgument, match=r"step_000001.npy: shape \(3, 5\), but step_000000.npy has \(3, 4\)"):
        fsrc(tmp_path)
