"""The names of ModelIR's symbols and binders (alac.ir.model_ir's docstring says what each means)."""

from __future__ import annotations

import sympy as sp

X = sp.Symbol("x", real=True)
Y = sp.Symbol("y", real=True)


def symbol(name):
    return sp.Symbol(name, real=True)


def delta_name(accum):
    return f"d_{accum}"


def global_grad_name(name):
    return f"dg_{name}"


def grad_name(param):
    return f"grad_{param}"


def l2_name(param):
    return f"l2_{param}"


LOSS = "loss"
PREDICTION = "prediction"
