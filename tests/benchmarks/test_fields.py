"""benchmarks/fields.py: its synthetic set is the same on every call and of the shapes it states, and a
tiny run of its arms writes every figure the results keep."""

import json
import sys

import pytest
import torch

from benchmarks import fields
from tests.runtime.movement.test_streams import DEVICE


def test_the_many_field_set_is_reproducible_and_of_its_stated_shapes():
    shapes = fields.field_shapes(30)
    assert shapes == fields.field_shapes(30) and {d for _, d in shapes} <= set(fields.DIMS)
    assert all(1000 <= c < 100_000 for c, _ in shapes)
    ids, labels = fields.rows(shapes, 5, 400, "cpu")
    again, _ = fields.rows(shapes, 5, 400, "cpu")
    assert torch.equal(ids, again) and ids.shape == (400, 30)
    assert bool((ids >= 0).all()) and bool((ids < torch.tensor([c for c, _ in shapes])).all())
    # Zipf ids: the smallest ids of a field are the most common; labels from the planted model vary
    assert float((ids == 0).float().mean()) > 0.05 and 0.1 < float(labels.mean()) < 0.9


def test_a_tiny_run_in_two_parts_writes_every_arms_figures(tmp_path, monkeypatch):
    tiny = ["--device", DEVICE, "--fields", "6", "--steps", "2", "--batch-size", "64", "--valid-rows", "256",
            "--warmup", "1", "--no-compile", "--deepfm-rows", "500", "--deepfm-epochs", "1", "--ffm-rows", "300",
            "--ffm-fields", "4"]
    monkeypatch.setattr(fields, "SHARED_DATA", tmp_path / "absent")
    for parts in ("synthetic", "deepfm,ffm"):
        monkeypatch.setattr(sys, "argv", ["fields.py", *tiny, "--parts", parts, "--out", str(tmp_path / parts)])
        fields.main()
    monkeypatch.setattr(sys, "argv", ["fields.py", "--merge", str(tmp_path / "synthetic" / "fields.json"),
                                      str(tmp_path / "deepfm,ffm" / "fields.json"), "--out", str(tmp_path)])
    fields.main()
    report = (tmp_path / "fields.md").read_text()
    assert "--parts synthetic --no-compile --steps 2`; `" in report and "--parts deepfm,ffm --no-compile" in report
    result = json.loads((tmp_path / "fields.json").read_text())
    assert [(a["name"], a["data"]) for a in result["arms"]] == [
        ("pytorch_per_field", "synthetic"), ("alac_packed", "synthetic"), ("alac_packed_kernels", "synthetic"),
        ("alac_packed_graphed", "synthetic"), ("alac_packed_D", "synthetic"),
        ("alac_packed_K", "synthetic"), ("alac_packed_KD", "synthetic"),
        ("pytorch_deepfm", "criteo_like"), ("alac_deepfm", "criteo_like"), ("alac_deepfm_kernels", "criteo_like"),
        ("pytorch_ffm", "criteo_like_ffm"), ("alac_ffm", "criteo_like_ffm"), ("alac_ffm_kernels", "criteo_like_ffm"),
        ("alac_ffm_kernels_async", "criteo_like_ffm")]
    for arm in result["arms"]:
        assert arm["fields"] == {"synthetic": 6, "criteo_like": 39, "criteo_like_ffm": 4}[arm["data"]]
        assert arm["samples_per_s"] > 0 and 0 <= arm["auc"] <= 1 and arm["logloss"] > 0
        # counted on a GPU only
        assert arm["kernels_per_step"] is None if DEVICE == "cpu" else arm["kernels_per_step"] > 0
    # a DeepFM arm trains its epochs (500 rows in batches of 64), an FFM arm one epoch
    assert result["arms"][-5]["steps"] == 8 and result["arms"][-1]["steps"] == 5
    assert result["arms"][-1]["ms_per_epoch"] > 0
    # the tables' generated kernels train what their reference programs train
    by_name = {arm["name"]: arm for arm in result["arms"]}
    for name in ("alac_packed", "alac_deepfm", "alac_ffm"):
        assert by_name[f"{name}_kernels"]["logloss"] == pytest.approx(by_name[name]["logloss"], abs=1e-5)
    # a step replayed from a graph is the eager step (on a CPU: eager, Adam's step count on the host)
    assert by_name["alac_packed_graphed"]["logloss"] == pytest.approx(by_name["alac_packed"]["logloss"], abs=1e-5)


def test_plain_and_alac_deepfm_give_the_same_logits_from_the_same_tables():
    """The two DeepFM arms are one architecture: alac's logits from the plain model's tables and MLP."""
    torch.manual_seed(0)
    plain, ours = fields.PlainDeepFM(50, 5, 16, 32), fields.AlacDeepFM(50, 5, 16, "cpu")
    with torch.no_grad():
        plain.v.weight.normal_(std=0.3)
        plain.w.weight.normal_(std=0.3)
        ours.model.tables.v.copy_(plain.v.weight)
        ours.model.tables.w.copy_(plain.w.weight.squeeze(1))
        ours.model.deep.load_state_dict(plain.deep.state_dict())
        ours.model.bias.copy_(plain.bias + 0.5)
        plain.bias += 0.5
    _same_logits_and_step(plain, ours, torch.randint(0, 50, (32, 5)))


def _same_logits_and_step(plain, ours, ids):
    """The same logits, and after one training step the same tables (the plain row-wise AdaGrad is
    alac's)."""
    torch.testing.assert_close(ours(ids), plain(ids), rtol=1e-5, atol=1e-5)
    labels = (torch.rand(ids.shape[0]) < 0.5).float()
    for model in (plain, ours):
        fields._step(model, model.optimizers(), ids, labels)
    torch.testing.assert_close(ours.model.tables.v, plain.v.weight.detach(), rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(ours.model.tables.w, plain.w.weight.detach().squeeze(1), rtol=1e-4, atol=1e-6)


def test_plain_and_alac_ffm_give_the_same_logits_and_step():
    """The two FFM speed arms are one model: alac's logits and tables after a step from the plain one's."""
    from benchmarks.ffm_arms import AlacFFM, PlainFFM

    torch.manual_seed(0)
    plain, ours = PlainFFM(40, 4, 3, 16), AlacFFM(40, 4, 3, "cpu")
    with torch.no_grad():
        plain.w.weight.normal_(std=0.3)
        ours.model.tables.v.copy_(plain.v.weight)
        ours.model.tables.w.copy_(plain.w.weight.squeeze(1))
    _same_logits_and_step(plain, ours, torch.randint(0, 10, (16, 4)) + 10 * torch.arange(4))

