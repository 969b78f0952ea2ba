"""alac.nn.GraphedStep: steps replayed from CUDA graphs train as the eager steps do."""

import pytest
import torch

from alac.data.synthetic import criteo_like
from alac.nn import GraphedStep, whole_step
from alac.nn.deep_models import DeepFM
from alac.train.deep import DeepSettings, DeepTrainer

GPU = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def test_on_a_cpu_every_step_runs_as_called():
    calls = []

    def step(x, missing):
        calls.append(x.clone())
        return x * 2

    graphed = GraphedStep(step)
    for value in range(5):
        assert float(graphed(torch.tensor(float(value)), None)) == 2 * value
    assert [float(c) for c in calls] == [0, 1, 2, 3, 4] and not graphed.graphs


def _deepfm_and_step(device, backend="reference"):
    torch.manual_seed(3)
    model = DeepFM(500, 5, k=4, hidden=(16,), optimizer="adagrad", lr=0.05, seed=1, device=device, backend=backend)
    model.tables.check_batches = False
    dense = torch.optim.Adam(list(model.parameters()), lr=1e-2, capturable=True)

    def loss_of(ids, labels):
        rows, fields = ids.shape
        offsets = torch.arange(0, rows * fields + 1, fields, device=ids.device)
        field = torch.arange(fields, device=ids.device).repeat(rows)
        return torch.nn.functional.binary_cross_entropy_with_logits(model(ids.reshape(-1), offsets, field), labels)

    return model, whole_step(loss_of, [dense])


@GPU
@pytest.mark.parametrize("backend", ["reference", "triton"])
def test_replayed_steps_train_a_deepfm_as_eager_steps_do(backend):
    """Six full batches (two eager, a capture, three replays of new inputs) and a short one (eager):
    the tables, their AdaGrad state, the MLP and Adam's moments of an eager run; the tables on their
    reference programs and on their generated kernels."""
    generator = torch.Generator().manual_seed(0)
    batches = [(torch.randint(0, 500, (rows, 5), generator=generator).cuda(),
                torch.randint(0, 2, (rows,), generator=generator).float().cuda()) for rows in (64,) * 6 + (40,)]
    eager, eager_step = _deepfm_and_step("cuda", backend)
    replayed, step = _deepfm_and_step("cuda", backend)
    graphed = GraphedStep(step)
    for ids, labels in batches:
        expected = float(eager_step(ids, labels))
        assert float(graphed(ids, labels)) == pytest.approx(expected, rel=1e-5)
    assert len(graphed.graphs) == 1            # the short batch's shape ran eagerly
    for name, value in eager.state_dict().items():
        torch.testing.assert_close(replayed.state_dict()[name], value, rtol=1e-4, atol=1e-6, msg=name)


@GPU
def test_the_trainer_with_graphs_matches_it_without():
    data = criteo_like(6000, n_fields=8, seed=0, model="fm", device="cuda")
    train, valid = data.take(torch.arange(5000, device="cuda")), data.take(torch.arange(5000, 6000, device="cuda"))
    histories = {}
    for graphs in (True, False):
        trainer = DeepTrainer(DeepSettings(k=4, hidden=(16,), epochs=2, batch_size=512, cuda_graphs=graphs), "cuda")
        histories[graphs] = trainer.fit(train, valid)
    for with_graphs, without in zip(histories[True], histories[False]):
        assert with_graphs["valid_logloss"] == pytest.approx(without["valid_logloss"], abs=1e-4)
        assert with_graphs["train_loss"] == pytest.approx(without["train_loss"], abs=1e-4)


def test_the_trainer_takes_the_tables_kernels_on_a_gpu_only():
    from alac.errors import OptionError

    with pytest.raises(OptionError, match="reference programs or kernels"):
        DeepSettings(tables="gpu")
    data = criteo_like(600, n_fields=4, seed=0, device="cpu")
    trainer = DeepTrainer(DeepSettings(k=2, hidden=(4,), epochs=1, batch_size=128, tables="kernels"), "cpu")
    trainer.fit(data)
    assert trainer.network.tables._kernels is None        # on a CPU: the reference programs


@GPU
def test_the_trainer_on_the_tables_kernels_matches_it_on_their_programs():
    data = criteo_like(6000, n_fields=8, seed=0, model="fm", device="cuda")
    train, valid = data.take(torch.arange(5000, device="cuda")), data.take(torch.arange(5000, 6000, device="cuda"))
    histories = {}
    for tables in ("reference", "kernels"):
        trainer = DeepTrainer(DeepSettings(k=4, hidden=(16,), epochs=2, batch_size=512, tables=tables), "cuda")
        histories[tables] = trainer.fit(train, valid)
        assert (trainer.network.tables._kernels is not None) == (tables == "kernels")
    for kernels, reference in zip(histories["kernels"], histories["reference"]):
        assert kernels["valid_logloss"] == pytest.approx(reference["valid_logloss"], abs=1e-4)
