"""alac.nn.SparseAggregate against a hand-written PyTorch wide & deep model: the same accums in
forward, and after loss.backward() the sparse tables stepped as dense autograd gradients and a
hand-written SGD or row-wise AdaGrad step them; the deep part's gradients untouched."""

import dataclasses

import pytest
import torch

from alac.dsl import Global, Model, Normal, Param, ops
from alac.errors import DataError, ModelError, OptionError
from alac.ir.pipeline import lower
from alac.nn import KeyedBags, PackedEmbeddingBags, SparseAggregate, Table, pack_tables, table_accesses

K = 4
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


class FM(Model):
    labels = "binary"
    prediction = "probability"

    def __init__(self, l2=0.0):
        self.w = Param(init=Normal(0.1), l2=l2)
        self.v = Param(size=K, init=Normal(0.1), l2=l2)
        self.b = Global()

    def aggregate(self, x, p):
        return {"wx": x * p.w, "vx": x * p.v, "v2x2": x**2 * p.v**2}

    def loss(self, a, g, y):
        return ops.softplus(-y * (g.b + a.wx + 0.5 * ops.sum(a.vx**2 - a.v2x2)))

    def predict(self, a, g):
        return ops.sigmoid(g.b + a.wx + 0.5 * ops.sum(a.vx**2 - a.v2x2))


def _batch(seed, rows=32, n_features=50):
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, 6, (rows,), generator=generator)
    offsets = torch.cat([torch.zeros(1, dtype=torch.int64), lengths.cumsum(0)])
    indices = torch.randint(0, n_features, (int(offsets[-1]),), generator=generator)
    values = torch.rand(indices.numel(), generator=generator) + 0.5
    dense = torch.randn(rows, 3, generator=generator)
    labels = (torch.rand(rows, generator=generator) < 0.4).float()
    return tuple(t.to(DEVICE) for t in (indices, offsets, values, dense, labels))


def _hand_written_accums(w, v, indices, offsets, values):
    rows = offsets.numel() - 1
    row = torch.repeat_interleave(torch.arange(rows, device=DEVICE), offsets.diff())
    wx = torch.zeros(rows, device=DEVICE).index_add(0, row, values * w[indices])
    vx = torch.zeros(rows, K, device=DEVICE).index_add(0, row, values[:, None] * v[indices])
    v2x2 = torch.zeros(rows, K, device=DEVICE).index_add(0, row, values[:, None] ** 2 * v[indices] ** 2)
    return {"wx": wx, "vx": vx, "v2x2": v2x2}


def _loss(accums, deep, dense, labels):
    # v2x2 weighted per lane: its gradient differs between lanes, unlike in an FM's own loss
    lanes = torch.linspace(0.2, 1.0, K, device=DEVICE)
    logit = accums["wx"] + 0.5 * (accums["vx"] ** 2 - lanes * accums["v2x2"]).sum(1) + deep(dense).squeeze(1)
    return torch.nn.functional.binary_cross_entropy_with_logits(logit, labels)


def _adagrad(table, accumulator, grad, lr, eps):
    """Row-wise AdaGrad as alac documents it: a scalar param's accumulator per coordinate, a vector
    param's one per row fed the row's mean squared gradient."""
    squared = grad * grad if grad.dim() == 1 else (grad * grad).mean(1)
    accumulator += squared
    scale = accumulator.sqrt() + eps
    table -= lr * grad / (scale if grad.dim() == 1 else scale[:, None])


@pytest.mark.parametrize("optimizer", ["sgd", "adagrad"])
def test_backward_steps_the_sparse_rows_as_dense_gradients_and_the_optimizer_would(optimizer):
    lr, n_features = 0.3, 50
    wide = SparseAggregate(FM(), n_features, optimizer=optimizer, lr=lr, seed=3, device=DEVICE)
    deep = torch.nn.Linear(3, 1).to(DEVICE)
    w, v = wide.w.clone(), wide.v.clone()
    accumulators = (torch.zeros(n_features, device=DEVICE), torch.zeros(n_features, device=DEVICE))
    for step in range(3):
        indices, offsets, values, dense, labels = _batch(step)
        accums = wide(indices, offsets, values)
        w_leaf, v_leaf = w.clone().requires_grad_(), v.clone().requires_grad_()
        expected = _hand_written_accums(w_leaf, v_leaf, indices, offsets, values)
        for name in expected:
            torch.testing.assert_close(accums[name], expected[name], rtol=1e-5, atol=1e-6)
        deep.zero_grad()
        _loss(accums, deep, dense, labels).backward()
        deep_grads = [p.grad.clone() for p in deep.parameters()]
        deep.zero_grad()
        _loss(expected, deep, dense, labels).backward()
        for ours, theirs in zip(deep_grads, (p.grad for p in deep.parameters())):
            torch.testing.assert_close(ours, theirs)
        with torch.no_grad():
            if optimizer == "sgd":
                w -= lr * w_leaf.grad
                v -= lr * v_leaf.grad
            else:
                eps = 4.0 / (offsets.numel() - 1)     # 4 mean |x| / B, the value scale left at 1
                _adagrad(w, accumulators[0], w_leaf.grad, lr, eps)
                _adagrad(v, accumulators[1], v_leaf.grad, lr, eps)
        torch.testing.assert_close(wide.w, w, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(wide.v, v, rtol=1e-5, atol=1e-6)
    if optimizer == "adagrad":
        torch.testing.assert_close(wide.w_accumulator, accumulators[0], rtol=1e-5, atol=1e-7)
        torch.testing.assert_close(wide.v_accumulator, accumulators[1], rtol=1e-5, atol=1e-7)


def test_the_tables_are_buffers_not_parameters_and_travel_in_the_state_dict():
    wide = SparseAggregate(FM(), 20, optimizer="adagrad", lr=0.1)
    assert list(wide.parameters()) == []
    state = wide.state_dict()
    assert set(state) == {"w", "v", "w_accumulator", "v_accumulator"} and state["v"].shape == (20, K)
    copy = SparseAggregate(FM(), 20, optimizer="adagrad", lr=0.1, seed=9)
    copy.load_state_dict(state)
    assert all(torch.equal(copy.state_dict()[name], tensor) for name, tensor in state.items())
    indices, offsets, values, *_ = _batch(0, n_features=20)
    for name, value in wide(indices, offsets, values).items():
        # equal up to the order of a GPU's atomic additions
        torch.testing.assert_close(value, copy(indices, offsets, values)[name], rtol=1e-6, atol=1e-7)


def test_bad_batches_are_refused_with_the_value():
    wide = SparseAggregate(FM(), 10, optimizer="adagrad")
    with pytest.raises(DataError, match="feature id 12 is outside the table's 10 rows"):
        wide(torch.tensor([1, 12]), torch.tensor([0, 2]))
    with pytest.raises(DataError, match="offsets must rise from 0"):
        wide(torch.tensor([1, 2]), torch.tensor([0, 3]))
    with pytest.raises(DataError, match="values has"):
        wide(torch.tensor([1, 2]), torch.tensor([0, 2]), torch.ones(3))
    with pytest.raises(OptionError, match="give SparseAggregate an lr"):
        SparseAggregate(FM(), 10, optimizer="sgd")


def test_per_field_bags_give_deepfm_its_field_embeddings_and_step_as_dense_gradients():
    """DeepFM: the FM part and an MLP over the concatenated per-field embeddings, with every field's
    bag pooled in one call, against a hand-written PyTorch DeepFM on one embedding table."""
    n_features, n_fields, lr = 60, 3, 0.2
    torch.manual_seed(0)
    wide = SparseAggregate(FM(), n_features, optimizer="sgd", lr=lr, seed=4, device=DEVICE)
    mlp = torch.nn.Sequential(torch.nn.Linear(n_fields * K, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1)).to(DEVICE)
    v = wide.v.clone()
    for step in range(2):
        generator = torch.Generator().manual_seed(10 + step)
        rows = 16
        # one or two ids per field, ids of field f in [20 f, 20 f + 20)
        counts = torch.randint(1, 3, (rows, n_fields), generator=generator)
        fields = torch.repeat_interleave(torch.arange(n_fields).repeat(rows), counts.flatten())
        indices = fields * 20 + torch.randint(0, 20, (fields.numel(),), generator=generator)
        offsets = torch.cat([torch.zeros(1, dtype=torch.int64), counts.sum(1).cumsum(0)])
        labels = (torch.rand(rows, generator=generator) < 0.5).float().to(DEVICE)
        indices, offsets, fields = indices.to(DEVICE), offsets.to(DEVICE), fields.to(DEVICE)
        bags = wide(indices, offsets, fields=fields, n_fields=n_fields)
        assert bags["vx"].shape == (rows, n_fields, K) and bags["wx"].shape == (rows, n_fields)
        v_leaf = v.clone().requires_grad_()
        sample = torch.repeat_interleave(torch.arange(rows, device=DEVICE), offsets.diff())
        expected = torch.zeros(rows * n_fields, K, device=DEVICE).index_add(0, sample * n_fields + fields,
                                                                           v_leaf[indices]).view(rows, n_fields, K)
        torch.testing.assert_close(bags["vx"], expected, rtol=1e-5, atol=1e-6)

        def deepfm(embeddings, squares):
            summed = embeddings.sum(1)
            fm = 0.5 * (summed**2 - squares.sum(1)).sum(1)
            return torch.nn.functional.binary_cross_entropy_with_logits(
                fm + mlp(embeddings.flatten(1)).squeeze(1), labels)

        mlp.zero_grad()
        deepfm(bags["vx"], bags["v2x2"]).backward()
        ours = [p.grad.clone() for p in mlp.parameters()]
        mlp.zero_grad()
        squares = torch.zeros(rows * n_fields, K, device=DEVICE).index_add(
            0, sample * n_fields + fields, v_leaf[indices] ** 2).view(rows, n_fields, K)
        deepfm(expected, squares).backward()
        for mine, theirs in zip(ours, (p.grad for p in mlp.parameters())):
            torch.testing.assert_close(mine, theirs, rtol=1e-5, atol=1e-6)
        with torch.no_grad():
            v -= lr * v_leaf.grad
        torch.testing.assert_close(wide.v, v, rtol=1e-5, atol=1e-6)


def test_bad_fields_are_refused_with_the_value():
    wide = SparseAggregate(FM(), 10, optimizer="adagrad")
    with pytest.raises(DataError, match="field 3 is outside"):
        wide(torch.tensor([1, 2]), torch.tensor([0, 2]), fields=torch.tensor([0, 3]), n_fields=3)
    with pytest.raises(DataError, match="n_fields given"):
        wide(torch.tensor([1, 2]), torch.tensor([0, 2]), fields=torch.tensor([0, 1]))


class Embeddings(Model):
    """Only an aggregate: the pooled embeddings of a bag (nn.EmbeddingBag's sum mode)."""

    def __init__(self):
        self.v = Param(size=K, init=Normal(0.1))

    def aggregate(self, x, p):
        return {"vx": x * p.v}


def test_a_model_with_only_an_aggregate_is_an_embedding_bag_stepped_in_backward():
    wide = SparseAggregate(Embeddings(), 30, optimizer="sgd", lr=0.5, device=DEVICE)
    bag = torch.nn.EmbeddingBag(30, K, mode="sum").to(DEVICE)
    with torch.no_grad():
        bag.weight.copy_(wide.v)
    indices, offsets, values, dense, labels = _batch(1, n_features=30)
    pooled = wide(indices, offsets, values)["vx"]
    theirs = bag(indices, offsets[:-1], per_sample_weights=values)
    torch.testing.assert_close(pooled, theirs, rtol=1e-5, atol=1e-6)
    target = torch.linspace(-1, 1, K, device=DEVICE)
    ((pooled - target) ** 2).mean().backward()
    ((theirs - target) ** 2).mean().backward()
    with torch.no_grad():
        bag.weight -= 0.5 * bag.weight.grad
    torch.testing.assert_close(wide.v, bag.weight, rtol=1e-5, atol=1e-6)
    # the training path still asks for a loss
    with pytest.raises(ModelError, match="defines no loss"):
        lower(Embeddings())


def _keyed(features, keys):
    """The dict's bags as KeyedBags in the order keys (key-major, as TorchRec lays them out)."""
    indices, lengths, values = [], [], []
    for key in keys:
        ids, offsets, *rest = features[key]
        indices.append(ids)
        lengths.append(offsets.diff())
        values.append(rest[0] if rest else torch.ones(ids.numel(), device=ids.device))
    offsets = torch.cat([torch.zeros(1, dtype=torch.int64, device=indices[0].device), torch.cat(lengths).cumsum(0)])
    return KeyedBags(tuple(keys), torch.cat(indices), offsets, torch.cat(values))


@pytest.mark.parametrize("given", ["per table", "keyed in the module's order", "keyed in any order"])
def test_packed_tables_pool_as_one_embedding_bag_per_table_would_with_a_call_per_pack(given):
    tables = [Table(f"f{i}", rows=7 + i, dim=(2, 4, 1)[i % 3], optimizer="sgd", lr=0.4,
                    pooling="mean" if i in (1, 4) else "sum") for i in range(9)]
    packed = PackedEmbeddingBags(tables, seed=2, device=DEVICE)
    # (dim, pooling) of the nine: 2/sum, 4/mean, 1/sum, 2/sum, 4/mean, 1/sum, 2/sum, 4/sum, 1/sum
    assert len(packed.packs) == 4
    bags = {}
    for pack, members in zip(packed.packs, packed._members):
        for table, start in members:
            bag = torch.nn.EmbeddingBag(table.rows, table.dim, mode=table.pooling).to(DEVICE)
            with torch.no_grad():
                bag.weight.copy_(pack.v[start:start + table.rows].view(table.rows, table.dim))
            bags[table.name] = bag
    generator = torch.Generator().manual_seed(3)
    features, rows = {}, 12
    for table in tables:
        lengths = torch.randint(0, 3, (rows,), generator=generator)
        offsets = torch.cat([torch.zeros(1, dtype=torch.int64), lengths.cumsum(0)])
        features[table.name] = (torch.randint(0, table.rows, (int(offsets[-1]),), generator=generator).to(DEVICE),
                                offsets.to(DEVICE))
    if given == "per table":
        ours = packed(features)
    else:
        keys = list(packed.keys) if given == "keyed in the module's order" else [t.name for t in reversed(tables)]
        assert keys != [t.name for t in tables]
        ours = packed(_keyed(features, keys))
    theirs = {name: bags[name](*features[name][:1], features[name][1][:-1]) for name in features}
    targets = {t.name: torch.randn(rows, t.dim, generator=generator).to(DEVICE) for t in tables}
    for name in ours:
        torch.testing.assert_close(ours[name], theirs[name], rtol=1e-5, atol=1e-6)
    sum(((ours[n] - targets[n]) ** 2).sum() for n in ours).backward()
    sum(((theirs[n] - targets[n]) ** 2).sum() for n in theirs).backward()
    for pack, members in zip(packed.packs, packed._members):
        for table, start in members:
            expected = bags[table.name].weight.detach() - 0.4 * bags[table.name].weight.grad
            torch.testing.assert_close(pack.v[start:start + table.rows].view(table.rows, table.dim), expected,
                                       rtol=1e-5, atol=1e-6)


def test_packed_tables_refuse_an_id_past_its_table_and_a_missing_table():
    packed = PackedEmbeddingBags([Table("a", 5, 2, lr=0.1), Table("b", 3, 2, lr=0.1)])
    one = (torch.tensor([0]), torch.tensor([0, 1]))
    with pytest.raises(DataError, match="table 'b': feature id 3 is outside its 3 rows"):
        packed({"a": one, "b": (torch.tensor([3]), torch.tensor([0, 1]))})
    with pytest.raises(DataError, match="no rows given for tables"):
        packed({"a": one})


def test_keyed_bags_are_checked_before_any_work_with_the_table_and_value():
    packed = PackedEmbeddingBags([Table("a", 5, 2, lr=0.1), Table("b", 3, 2, lr=0.1)])
    ids = torch.tensor([[0, 1], [4, 2]])
    assert set(packed(KeyedBags.one_hot(("a", "b"), ids))) == {"a", "b"}
    with pytest.raises(DataError, match="table 'b': feature id 3 is outside its 3 rows"):
        packed(KeyedBags.one_hot(("a", "b"), torch.tensor([[0, 1], [4, 3]])))
    with pytest.raises(DataError, match="keys must be the tables"):
        packed(KeyedBags.one_hot(("a", "a"), ids))
    with pytest.raises(DataError, match="not 2 keys x a batch"):
        packed(KeyedBags(("a", "b"), torch.tensor([0, 1, 2]), torch.tensor([0, 1, 2, 3])))
    with pytest.raises(DataError, match="offsets must rise from 0"):
        packed(KeyedBags(("a", "b"), torch.tensor([0, 1, 2, 1]), torch.tensor([0, 3, 1, 4, 4])))
    with pytest.raises(DataError, match="key_lengths .* give 3 entries for 2 keys, the indices hold 4"):
        packed(KeyedBags(("a", "b"), torch.tensor([0, 1, 2, 1]), torch.arange(5), key_lengths=(2, 1)))
    # the host's lengths per key give the packs' bounds: the same pooling as the device's count
    bags = KeyedBags.one_hot(("a", "b"), ids)
    counted = packed(dataclasses.replace(bags, key_lengths=None))
    for name, value in packed(bags).items():
        torch.testing.assert_close(value, counted[name])


def test_a_pack_heavier_than_its_limit_is_cut_into_shards_of_equal_cost_by_picassos_eq_1():
    tables = [Table(name, rows=10, dim=4, lr=0.1) for name in "abcde"] + [Table("z", rows=10, dim=8, lr=0.1)]
    accesses = {"a": 50, "b": 30, "c": 20, "d": 20, "e": 10, "z": 5}
    assert [[t.name for t in pack] for pack in pack_tables(tables)] == [list("abcde"), ["z"]]
    # dim-4 pack: costs 200, 120, 80, 80, 40 = 520 -> 3 shards of at most 200: {a}, {b, e}, {c, d}
    shards = pack_tables(tables, accesses, max_cost=200)
    assert [[t.name for t in pack] for pack in shards] == [["a"], ["b", "e"], ["c", "d"], ["z"]]
    with pytest.raises(OptionError, match="accesses of every table"):
        pack_tables(tables, {"a": 1}, max_cost=10)
    # the same math whatever the packing: the split module pools as the unsplit one
    whole, split = PackedEmbeddingBags(tables, seed=1), PackedEmbeddingBags(tables, seed=1, accesses=accesses,
                                                                          max_cost=200)
    assert len(split.packs) == 4
    for big in (whole, split):
        for pack, members in zip(big.packs, big._members):
            for table, start in members:
                rows = torch.arange(table.rows * table.dim, dtype=torch.float32).view(table.rows, table.dim)
                pack.v[start:start + table.rows] = rows + ord(table.name[0])
    features = {t.name: (torch.tensor([1, 3, 9]), torch.tensor([0, 2, 3])) for t in tables}
    for name, pooled in whole(features).items():
        torch.testing.assert_close(split(features)[name], pooled)


def test_warm_up_batches_count_every_tables_accesses_for_the_cost_split():
    """KeyedBags with and without their lengths per key, and per-table batches, counted alike."""
    ids = torch.tensor([[1, 2], [3, 4], [5, 6]])
    bags = KeyedBags(("a", "b"), torch.tensor([1, 3, 5, 5, 2]), torch.tensor([0, 1, 2, 3, 4, 4, 5]))
    assert bags.samples == 3
    counted = table_accesses([KeyedBags.one_hot(("a", "b"), ids), bags, dataclasses.replace(bags, key_lengths=(3, 2)),
                              {"a": (torch.tensor([7, 8]), torch.tensor([0, 2])), "b": ([1], [0, 1])}])
    assert counted == {"a": 3 + 3 + 3 + 2, "b": 3 + 2 + 2 + 1}
    tables = [Table(name, rows=10, dim=4, lr=0.1) for name in "ab"]
    assert [[t.name for t in pack] for pack in pack_tables(tables, counted, max_cost=4 * 10)] == [["a"], ["b"]]


def test_tables_larger_than_memory_are_refused_before_allocation(monkeypatch):
    import alac.runtime.device.memory

    monkeypatch.setattr(alac.runtime.device.memory, "available_bytes", lambda device: 10**6)
    # 100,000 rows of w, v (K = 4) and their AdaGrad sums: 2.4 MB
    with pytest.raises(DataError, match="100,000 feature ids need .* for the tables of .*hash them into fewer"):
        SparseAggregate(FM(), 100_000, optimizer="adagrad", lr=0.1)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("optimizer", ["sgd", "adagrad"])
def test_a_step_of_trusted_batches_never_waits_for_the_gpu(optimizer):
    """check_batches off: forward, backward and the rows' update queue without a host round trip."""
    wide = SparseAggregate(FM(), 50, optimizer=optimizer, lr=0.1, device="cuda")
    wide.check_batches = False
    indices, offsets, values, *_ = (t.cuda() for t in _batch(0, n_features=50))
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        accums = wide(indices, offsets, values)
        sum(value.sum() for value in accums.values()).backward()
    finally:
        torch.cuda.set_sync_debug_mode("default")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_packed_one_hot_bags_of_trusted_batches_never_wait_for_the_gpu():
    packed = PackedEmbeddingBags([Table(f"f{i}", 20 + i, (4, 8)[i % 2], lr=0.1) for i in range(6)], device="cuda")
    packed.check_batches = False
    ids = torch.randint(0, 20, (64, 6), device="cuda")
    bags = KeyedBags.one_hot(packed.keys, ids[:, torch.tensor([int(key[1:]) for key in packed.keys], device="cuda")])
    packed(bags)       # the first batch of a key order moves the packs' constants to the GPU, once
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        pooled = packed(bags)
        sum(value.sum() for value in pooled.values()).backward()
    finally:
        torch.cuda.set_sync_debug_mode("default")


def test_narrow_tables_store_bfloat16_rows_sum_in_float32_and_pack_apart():
    tables = [Table("a", 30, 4, lr=0.1), Table("b", 20, 4, lr=0.1, dtype="bfloat16")]
    packed = PackedEmbeddingBags(tables, seed=1)
    assert len(packed.packs) == 2            # same dim, different storage: two packs
    narrow = packed.packs[1]
    assert narrow.v.dtype == torch.bfloat16 and narrow.v_accumulator.dtype == torch.float32
    ids = torch.tensor([[1, 2], [3, 19]])
    pooled = packed(KeyedBags.one_hot(packed.keys, ids[:, [0, 1] if packed.keys == ("a", "b") else [1, 0]]))
    assert pooled["b"].dtype == torch.float32
    torch.testing.assert_close(pooled["b"], narrow.v[[2, 19]].float())
    before = narrow.v.clone()
    pooled["b"].sum().backward()
    assert narrow.v.dtype == torch.bfloat16 and not torch.equal(narrow.v[[2, 19]], before[[2, 19]])
    assert torch.equal(narrow.v[[0, 1, 3]], before[[0, 1, 3]])
    with pytest.raises(OptionError, match="dtype float32, bfloat16 or float16"):
        Table("c", 5, 2, dtype="int8")
