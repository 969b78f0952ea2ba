"""The zoo: wide models written in the DSL, found by their registered name.

A model module defines MODEL (a Model class taking l1=, l2= and its ARGUMENTS as keywords),
DEFAULT_LR (a number, or a function of the parsed command-line arguments) and optionally ARGUMENTS
[(flag, argparse keywords)]. The zoo's modules ship inside the package and are imported by name;
a user's model file is executed only when the user names it on the command line (`--model path.py`),
never because a checkpoint or a cache names it.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import traceback
from pathlib import Path

from alac.errors import AlacError

ZOO = {
    "lr": "alac.models.lr",
    "lsvm": "alac.models.lsvm",
    "lsr": "alac.models.lsr",
    "fm": "alac.models.fm",
    "poisson": "alac.models.poisson",
}


# torch modules over alac.nn, trained by alac.train.deep (alac train --model NAME), not DSL models
FIELD_MODELS = ("deepfm", "dlrm", "ffm", "wide_deep")


def names():
    return sorted(ZOO)


def is_model_file(name_or_path):
    """A model given as a path (it ends in .py or holds a folder separator), not a zoo name."""
    text = str(name_or_path)
    return text.endswith(".py") or "/" in text or "\\" in text


def zoo_module(name):
    """The module of a registered zoo model."""
    if name in FIELD_MODELS:
        raise AlacError(f"{name!r} is a field model (a torch module over alac.nn): it trains with alac train --model "
                        f"{name} and predicts with alac predict; the DSL models here are {', '.join(names())}")
    if name not in ZOO:
        raise AlacError(f"unknown model {name!r}: give a model file (path.py) or one of {', '.join(names())}")
    return importlib.import_module(ZOO[name])


def file_module(path):
    """The module of a user's model file: executes the file (call only with a path the user gave)."""
    path = Path(path)
    if not path.is_file():
        raise AlacError(f"{path}: no model file there (a zoo model is one of {', '.join(names())})")
    name = f"alac_user_model_{path.stem}"
    loaded = sys.modules.get(name)
    if loaded is not None and Path(getattr(loaded, "__file__", "")).resolve() == path.resolve():
        return loaded
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    # registered, so that its model classes pickle by reference (as a fitted estimator holding one does)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except SyntaxError as error:
        del sys.modules[name]
        raise AlacError(f"{path}: line {error.lineno}: not valid Python ({error.msg})") from None
    except Exception as error:  # the user's code: say where it failed, in one line
        del sys.modules[name]
        lines = [frame.lineno for frame in traceback.extract_tb(error.__traceback__)
                 if Path(frame.filename).resolve() == path.resolve()]
        where = f": line {lines[-1]}" if lines else ""
        raise AlacError(f"{path}{where}: the model file raised {type(error).__name__}: {error}") from None
    if not hasattr(module, "MODEL"):
        del sys.modules[name]
        raise AlacError(f"{path}: a model file defines MODEL (its Model class) and DEFAULT_LR")
    return module


def model_module(name_or_path):
    """A zoo name or, where the user gave a path, that file's module."""
    return file_module(name_or_path) if is_model_file(name_or_path) else zoo_module(name_or_path)


def default_l2(module, value_scale=1.0):
    """The model's L2 where none is given (DEFAULT_L2) in units of the data's mean |value| (value_scale; 1
    for one-hot data), as AdaGrad's eps is: FM's on 20 Newsgroups' L2-normalised rows (mean |x| 0.056)
    had over-regularised (benchmarks/defaults.py, the 20news fm defaults arm)."""
    return getattr(module, "DEFAULT_L2", 0.0) * value_scale


def default_options(module):
    """The module's model options at their defaults: l2, l1 and its ARGUMENTS."""
    options = {"l2": default_l2(module), "l1": 0.0}
    options.update({flag.lstrip("-").replace("-", "_"): spec.get("default")
                    for flag, spec in getattr(module, "ARGUMENTS", ())})
    return options


def build_model(module, args=None):
    """The model of a model module (its MODEL class), its options from args where they are set there."""
    return module.MODEL(**{name: getattr(args, name, value) for name, value in default_options(module).items()})


def zoo_model(name, **options):
    """A zoo model by name with its defaults, options overriding them: zoo_model("fm", k=16)."""
    module = zoo_module(name)
    return module.MODEL(**{**default_options(module), **options})
