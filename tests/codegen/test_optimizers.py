"""Optimizers inside the generated kernels: k sync steps equal the reference executor and an
independent NumPy implementation of the published update equations."""

import re

import numpy as np
import pytest
import torch

from alac import ModelError
from alac.data.arrays import from_csr_arrays
from alac.dsl import LinearModel, Param, ops
from alac.optimizers import SGD, Optimizer, get_optimizer
from alac.plan import Plan
from alac.runtime.execution.executor import Executor, LabelMap
from tests.codegen.test_kernels import ATOL, KERNEL_BACKEND, RTOL, _assert_states_close, awkward_dataset, laid_out
from tests.zoo_models import ZOO

pytestmark = pytest.mark.skipif(KERNEL_BACKEND is None, reason="needs a GPU or TRITON_INTERPRET=1")


class _LR(LinearModel):
    labels = "binary"
    prediction = "probability"

    def __init__(self, l1=0.0, l2=0.0, init=0.0):
        self.w = Param(l1=l1, l2=l2, init=init)
        self.b = ZOO["lr"]().b

    def loss(self, a, g, y):
        return ops.softplus(-y * self.score(a, g))

    def predict(self, a, g):
        return ops.sigmoid(self.score(a, g))


def numpy_steps(X, y, count, optimizer, steps, lr, l1, l2, hyper):
    """Full-batch steps of L2/L1-regularised logistic regression, written from the papers; count[j]
    is the number of entries of feature j (duplicates in a row counted apart, as alac stores them)."""
    n, d = X.shape
    w, b = np.zeros(d), 0.0
    state = {"velocity": np.zeros(d), "accumulator": np.zeros(d), "z": np.zeros(d), "n": np.zeros(d),
             "m": np.zeros(d), "v": np.zeros(d), "t": np.zeros(d)}
    touched = count > 0
    for _ in range(steps):
        z_score = X @ w + b
        delta = -y / (1 + np.exp(y * z_score))                  # dLoss/dz of log(1 + exp(-y z))
        g = X.T @ delta / n
        if optimizer != "ftrl":
            g = g + l2 * count * w / n                          # lazy L2, once per occurrence
        b -= lr * delta.sum() / n
        t = touched
        if optimizer == "sgd":                                  # proximal SGD (soft thresholding)
            u = w[t] - lr * g[t]
            w[t] = np.sign(u) * np.maximum(np.abs(u) - lr * l1, 0)
        elif optimizer == "momentum":
            state["velocity"][t] = hyper["momentum"] * state["velocity"][t] + g[t]
            w[t] -= lr * state["velocity"][t]
        elif optimizer == "adagrad":                            # Duchi et al. 2011
            state["accumulator"][t] += g[t] ** 2
            w[t] -= lr * g[t] / (np.sqrt(state["accumulator"][t]) + hyper["eps"])
        elif optimizer == "ftrl":                               # McMahan et al. 2013, Algorithm 1
            zz, nn = state["z"], state["n"]
            sigma = (np.sqrt(nn[t] + g[t] ** 2) - np.sqrt(nn[t])) / lr
            zz[t] += g[t] - sigma * w[t]
            nn[t] += g[t] ** 2
            w[t] = np.where(np.abs(zz[t]) <= l1, 0.0,
                            -(zz[t] - np.sign(zz[t]) * l1) / ((hyper["beta"] + np.sqrt(nn[t])) / lr + l2))
        elif optimizer == "adam":                               # Kingma and Ba 2015, lazy
            state["t"][t] += 1.0
            state["m"][t] = hyper["beta1"] * state["m"][t] + (1 - hyper["beta1"]) * g[t]
            state["v"][t] = hyper["beta2"] * state["v"][t] + (1 - hyper["beta2"]) * g[t] ** 2
            m_hat = state["m"][t] / (1 - hyper["beta1"] ** state["t"][t])
            v_hat = state["v"][t] / (1 - hyper["beta2"] ** state["t"][t])
            w[t] -= lr * m_hat / (np.sqrt(v_hat) + hyper["eps"])
    return w, b, state


def _train_on_both_backends(make_executor, layout, labels, epochs, lr):
    """{backend: executor} for the reference executor and the kernels, each made by
    make_executor(backend) and trained `epochs` epochs at lr."""
    executors = {}
    for backend in ("reference", KERNEL_BACKEND):
        executor = make_executor(backend)
        for epoch in range(epochs):
            executor.train_epoch(layout, labels, epoch, lr)
        executors[backend] = executor
    return executors


def _assert_optimizer_states_close(reference, kernel):
    """Params, globals and every optimizer state."""
    _assert_states_close(reference, kernel)
    for key in reference.states:
        torch.testing.assert_close(kernel.states[key].cpu(), reference.states[key].cpu(), rtol=RTOL, atol=ATOL)


def _conditioned(name):
    """The optimizer for a comparison of update code across devices. Adam's m / (sqrt(v) + eps) is
    ill-conditioned where a gradient (sum) is ~0 (its first steps are sign(g) lr): with eps = 1e-8
    the summation order of the GPU's atomics flips such steps between -lr and +lr, so Adam takes
    eps = 1e-3."""
    return get_optimizer(name, eps=1e-3) if name == "adam" else name


def _dense(dataset):
    """X as a dense float64 matrix and y in {-1, +1}, for the NumPy references."""
    return dataset.to_scipy().toarray().astype(np.float64), np.where(dataset.labels.numpy() > 0, 1.0, -1.0)


CASES = {
    "sgd": dict(l1=0.0, l2=0.0, hyper={}),
    "sgd_l1": dict(l1=0.01, l2=0.02, hyper={}),
    "momentum": dict(l1=0.0, l2=0.01, hyper={"momentum": 0.9}),
    "adagrad": dict(l1=0.0, l2=0.01, hyper={"eps": 1e-8}),
    "ftrl": dict(l1=0.05, l2=0.1, hyper={"beta": 1.0}),
    "adam": dict(l1=0.0, l2=0.01, hyper={"beta1": 0.9, "beta2": 0.999, "eps": 1e-8}),
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("hot_size", [0, 5])
def test_k_sync_steps_equal_reference_and_numpy(case, hot_size):
    name = case.split("_")[0]
    settings = CASES[case]
    dataset = awkward_dataset(31)
    device, layout, labels = laid_out(dataset, "binary")
    # one batch holds every row, so a step is a full-batch step whatever the chunk order
    plan = Plan(chunk_size=8, batch_size=8 * layout.n_chunks, hot_size=hot_size, replicas=2)
    lr, steps = 0.3, 3
    executors = _train_on_both_backends(
        lambda backend: Executor(_LR(l1=settings["l1"], l2=settings["l2"]), plan, backend=backend, device=device,
                                 optimizer=get_optimizer(name, **settings["hyper"])), layout, labels, steps, lr)
    states = {backend: executor.state for backend, executor in executors.items()}
    _assert_states_close(states["reference"], states[KERNEL_BACKEND])
    X, y = _dense(dataset)
    # the kernels hold hyper-parameters in float32: compare the algorithm, not that rounding
    hyper = {k: float(np.float32(v)) for k, v in
             get_optimizer(name, **settings["hyper"]).hyper_values(plan.batch_size).items()}
    count = np.bincount(dataset.indices.numpy(), minlength=dataset.n_features)
    w, b, _ = numpy_steps(X, y, count, name, steps, lr, settings["l1"], settings["l2"], hyper)
    kernel_w = states[KERNEL_BACKEND].in_original_order(layout.old_to_new)["w"].cpu().double().numpy()
    np.testing.assert_allclose(kernel_w, w, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(float(states[KERNEL_BACKEND].globals["b"]), b, rtol=1e-5, atol=1e-6)
    if settings["l1"]:
        assert (kernel_w == 0).any()  # L1 makes exact zeros


@pytest.mark.parametrize("name", ["momentum", "adagrad", "ftrl", "adam"])
@pytest.mark.parametrize("kernels", ["fused", "stage"])
def test_vector_params_equal_the_reference(name, kernels):
    """FM: per-element and row-wise states (AdaGrad's accumulator, Adam's step count per row)."""
    dataset = awkward_dataset(32)
    device, layout, labels = laid_out(dataset, "binary")
    plan = Plan(chunk_size=8, batch_size=16, kernels=kernels, hot_size=4)
    executors = _train_on_both_backends(
        lambda backend: Executor(ZOO["fm"](), plan, backend=backend, device=device, seed=4,
                                 optimizer=_conditioned(name)), layout, labels, 2, 0.05)
    _assert_optimizer_states_close(executors["reference"].state, executors[KERNEL_BACKEND].state)


class RMSProp(Optimizer):
    """A user-declared optimizer: written with the DSL like a model."""

    name = "rmsprop"
    state = {"mean_square": 0.0}
    hyper = {"rho": 0.9, "eps": 1e-8}

    def update(self, p, g, s, h):
        mean_square = h.rho * s.mean_square + (1 - h.rho) * g * g
        return p - h.lr * g / (ops.sqrt(mean_square) + h.eps), {"mean_square": mean_square}


def test_a_user_declared_optimizer_runs_in_the_kernels():
    dataset = awkward_dataset(33)
    device, layout, labels = laid_out(dataset, "binary")
    plan = Plan(chunk_size=8, batch_size=8 * layout.n_chunks)
    executors = _train_on_both_backends(
        lambda backend: Executor(_LR(), plan, backend=backend, device=device, optimizer=RMSProp(rho=0.5)),
        layout, labels, 3, 0.1)
    _assert_states_close(executors["reference"].state, executors[KERNEL_BACKEND].state)
    # one full-batch step by hand: ms = (1 - rho) g^2, w = -lr g / sqrt(ms)
    X, y = _dense(dataset)
    executor = Executor(_LR(), plan, backend=KERNEL_BACKEND, device=device, optimizer=RMSProp(rho=0.5))
    executor.train_epoch(layout, labels, 0, 0.1)
    g = X.T @ (-y / (1 + np.exp(0.0))) / X.shape[0]
    expected = np.where(g != 0, -0.1 * g / (np.sqrt(0.5 * g * g) + 1e-8), 0.0)
    got = executor.state.in_original_order(layout.old_to_new)["w"].cpu().double().numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


def test_optimizer_errors():
    with pytest.raises(ModelError, match="unknown optimizer 'lbfgs'"):
        get_optimizer("lbfgs")
    with pytest.raises(ModelError, match="has no hyper-parameter"):
        get_optimizer("adagrad", momentum=0.9)
    with pytest.raises(ModelError, match="does not apply L1"):
        Executor(_LR(l1=0.1), Plan(), backend="reference", optimizer="adagrad")
    assert isinstance(get_optimizer(SGD()), SGD)


@pytest.mark.parametrize("name", ["momentum", "adagrad", "ftrl", "adam"])
@pytest.mark.parametrize("hot_size", [0, 6])
def test_async_optimizers_train(name, hot_size):
    """Async updates race, so there is no exact reference: additive values are added, the others
    stored; the loss must fall and every value stay finite."""
    dataset = awkward_dataset(34, n_rows=300)
    device, layout, labels = laid_out(dataset, "binary")
    plan = Plan(chunk_size=8, batch_size=32, semantics="async", programs=5, hot_size=hot_size)
    executor = Executor(_LR(l2=0.01), plan, backend=KERNEL_BACKEND, device=device, optimizer=name)
    lr = {"momentum": 0.05, "adagrad": 0.05, "ftrl": 0.5, "adam": 0.01}[name]
    losses = [executor.train_epoch(layout, labels, epoch, lr) for epoch in range(6)]
    assert losses[-1] < losses[0] - 0.01, losses
    state = executor.state
    assert all(torch.isfinite(v).all() for v in list(state.params.values()) + list(state.states.values()))


def _distinct_ids_dataset(seed, n_rows=40, n_features=12):
    """Rows of 2-5 distinct features and real values: with one row per chunk, no feature repeats
    within a chunk. (No row of one feature: FM's factor gradient there is exactly 0, which the async
    hot flush takes for "not touched", where momentum and Adam would still move the row.)"""
    generator = np.random.default_rng(seed)
    lengths = generator.integers(2, 6, n_rows)
    ids = np.concatenate([generator.choice(n_features, n, replace=False) for n in lengths])
    indptr = np.concatenate([[0], np.cumsum(lengths)])
    return from_csr_arrays(indptr, ids, generator.uniform(0.2, 1.5, ids.size), generator.choice([0.0, 1.0], n_rows),
                           n_features)


@pytest.mark.parametrize("name, derive_params", [("ftrl", True), ("ftrl", False), ("momentum", True),
                                                  ("adagrad", True), ("adam", True)])
@pytest.mark.parametrize("model", ["lr", "fm"])
@pytest.mark.parametrize("hot_size", [0, 5])
def test_async_with_one_program_and_one_row_per_chunk_equals_the_reference(name, derive_params, model, hot_size):
    """One program, one row per chunk, no repeated feature in a row: every async update is exactly
    one step of the optimizer per touched feature, as the reference's batches of one chunk take it,
    whether the param is stored or derived from the state (FTRL's w; the runtime writes it after the
    epoch) and whether the hot features go through the program's flushed sums."""
    if KERNEL_BACKEND == "triton" and name in ("momentum", "adam"):
        pytest.skip("their stored states race between a program's steps on a GPU (a warp of the next "
                    "chunk may read a state before another warp of this one has stored it); exact "
                    "under the interpreter, which runs one step after the other")
    dataset = _distinct_ids_dataset(36)
    device, layout, labels = laid_out(dataset, "binary", chunk_size=1)
    plan = Plan(chunk_size=1, batch_size=4, semantics="async", programs=1, hot_size=hot_size, flush_every=1,
                slots_per_step=8, derive_params=derive_params)
    network = (lambda: _LR(l1=0.01, l2=0.02)) if model == "lr" and name == "ftrl" else ZOO[model]
    executors = _train_on_both_backends(
        lambda backend: Executor(network(), plan, backend=backend, device=device, seed=2,
                                 optimizer=_conditioned(name)), layout, labels, 3, 0.3 if name == "ftrl" else 0.05)
    reference, kernel = executors["reference"], executors[KERNEL_BACKEND]
    assert kernel.backend.generated.derived_params == (("w",) if name == "ftrl" and derive_params else ())
    _assert_optimizer_states_close(reference.state, kernel.state)
    torch.testing.assert_close(kernel.predict(layout).cpu(), reference.predict(layout).cpu(), rtol=RTOL, atol=ATOL)


def test_only_stateless_changes_linear_in_the_gradient_are_additive():
    """SGD's change -lr g sums over a batch's edges; proximal SGD (l1) reads p, AdaGrad has a state,
    and an update that squares g is not linear."""
    from alac.ir.pipeline import lower
    from alac.optimizers import Optimizer

    class SquaredStep(Optimizer):
        name = "squared_step"

        def update(self, p, g, s, h):
            return p - h.lr * g * g, {}

    assert lower(ZOO["fm"](), "sgd").optimizer.additive
    assert "additive" in str(lower(_LR(), "sgd").optimizer)
    assert not lower(_LR(l1=0.1), "sgd").optimizer.additive
    assert not lower(_LR(), "adagrad").optimizer.additive
    assert not lower(_LR(), SquaredStep()).optimizer.additive


def test_only_params_that_start_at_the_derivation_are_derived():
    """FTRL's weight at z = n = 0 is 0: a zero-initialised param is derivable, a random one (FM's v)
    or a constant other than 0 is not (its start would be lost)."""
    from alac.dsl import Normal
    from alac.ir.pipeline import lower

    assert lower(ZOO["fm"](), "ftrl").optimizer.derivable == ("w",)
    assert lower(_LR(init=0.5), "ftrl").optimizer.derivable == ()
    assert lower(_LR(init=Normal(0.1)), "ftrl").optimizer.derivable == ()
    assert lower(_LR(), "adagrad").optimizer.derivable == ()
    assert "derived_p" in str(lower(_LR(), "ftrl").optimizer)


@pytest.mark.parametrize("name", ["sgd", "adagrad"])
def test_exact_l2_decays_every_row(name):
    """Ten of the 40 features never occur: with exact L2 their (random) initial weights decay too."""
    from alac.dsl import Normal

    dataset = awkward_dataset(35)
    dataset.n_features = 40
    device, layout, labels = laid_out(dataset, "binary")
    plan = Plan(chunk_size=8, batch_size=8 * layout.n_chunks, cuda_graph=True)
    lr, l2, steps = 0.3, 0.1, 3

    def started(backend):
        optimizer = get_optimizer(name, **({"eps": 1e-8} if name == "adagrad" else {}))  # as the NumPy steps
        executor = Executor(_LR(l2=l2, init=Normal(0.5)), plan, backend=backend, device=device, optimizer=optimizer,
                            exact_l2=True)
        executor.initialize(layout)
        return executor

    initial = started("reference").state.in_original_order(layout.old_to_new)["w"].cpu().double().numpy()
    executors = _train_on_both_backends(started, layout, labels, steps, lr)
    states = {backend: executor.state for backend, executor in executors.items()}
    _assert_states_close(states["reference"], states[KERNEL_BACKEND])
    X, y = _dense(dataset)
    count = np.bincount(dataset.indices.numpy(), minlength=dataset.n_features)
    w, b, _ = numpy_steps_exact_l2(X, y, count, name, steps, lr, l2, initial)
    got = states[KERNEL_BACKEND].in_original_order(layout.old_to_new)["w"].cpu().double().numpy()
    np.testing.assert_allclose(got, w, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got[30:], initial[30:] * (1 - lr * l2) ** steps, rtol=1e-5)


def numpy_steps_exact_l2(X, y, count, optimizer, steps, lr, l2, initial):
    n, d = X.shape
    w, b, accumulator = initial.copy(), 0.0, np.zeros(d)
    touched = count > 0
    for _ in range(steps):
        delta = -y / (1 + np.exp(y * (X @ w + b)))
        g = X.T @ delta / n
        b -= lr * delta.sum() / n
        if optimizer == "sgd":
            w[touched] -= lr * g[touched]
        else:
            accumulator[touched] += g[touched] ** 2
            w[touched] -= lr * g[touched] / (np.sqrt(accumulator[touched]) + 1e-8)
        w *= 1 - lr * l2                        # every row, touched or not
    return w, b, accumulator


def test_an_optimizer_using_an_unknown_state_is_a_clear_error():
    class Broken(Optimizer):
        name = "broken"
        state = {"m": 0.0}

        def update(self, p, g, s, h):
            return p - h.lr * s.velocity, {"m": s.m}

    with pytest.raises(ModelError, match=r"^optimizer broken: update uses unknown state 'velocity'; it has: m$"):
        Executor(_LR(), Plan(), backend="reference", optimizer=Broken())


def test_ftrl_beta_and_adagrad_eps_default_to_one_occurrence_of_a_typical_value():
    """McMahan's beta = 1 is per sample; on the batch-mean scale the default is mean |x| / B (one
    occurrence's gradient); AdaGrad's eps four such gradients."""
    assert get_optimizer("ftrl").hyper_values(1024) == {"beta": 1 / 1024}
    assert get_optimizer("ftrl", beta=1).hyper_values(1024) == {"beta": 1.0}
    assert get_optimizer("ftrl", beta=None).describe() == "ftrl(beta=default)"
    dataset = awkward_dataset(31)       # real values
    _, layout, _ = laid_out(dataset, "binary")
    scale = float(dataset.values.abs().mean())
    assert scale != pytest.approx(1.0)
    for name, hyper, occurrences in (("ftrl", "beta", 1), ("adagrad", "eps", 4)):
        executor = Executor(_LR(), Plan(chunk_size=8, batch_size=64), backend="reference", optimizer=name)
        executor.initialize(layout)
        assert executor.settings().hypers[hyper] == pytest.approx(occurrences * scale / 64, rel=1e-6)


def test_async_derivations_read_their_states_by_atomic_operations():
    """Only a GPU shows stale reads (the test below); here: every state read of the generated async
    FTRL kernel is an atomic operation (one that sees the latest value), masked lanes are zeroed
    before any math reads them, and no state is read by a plain load."""
    from alac.codegen.kernels import generate_kernels
    from alac.ir.pipeline import lower

    source = generate_kernels(lower(ZOO["lr"](), get_optimizer("ftrl")),
                              Plan(semantics="async", chunk_size=32, hot_size=100)).source
    reads = [line for line in source.splitlines() if re.search(r"= .*tl\.atomic_add\(state_w_[zn]_ptr", line)]
    assert any("0.0, mask=cold_w" in line for line in reads)          # the derivation's reads of z and n
    assert reads and all(re.search(r"= tl\.where\((\w+), tl\.atomic_add\(.*mask=\1,", line) for line in reads)
    assert not re.search(r"tl\.load\(state_", source)


@pytest.mark.gpu
def test_async_ftrl_with_derived_weights_trains_like_stored_weights():
    """Hundreds of concurrent programs on skewed data: deriving w from z and n must keep FTRL's
    updates of n chained (a first version read n by a plain load, and LR on the 4M set diverged to a
    validation logloss of about 7), and hot features keep a stored w (derived there too, this ended
    at 0.438-0.478 against 0.431), so both forms end within a small margin. The derivation reads the
    states past L1: through it, a stale copy of n beside a fresh z spiked the first epoch (training
    loss 0.74-0.88 against 0.57 with stored weights) in most runs."""
    from alac.data.synthetic import criteo_like
    from alac.runtime.movement.layout import LayoutOptions, build_layout

    data = criteo_like(200_000, seed=1, device="cuda")
    layout = build_layout(data, LayoutOptions(chunk_size=32), device="cuda")
    labels = LabelMap.fit("binary", data.labels).model_labels(layout.labels)
    losses = {}
    for derive in (True, False):
        plan = Plan(chunk_size=32, batch_size=1024, semantics="async", hot_size=500, derive_params=derive)
        executor = Executor(ZOO["lr"](), plan, backend="triton", device="cuda", optimizer="ftrl")
        losses[derive] = [executor.train_epoch(layout, labels, epoch, 0.05) for epoch in range(3)]
    assert losses[True][-1] < losses[True][0]
    assert losses[True][0] - losses[False][0] < 0.12, losses
    assert abs(losses[True][-1] - losses[False][-1]) < 0.005, losses


def test_a_derivation_undefined_at_the_initial_state_derives_nothing():
    """param_from_state dividing by a state that starts at 0: no initial value, so not derivable."""
    from alac.ir.pipeline import lower

    class Reciprocal(SGD):
        name = "reciprocal"
        state = {"inverse": 0.0}

        def update(self, p, g, s, h):
            return p - h.lr * g, {"inverse": s.inverse + g * g}

        def param_from_state(self, s, h):
            return 1 / s.inverse

    assert lower(_LR(), Reciprocal()).optimizer.derivable == ()
    assert "derived_p" in str(lower(_LR(), Reciprocal()).optimizer)


def test_a_derivation_using_an_unknown_state_is_a_clear_error():
    class Broken(SGD):
        name = "broken_derivation"

        def param_from_state(self, s, h):
            return s.z

    with pytest.raises(ModelError, match=r"^optimizer broken_derivation: param_from_state uses unknown state 'z'"):
        Executor(_LR(), Plan(), backend="reference", optimizer=Broken())
