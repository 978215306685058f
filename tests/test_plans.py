import itertools

import numpy as np
import pytest

import fpreduce as fr
from fpreduce import plans as P

BUILDERS = {
    "sequential": P.sequential,
    "reverse": P.reverse,
    "pairwise": P.pairwise,
    "kary2": lambda n: P.kary(n, 2),
    "kary3": lambda n: P.kary(n, 3),
    "blocked4": lambda n: P.blocked(n, 4),
    "numpy": P.numpy_pairwise,
    "ring_nccl": lambda n: P.ring(n, "nccl"),
    "ring_ompi": lambda n: P.ring(n, "ompi"),
    "ring_gloo": lambda n: P.ring(n, "gloo"),
    "rd": P.rd,
    "rabenseifner": P.rabenseifner,
    "linear": P.linear,
    "nccl_tree_1": lambda n: P.nccl_tree(n, 1),
    "hier_1": lambda n: P.hier(n, 1),
}


def trees_of(p):
    return list(p.trees) if isinstance(p, P.SegmentedPlan) else [p]


def same(a, b):
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    return bool(np.all(a.view(np.uint64) == b.view(np.uint64)))


def bracket(t):
    """The tree as a canonical set of leaf sets: the association, operand order ignored."""
    out = set()

    def walk(node):
        if isinstance(node, int):
            return frozenset([node])
        s = walk(node[0]) | walk(node[1])
        out.add(s)
        return s

    walk(t)
    return out


@pytest.mark.parametrize("name", list(BUILDERS))
def test_every_builder_is_valid_for_n_1_to_33(name):
    for n in range(1, 34):
        p = BUILDERS[name](n)
        assert p.n == n
        for t in trees_of(p):
            assert sorted(t.leaves()) == list(range(n))  # Plan also checks this on creation
            d = t.depths()
            assert d.shape == (n,)
            assert (d >= 0).all()
            assert (d <= n - 1).all()
            assert n == 1 or (d >= 1).all()
        assert p.depths().shape == (n,)


@pytest.mark.parametrize("g", [1, 2, 3, 4, 8])
def test_node_plans_valid(g):
    for nodes in range(1, 12):
        n = nodes * g
        for p in (P.nccl_tree(n, g), P.hier(n, g)):
            for t in trees_of(p):
                assert sorted(t.leaves()) == list(range(n))


def test_depths_match_structure():
    for k in range(6):
        n = 2**k
        assert P.rd(n).depths().tolist() == [k] * n
        assert P.pairwise(n).depths().tolist() == [k] * n
        assert P.rabenseifner(n).depths().tolist() == [k] * n
    for n in range(2, 20):
        d = P.sequential(n).depths()
        assert d[0] == d[1] == n - 1
        assert d[-1] == 1
        assert P.linear(n).depths()[0] == 1
        assert P.linear(n).depths()[-1] == n - 1
        # rd: the pre-step pairs are one level deeper than the others
        p = 1 << (n.bit_length() - 1)
        r = n - p
        want = [p.bit_length()] * (2 * r) + [p.bit_length() - 1] * (n - 2 * r)
        assert P.rd(n).depths().tolist() == want
        # k-ary: at most (k-1) additions per level, ceil(log_k n) levels
        for k in (2, 3, 4):
            levels = 0
            while k**levels < n:
                levels += 1
            assert P.kary(n, k).depths().max() <= (k - 1) * levels
    assert P.blocked(8, 4).depths().tolist() == [4, 4, 3, 2, 4, 4, 3, 2]
    assert P.blocked(9, 4).depths().tolist() == [5, 5, 4, 3, 5, 5, 4, 3, 1]
    assert P.atomic(5).depths().tolist() == [4] * 5


def test_hand_checked_small_trees():
    # Open MPI ompi_coll_base_allreduce_intra_recursivedoubling (and MPICH): n=5 has
    # p=4, r=1; ranks 0 and 1 fold first (x0+x1), then distances 1 and 2 over
    # new ranks {0+1, 2, 3, 4}.
    assert P.rd(5).draw() == "(((0+1)+2)+(3+4))"
    assert P.rd(3).draw() == "((0+1)+2)"
    assert P.rd(6).draw() == "(((0+1)+(2+3))+(4+5))"
    # Open MPI ompi_coll_base_allreduce_intra_redscat_allgather, n=3: p=2, r=1.
    # Left half: rank 0 (vrank 0) reduces tmp(x1) op rbuf(x0) = (1+0); at mask 1 it
    # keeps the left half: tmp(rank 2) op rbuf(vrank 0) = (2+(1+0)). Right half:
    # rank 1 reduces (0+1); rank 2 keeps it: tmp(vrank 0) op rbuf(x2).
    assert P.rabenseifner(3).draw() == "chunk 0: (2+(1+0))\nchunk 1: ((0+1)+2)"
    # Open MPI ompi_coll_base_reduce_intra_basic_linear: rbuf = x[n-1], then x[i] op rbuf
    assert P.linear(4).draw() == "(0+(1+(2+3)))"
    # NCCL ncclGetBtree over 4 nodes: 0 -> 2 -> {1, 3}; mirror tree: 3 -> 1 -> {2, 0}
    assert P.nccl_tree(4, 1).draw() == "chunk 0: (0+((2+1)+3))\nchunk 1: (3+((1+2)+0))"
    # ncclGetBtree over 3 nodes: 0 -> 2 -> 1; shifted tree: 1 -> 0 -> 2
    assert P.nccl_tree(3, 1).draw() == "chunk 0: (0+(2+1))\nchunk 1: (1+(0+2))"
    # 2 nodes x 2 GPUs, balanced pattern: node 1's head (2) hangs off local rank 0
    # of node 0 (down1); chain 0 -> 1 inside node 0
    assert P.nccl_tree(4, 2).trees[0].draw() == "((0+1)+(2+3))"
    assert P.kary(7, 3).draw() == "((((0+1)+2)+((3+4)+5))+6)"
    assert P.blocked(5, 2).draw() == "(((0+1)+(2+3))+4)"


def test_rabenseifner_has_rd_grouping_in_every_block():
    for n in range(1, 34):
        want = bracket(P.rd(n).root)
        for t in P.rabenseifner(n).trees:
            assert bracket(t.root) == want


def test_rabenseifner_bounds_are_recursive_halving():
    p = P.rabenseifner(5)  # 4 blocks
    assert p.bounds(10).tolist() == [0, 2, 5, 7, 10]
    assert p.bounds(3).tolist() == [0, 0, 1, 2, 3]
    assert P.rabenseifner(8).bounds(16).tolist() == list(range(0, 17, 2))


def test_hier_horovod_split_and_trees():
    # nccl_operations.cc NCCLHierarchicalAllreduce: G equal shards, remainder last
    p = P.hier(4, 2)
    assert p.bounds(7).tolist() == [0, 3, 6, 7]
    assert p.bounds(1).tolist() == [0, 0, 0, 1]
    # shard 0 ends at local rank 0 (ring from local 1), then nodes {0,1} and {2,3} add
    assert p.draw() == "chunk 0: ((1+0)+(3+2))\nchunk 1: ((0+1)+(2+3))\nchunk 2: ((0+1)+(2+3))"


def test_ring_splits():
    # Open MPI: early blocks one larger (COLL_BASE_COMPUTE_BLOCKCOUNT)
    assert P.ring(4, "ompi").bounds(10).tolist() == [0, 3, 6, 8, 10]
    # MPICH MPIR_Allreduce_intra_ring: cnts = ceil(count / n), the rest short or empty
    assert P.ring(4, "mpich").bounds(10).tolist() == [0, 3, 6, 9, 10]
    assert P.ring(4, "mpich").bounds(5).tolist() == [0, 2, 4, 5, 5]
    # gloo ring, 4-byte elements: 10 segments of ceil(17/10)=2, 2 segments per rank
    assert P.ring(5, "gloo").bounds(17).tolist() == [0, 4, 8, 12, 16, 17]
    assert P.ring(5, "gloo").bounds(3).tolist() == [0, 2, 3, 3, 3, 3]
    # 2^20 float32 on 4 ranks: 4 MiB / 1 MiB = 4 segments -> rounded up to 2n = 8
    assert P.ring(4, "gloo").bounds(1 << 20).tolist() == [0, 1 << 18, 2 << 18, 3 << 18, 4 << 18]
    # 2^26 bf16 elements = 128 MiB: 128 segments, rounded up to 129 (a multiple of
    # n=3), of ceil(2^26 / 129) = 520224 elements; 43 segments per rank
    assert P.ring(3, "gloo", item_bytes=2).bounds(1 << 26)[1] == 43 * 520224
    for n, m in itertools.product([1, 2, 3, 7], [0, 1, 5, 100, 12345]):
        for conv in ("nccl", "mpich", "ompi", "gloo"):
            b = P.ring(n, conv).bounds(m)
            assert b[0] == 0
            assert b[-1] == m
            assert (np.diff(b) >= 0).all()


@pytest.mark.parametrize("n", [1, 2, 3, 4, 7, 8, 9])
def test_ring_fold_orders(n):
    start = {"nccl": 1, "mpich": 1, "ompi": 0, "gloo": -1}
    for conv, s in start.items():
        p = P.ring(n, conv)
        step = -1 if conv == "gloo" else 1
        for c, t in enumerate(p.trees):
            order = [(c + s + step * k) % n for k in range(n)]
            # the association of a sequential fold in the convention's order
            assert bracket(t.root) == bracket(P.sequential(n, order).root)
            if conv == "gloo":  # gloo writes local (op) partial: leaves c, c+1, ..., c-1
                assert t.leaves() == order[::-1]
            else:  # received partial (op) local
                assert t.leaves() == order


def test_numpy_pairwise_equals_np_sum_bitwise():
    rng = np.random.default_rng(0)
    lengths = list(range(1, 1001)) + [1023, 1024, 1025, 2000, 4097]
    for n in lengths:
        x = (rng.standard_normal(n) * np.exp(rng.uniform(-12, 12, n))).astype(np.float32)
        got = fr.reduce(x[:, None], P.numpy_pairwise(n), input="fp32", accumulate="fp32")
        assert same(got[0], np.sum(x)), n


def test_numpy_pairwise_differs_from_plain_pairwise():
    # the law above is not vacuous: the plain balanced tree disagrees with np.sum
    rng = np.random.default_rng(1)
    misses = 0
    for n in range(9, 200):
        x = (rng.standard_normal(n) * np.exp(rng.uniform(-12, 12, n))).astype(np.float32)
        got = fr.reduce(x[:, None], P.pairwise(n), input="fp32", accumulate="fp32")
        misses += not same(got[0], np.sum(x))
    assert misses > 50


@pytest.mark.parametrize("name", ["rd", "rabenseifner", "ring_gloo", "numpy", "kary3", "nccl_tree_1"])
def test_relabel_equals_permuting_rows(name):
    rng = np.random.default_rng(3)
    n = 11
    X = (rng.standard_normal((n, 300)) * np.exp(rng.uniform(-8, 8, (n, 300)))).astype(np.float32)
    p = BUILDERS[name](n)
    perm = rng.permutation(n)
    a = fr.reduce(X[perm], p, input="bf16", accumulate="bf16")
    b = fr.reduce(X, p.relabel(perm), input="bf16", accumulate="bf16")
    assert same(a, b)
    inv = np.argsort(perm)
    assert p.relabel(perm).relabel(inv) == p


PARSE = [
    ("sequential", P.sequential),
    ("reverse", P.reverse),
    ("pairwise", P.pairwise),
    ("kary:4", lambda n: P.kary(n, 4)),
    ("blocked:8", lambda n: P.blocked(n, 8)),
    ("numpy", P.numpy_pairwise),
    ("ring", lambda n: P.ring(n, "nccl")),
    ("ring:mpich", lambda n: P.ring(n, "mpich")),
    ("ring:ompi", lambda n: P.ring(n, "ompi")),
    ("ring:gloo", lambda n: P.ring(n, "gloo")),
    ("rd", P.rd),
    ("rabenseifner", P.rabenseifner),
    ("linear", P.linear),
    ("tree:nccl:4", lambda n: P.nccl_tree(n, 4)),
    ("hier:4", lambda n: P.hier(n, 4)),
    ("atomic", P.atomic),
]


@pytest.mark.parametrize(("text", "build"), PARSE, ids=[t for t, _ in PARSE])
def test_parse_round_trip(text, build):
    p = P.parse(f"  {text} ", 12)
    assert p == build(12)
    assert text.partition(":")[0] in P.FAMILIES
    if isinstance(p, P.Plan):
        assert P.parse(str(p.root).replace(" ", ""), 12).root == p.root


def test_parse_atomic_seed():
    assert P.parse("atomic", 4, seed=7) == P.atomic(4, 7)


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("karry:4", "did you mean 'kary'"),
        ("rabenseifer", "did you mean 'rabenseifner'"),
        ("kary:x", "k must be an integer, got 'x'"),
        ("kary:1", "k must be an integer >= 2, got 1"),
        ("kary", "k must be an integer, got ''"),
        ("blocked:0", "block must be an integer >= 1"),
        ("ring:glo", "did you mean 'gloo'"),
        ("tree:ncl:8", "did you mean 'nccl'"),
        ("tree:nccl", "gpus_per_node must be an integer"),
        ("tree:nccl:5", "gpus_per_node=5 does not divide n=12"),
        ("hier:0", "gpus_per_node must be an integer >= 1"),
        ("hier:5", "does not divide n=12"),
        ("rd:3", "takes no parameter"),
        ("((0,1),(2,3))", "has 4 leaves but n=12"),
        ("((0,1),(2,2))", "exactly once"),
        ("((0,1),", "cannot parse tree"),
    ],
)
def test_parse_errors(text, match):
    with pytest.raises(fr.InvalidArgument, match=match):
        P.parse(text, 12)
    msg = ""
    try:
        P.parse(text, 12)
    except fr.InvalidArgument as e:
        msg = str(e)
    assert "\n" not in msg


def test_builder_errors():
    with pytest.raises(fr.InvalidArgument, match="positive int"):
        P.rd(0)
    with pytest.raises(fr.InvalidArgument, match="positive int"):
        P.kary(True, 2)
    with pytest.raises(fr.InvalidArgument, match="permutation"):
        P.atomic(3).relabel([0, 0, 1])
    with pytest.raises(fr.InvalidArgument, match="needs the number of workers"):
        P.parse("rd")
    with pytest.raises(fr.InvalidArgument, match="item_bytes must be an integer >= 1"):
        P.ring(4, "gloo", item_bytes=0)
    with pytest.raises(fr.InvalidArgument, match="non-negative"):
        P.atomic(4, seed=-1)


def test_atomic_orders_are_deterministic_chunk_independent_permutations():
    a = P.atomic(6, seed=5)
    o = a.orders(0, 10000)
    assert o.shape == (10000, 6)
    assert o.dtype == np.uint8  # the smallest unsigned type that holds n - 1
    assert (np.sort(o, axis=1) == np.arange(6)).all()
    assert (P.atomic(6, seed=5).orders(0, 10000) == o).all()
    assert (np.concatenate([a.orders(0, 5000), a.orders(5000, 10000)]) == o).all()
    assert (np.concatenate([a.orders(0, 1), a.orders(1, 4097), a.orders(4097, 10000)]) == o).all()
    assert (a.orders(4000, 4200) == o[4000:4200]).all()
    assert a.orders(7, 7).shape == (0, 6)
    assert not (P.atomic(6, seed=6).orders(0, 100) == o[:100]).all()


def test_atomic_orders_are_uniform():
    o = P.atomic(3, seed=11).orders(0, 60000)
    codes = o[:, 0] * 9 + o[:, 1] * 3 + o[:, 2]
    _, counts = np.unique(codes, return_counts=True)
    assert counts.size == 6
    assert np.abs(counts / 60000 - 1 / 6).max() < 0.01
    # each worker is first with probability 1/n, also for larger n
    first = P.atomic(8, seed=2).orders(0, 40000)[:, 0]
    assert np.abs(np.bincount(first, minlength=8) / 40000 - 1 / 8).max() < 0.01


def test_atomic_relabel_composes():
    a = P.atomic(4, seed=3)
    p1, p2 = [1, 2, 3, 0], [3, 0, 2, 1]
    o = a.orders(0, 50)
    r = a.relabel(p1).relabel(p2)
    assert (r.orders(0, 50) == np.array(p2)[np.array(p1)[o]]).all()
    assert r == a.relabel(np.array(p2)[np.array(p1)])
    assert "seed=3" in a.draw()
    assert "\n" not in r.draw()


def test_segmented_plans_run_in_engine_per_chunk():
    rng = np.random.default_rng(4)
    n, m = 8, 37
    X = (rng.standard_normal((n, m)) * np.exp(rng.uniform(-8, 8, (n, m)))).astype(np.float32)
    for p in (P.rabenseifner(n), P.nccl_tree(n, 2), P.hier(n, 4), P.ring(n, "gloo")):
        got = fr.reduce(X, p, input="bf16", accumulate="bf16")
        b = p.bounds(m)
        for c, t in enumerate(p.trees):
            if b[c + 1] > b[c]:
                want = fr.reduce(X[:, b[c] : b[c + 1]], t, input="bf16", accumulate="bf16")
                assert same(got[b[c] : b[c + 1]], want)


def test_nccl_double_binary_tree_matches_trees_cc_illustrations():
    from fpreduce.plans.collectives import dtree_children

    def kids(nnodes, which):
        return {x: sorted(c for c in d if c >= 0) for x, d in enumerate(dtree_children(nnodes, which)) if max(d) >= 0}

    # src/graph/trees.cc, ncclGetBtree's picture for 14 ranks
    assert kids(14, 0) == {0: [8], 8: [4, 12], 4: [2, 6], 12: [10, 13], 2: [1, 3], 6: [5, 7], 10: [9, 11]}
    # ncclGetDtree's pictures: 12 ranks mirrored, 13 ranks shifted by one
    assert kids(12, 1) == {11: [3], 3: [1, 7], 1: [0, 2], 7: [5, 9], 5: [4, 6], 9: [8, 10]}
    assert kids(13, 1) == {1: [9], 9: [0, 5], 5: [3, 7], 0: [11], 3: [2, 4], 7: [6, 8], 11: [10, 12]}
    # every node but the root has exactly one parent in both trees
    for nn in range(1, 40):
        for w in (0, 1):
            children = [c for d in dtree_children(nn, w) for c in d if c >= 0]
            assert sorted(children) == sorted(set(children))
            assert len(children) == nn - 1


def _merge_adjacent_reference(n, rng):  # type: ignore[no-untyped-def]
    """The runner's former random tree: permuted leaves, then node i merged with node i + 1, i drawn per step."""
    nodes = [int(i) for i in rng.permutation(n)]
    while len(nodes) > 1:
        i = int(rng.integers(0, len(nodes) - 1))
        nodes[i : i + 2] = [(nodes[i], nodes[i + 1])]
    return nodes[0]


@pytest.mark.parametrize("n", [1, 2, 3, 5, 16, 100])
def test_random_tree_is_the_merge_of_random_adjacent_pairs(n):
    for seed in range(20):
        ref, rng = np.random.default_rng([seed, n]), np.random.default_rng([seed, n])
        want = _merge_adjacent_reference(n, ref)
        got = P.random_tree(n, rng)
        assert got.root == want
        assert (got.name, got.n) == (P.RANDOM_TREE, n)
        assert rng.bit_generator.state == ref.bit_generator.state  # the same draws, nothing more


def test_random_tree_is_a_tree_from_gaps():
    rng = np.random.default_rng(3)
    for _ in range(50):
        t = P.random_tree(7, rng)
        assert any(P.tree_from_gaps(t.leaves(), g).root == t.root for g in itertools.permutations(range(6)))
    shapes = {P.fold(P.random_tree(6, rng).root, lambda i: "x", lambda a, b: f"({a}{b})") for _ in range(300)}
    assert len(shapes) > 20  # of the Catalan(5) = 42
