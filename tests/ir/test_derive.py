"""Derived Apply against the papers' hand-written gradients (cuWide Table 1, eq. 6), and DSL errors."""

import math

import pytest
import sympy as sp

from alac import ModelError
from alac.dsl import Global, Model, Normal, Param, ops
from alac.ir.derive import loss_gradient
from alac.ir.functions import FactorSum, rewrite_elementary
from alac.ir.names import X, Y, symbol
from alac.ir.pipeline import lower
from alac.ir.stage_graph import build_stage_graph, kernel_groups
from tests.zoo_models import ZOO

w, b, wx, v, vx, v2x2 = (symbol(n) for n in ("w", "b", "wx", "v", "vx", "v2x2"))


def _same(first, second):
    return sp.simplify(rewrite_elementary(first) - rewrite_elementary(second)) == 0


def test_lr_gradient_is_cuwide_table_1():
    ir = lower(ZOO["lr"]())
    z = wx + b
    # cuWide Table 1, LR: dL/dw_j = -y x_j / (1 + exp(y w.x))
    assert _same(loss_gradient(ir, "w"), -Y * X / (1 + sp.exp(Y * z)))


def test_lsvm_gradient_is_cuwide_table_1():
    ir = lower(ZOO["lsvm"]())
    z = wx + b
    # hinge: -y x_j where y w.x < 1, else 0
    expected = sp.Piecewise((-Y * X, Y * z < 1), (0, True))
    derived = loss_gradient(ir, "w")
    for margin in (-3, 0.2, 0.999, 1.5, 4):
        for label in (-1, 1):
            point = {Y: label, X: 1.7, b: 0.1, wx: margin * label - 0.1}
            assert float(derived.subs(point)) == pytest.approx(float(expected.subs(point)))


def test_lsr_gradient_is_cuwide_table_1():
    ir = lower(ZOO["lsr"]())
    assert _same(loss_gradient(ir, "w"), (wx + b - Y) * X)


def test_fm_gradient_is_cuwide_eq_6():
    ir = lower(ZOO["fm"]())
    z = b + wx + FactorSum(vx**2 - v2x2) / 2
    dz = -Y / (1 + sp.exp(Y * z))
    # cuWide eq. 6 / Fig. 5 (Rendle): dz/dv_jf = x_j (sum_i v_if x_i) - v_jf x_j**2
    assert _same(loss_gradient(ir, "v"), dz * (X * vx - v * X**2))
    assert _same(loss_gradient(ir, "w"), dz * X)


def test_global_gradient_and_l2_term():
    ir = lower(ZOO["lr"]())
    assert _same(next(d.expr for d in ir.global_grads), -Y / (1 + sp.exp(Y * (wx + b))))
    grad = next(d.expr for d in ir.param_grads)
    assert grad.coeff(symbol("l2_w")) == w


class _LR(Model):
    w = Param()
    b = Global()

    def aggregate(self, x, p):
        return {"wx": x * p.w}

    def loss(self, a, g, y):
        return ops.softplus(-y * (a.wx + g.b))

    def predict(self, a, g):
        return ops.sigmoid(a.wx + g.b)


class _RightApply(_LR):
    def apply(self, x, p, a, g, y):
        return {"w": -y * x / (1 + ops.exp(y * (a.wx + g.b)))}


class _WrongApply(_LR):
    def apply(self, x, p, a, g, y):
        return {"w": -y * x * ops.sigmoid(y * (a.wx + g.b))}


def test_explicit_apply_is_checked():
    assert lower(_RightApply()).explicit_apply
    with pytest.raises(ModelError, match=r"model _wrongapply: the explicit apply of param 'w' disagrees"):
        lower(_WrongApply())


class _FMWrongApply(Model):
    def __init__(self):
        self.v = Param(size=3, init=Normal(0.1))

    def aggregate(self, x, p):
        return {"vx": x * p.v, "v2x2": x**2 * p.v**2}

    def loss(self, a, g, y):
        return 0.5 * (y - 0.5 * ops.sum(a.vx**2 - a.v2x2)) ** 2

    def predict(self, a, g):
        return 0.5 * ops.sum(a.vx**2 - a.v2x2)

    def apply(self, x, p, a, g, y):
        # forgets the -v x**2 term of eq. 6
        return {"v": -(y - 0.5 * ops.sum(a.vx**2 - a.v2x2)) * x * a.vx}


def test_wrong_vector_apply_is_reported():
    with pytest.raises(ModelError, match="param 'v' disagrees"):
        lower(_FMWrongApply())


def _model(aggregate, loss, params=None, predict=None):
    class Custom(Model):
        labels = "real"
        prediction = "value"

    model = Custom()
    for name, param in (params or {"w": Param(), "v": Param(size=4)}).items():
        setattr(model, name, param)
    model.b = Global()
    model.aggregate = aggregate
    model.loss = loss
    model.predict = predict or (lambda a, g: g.b)
    return model


@pytest.mark.parametrize("aggregate, loss, message", [
    (lambda x, p: {"wx": x * p.w}, lambda a, g, y: ops.erf(a.wx), "unknown op ops.erf"),
    (lambda x, p: {"vx": x * p.v}, lambda a, g, y: (y - a.vx) ** 2, "must return a scalar"),
    (lambda x, p: {"wx": x * p.w}, lambda a, g, y: ops.sum(a.wx), "ops.sum sums over the factor axis"),
    (lambda x, p: {"wx": x * p.w}, lambda a, g, y: (y - g.b) ** 2, "depends on no accum"),
    (lambda x, p: {"wx": x * p.w}, lambda a, g, y: math.exp(a.wx), "use alac.ops"),
    (lambda x, p: {"wx": x * p.w}, lambda a, g, y: a.wz, "unknown accum 'wz'"),
    (lambda x, p: {"wx": x * p.u}, lambda a, g, y: a.wx, "unknown param 'u'"),
    (lambda x, p: {"wx": x}, lambda a, g, y: a.wx, "uses no param"),
    (lambda x, p: {"d_x": x * p.w}, lambda a, g, y: a.d_x, "name 'd_x' is not allowed"),
    (lambda x, p: {"wx": x * p.w}, lambda a, g, y: a.wx if a.wx > 0 else -a.wx, "no truth value"),
])
def test_misuse_is_a_model_error_naming_model_and_expression(aggregate, loss, message):
    with pytest.raises(ModelError, match=message) as caught:
        lower(_model(aggregate, loss))
    assert "model custom" in str(caught.value)


def test_vector_params_must_share_a_size():
    with pytest.raises(ModelError, match="share one factor size"):
        lower(_model(lambda x, p: {"wx": x * p.w}, lambda a, g, y: a.wx,
                     params={"w": Param(), "u": Param(size=2), "v": Param(size=3)}))


def test_listing_and_hash():
    ir = lower(ZOO["fm"]())
    text = str(ir)
    assert "grad    grad_v[k] =" in text and "dloss   d_vx[k] =" in text and "accum   v2x2[k]" in text
    assert lower(ZOO["fm"]()).hash == ir.hash
    from alac.models import zoo_model

    assert lower(zoo_model("fm", k=5)).hash != lower(zoo_model("fm", k=6)).hash


def test_stage_graph_fuses_chunk_local_stages():
    graph = build_stage_graph(lower(ZOO["lr"]()))
    assert kernel_groups(graph, "fused") == [["aggregate", "loss", "apply"], ["update"]]
    assert kernel_groups(graph, "stage") == [["aggregate"], ["loss"], ["apply"], ["update"]]
    assert kernel_groups(graph, "fused", role="predict") == [["aggregate", "predict"]]
