"""The zoo is found by name inside the package; a user's model file runs only when named by the user."""

import pytest

from alac.errors import AlacError
from alac.ir.pipeline import lower
from alac.models import ZOO, file_module, is_model_file, model_module, names, zoo_model, zoo_module


def test_every_zoo_model_imports_by_name_and_lowers():
    assert names() == ["fm", "lr", "lsr", "lsvm", "poisson"]
    for name in ZOO:
        module = zoo_module(name)
        assert module.__name__ == f"alac.models.{name}" and hasattr(module, "DEFAULT_LR")
        assert lower(zoo_model(name)).name.startswith(name)


def test_zoo_defaults_and_options():
    fm = zoo_model("fm")
    assert fm.v.size == 8 and fm.v.l2 == zoo_module("fm").DEFAULT_L2 == 0.01
    assert zoo_model("fm", k=16, l2=0.0).v.size == 16


def test_names_and_paths():
    assert not is_model_file("lr") and is_model_file("my.py") and is_model_file("models/lr")
    with pytest.raises(AlacError, match="unknown model 'nope': give a model file"):
        model_module("nope")
    with pytest.raises(AlacError, match="unknown model '/etc/passwd'"):
        zoo_module("/etc/passwd")


@pytest.mark.parametrize("text, message", [
    ("MODEL = 1\nDEFAULT_LR = (\n", r"bad\.py: line 2: not valid Python"),
    ("import math\nraise RuntimeError('no')\n", r"bad\.py: line 2: the model file raised RuntimeError: no"),
    ("DEFAULT_LR = 1\n", r"bad\.py: a model file defines MODEL"),
])
def test_bad_model_files_are_one_clear_error(tmp_path, text, message):
    path = tmp_path / "bad.py"
    path.write_text(text)
    with pytest.raises(AlacError, match=message):
        file_module(path)
    with pytest.raises(AlacError, match="no model file there"):
        file_module(tmp_path / "missing.py")
