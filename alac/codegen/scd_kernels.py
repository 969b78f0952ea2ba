"""The stochastic coordinate descent kernels (TPA-SCD, Parnell et al.): one epoch of coordinate steps
over a permutation of the coordinates, program p of P taking its slots p, p + P, p + 2P, ... one
after the other: P coordinates are in flight at a time. Each step is computed as if its coordinate
moved alone, so the curvature c_m it divides by is ||a_m||^2 for P = 1 (the exact step) and larger
with P in flight (alac.runtime.solvers.scd.Overlap), so that the steps of coordinates sharing entries
cannot add up to an overshoot.

For each coordinate m (a column of A for the primal, a row for the dual, with its entries
start[m]:start[m+1] of the compressed layout):

    dot   = sum over its entries of a * (y[i] - w[i])   (primal, squared loss: the residual)
          or      sum over its entries of -a * phi'(w[i])     (primal, smooth loss: w the margins)
          or      sum over its entries of a * v[j]            (dual: the shared vector)
    delta = the step of the coordinate's 1-D problem, from dot, c_m and its value
    x[m] += delta;  shared[i] += a * delta for every entry (float atomics)

The entries are read in BLOCK-wide tiles, looped over however long the coordinate is, and the
shared vector is read past L1 (.cg), where other programs' atomic additions land. The coordinates,
the shared vector and the sums are float64: float32 atomic additions round at every step, and on
the webspam-shaped primal at lambda = 1e-5 (benchmarks/scd.py) their drift grew to 2.5e-5 in 150
epochs and held the gap near 1e-7. The wild variant
(a negative control, never a solver) adds with a plain load and store: concurrent programs then
lose each other's updates.

The steps (N rows, scale = N for the primal and lambda N for the dual; see alac.runtime.solvers.duality
for the objectives they minimize):
- primal, squared loss with l1 and l2 (ridge, lasso, elastic net): the soft-thresholded
  closed form z = S(dot + c x, N l1) / (c + N l2), delta = z - x;
- primal, logistic or squared hinge loss with l2: a Newton step delta = (dot - N l2 x) / (h + N l2),
  h = sum of a^2 phi''(w[i]) times c / ||a||^2;
- dual (SDCA), squared loss: delta = (lambda N (y - x) - dot) / (lambda N + c);
- dual hinge: y * clip((1 - y u) / q + y x, 0, 1) - x, with u = dot / (lambda N), q = c / (lambda N);
- dual squared hinge: y * max(-y x, (1 - y u - y x / 2) / (q + 1/2));
- dual logistic: safeguarded Newton steps on the log-odds of b = y (x + delta) in (0, 1), to NEWTON_TOLERANCE.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from alac.codegen import manifest as m
from alac.codegen.functions import kernel_source
from alac.codegen.kernels import module_source
from alac.codegen.manifest import KernelSpec
from alac.codegen.writer import Writer

N_COORDINATES = m.Argument("n_coordinates", "size", "coordinates", "int")
ORDER = m.Argument("order_ptr", "order", "coordinates", "int64", ("coordinates",), lifetime="epoch")
START = m.Argument("start_ptr", "layout", "start", "int64", ("coordinates+1",), lifetime="layout")
INDEX = m.Argument("index_ptr", "layout", "index", "int32", ("entries",), lifetime="layout")
VALUE = m.Argument("value_ptr", "layout", "value", "float32", ("entries",), lifetime="layout")
CURVATURE = m.Argument("curvature_ptr", "layout", "curvature", "float32", ("coordinates",), lifetime="layout")
NORM = m.Argument("norm_ptr", "layout", "norm", "float32", ("coordinates",), lifetime="layout")
LABEL = m.Argument("label_ptr", "labels", "", "float32", ("rows",), lifetime="layout")
COORDINATE = m.Argument("coordinate_ptr", "param", "coordinate", "float64", ("coordinates",))
SHARED = m.Argument("shared_ptr", "shared", "", "float64", ("shared",))
SCALE = m.Argument("scale", "hyper", "scale", "float", lifetime="call")
L1 = m.Argument("l1", "hyper", "l1", "float", lifetime="call")
L2 = m.Argument("l2", "hyper", "l2", "float", lifetime="call")

CONSTEXPRS = ("HAS_VALUES", "BLOCK")
# Safeguarded Newton steps of a dual logistic coordinate, until |G| <= NEWTON_TOLERANCE (1 + q) (in float64,
# with room) or NEWTON_STEPS: a fixed 20 left some a9a rows inexact and the gap wandering near 1e-5 on
# the GPU; typical rows take 3-5
NEWTON_STEPS, NEWTON_TOLERANCE = 64, 1e-10
# b = y alpha of the dual logistic loss is kept in [B_MARGIN, 1 - B_MARGIN]: its log-odds are finite
B_MARGIN = 1e-6
LOGIT_MARGIN = -13.815510557964274     # log(B_MARGIN / (1 - B_MARGIN))
LOSSES = ("squared", "hinge", "squared_hinge", "logistic")
# the primal's losses: smooth ones (Newton steps; the squared loss's is exact)
PRIMAL_LOSSES = ("squared", "squared_hinge", "logistic")


@dataclass(frozen=True)
class ScdVariant:
    """form: "primal" (over columns; squared loss with l1 and l2) or "dual" (over rows, SDCA);
    loss: one of LOSSES (the primal takes squared only); wild: non-atomic shared updates (a
    negative control)."""

    form: str
    loss: str = "squared"
    wild: bool = False

    def __post_init__(self):
        if self.form not in ("primal", "dual") or self.loss not in LOSSES or \
                (self.form == "primal" and self.loss not in PRIMAL_LOSSES):
            raise ValueError(f"an SCD kernel is primal ({', '.join(PRIMAL_LOSSES)}) or dual ({', '.join(LOSSES)}), "
                             f"got {self}")

    @property
    def newton(self):
        """The primal of a loss whose coordinate step is a Newton step (its curvature summed too)."""
        return self.form == "primal" and self.loss != "squared"

    @property
    def name(self):
        return f"alac_scd_{self.form}_{self.loss}" + ("_wild" if self.wild else "")


@dataclass(frozen=True)
class GeneratedScdKernels:
    model: str          # for the module cache's file name
    ir_hash: str
    source: str
    epoch: KernelSpec
    manifest: tuple


def coordinate_at(w, slot):
    """The coordinate at `slot` of the order, and its entries' range start:end."""
    w.line(f"coordinate = tl.load({w.arg(ORDER)} + {slot})")
    w.line(f"start = tl.load({w.arg(START)} + coordinate)")
    w.line(f"end = tl.load({w.arg(START)} + coordinate + 1)")


def tiles(w, body, first="start", stride="BLOCK"):
    """Loop over the coordinate's entries in BLOCK-wide tiles (from `first`, every `stride` entries),
    loading index a and value a of each."""
    w.line(f"for tile in range({first}, end, {stride}):")
    w.depth += 1
    w.line("at = tile + tl.arange(0, BLOCK)")
    w.line("inside = at < end")
    w.line(f"index = tl.load({w.arg(INDEX)} + at, mask=inside, other=0)")
    w.line("if HAS_VALUES:")
    w.line(f"    a = tl.load({w.arg(VALUE)} + at, mask=inside, other=0.0)")
    w.line("else:")
    w.line("    a = tl.where(inside, 1.0, 0.0)")
    body()
    w.depth -= 1


def step(w, variant):
    """delta from dot, curvature, x (the coordinate's value) and, for the dual, y (its label)."""
    scale = w.arg(SCALE)
    if variant.newton:
        w.comment("a Newton step of the 1-D objective, its curvature damped as the separable over-approximation")
        w.comment("damps ||a||^2 for the coordinates in flight")
        w.line(f"bent = bend_sum * curvature / tl.maximum(tl.load({w.arg(NORM)} + coordinate), 1e-30)")
        w.line(f"denominator = bent + {scale} * {w.arg(L2)}")
        w.line(f"numerator = dot - {scale} * {w.arg(L2)} * x")
        w.line("delta = tl.where(denominator > 0.0, numerator / tl.maximum(denominator, 1e-30), 0.0)")
        return
    if variant.form == "primal":
        w.comment("the 1-D problem's minimizer: soft-thresholded (l1), shrunk (l2)")
        w.line(f"denominator = curvature + {scale} * {w.arg(L2)}")
        w.line(f"threshold = {scale} * {w.arg(L1)}")
        w.line("numerator = dot + curvature * x")
        w.line("magnitude = tl.maximum(tl.abs(numerator) - threshold, 0.0)")
        w.line("shrunk = tl.where(numerator < 0.0, -magnitude, magnitude)")
        w.line("delta = tl.where(denominator > 0.0, shrunk / tl.maximum(denominator, 1e-30) - x, 0.0)")
        return
    if variant.loss == "squared":
        w.line(f"delta = ({scale} * (y - x) - dot) / ({scale} + curvature)")
        return
    w.comment("u: the row's margin a . beta; q: its curvature ||a||^2 / (lambda N), kept positive")
    w.line(f"u = dot / {scale}")
    w.line(f"q = tl.maximum(curvature / {scale}, 1e-30)")
    if variant.loss == "hinge":
        w.line("delta = y * tl.minimum(tl.maximum((1.0 - y * u) / q + y * x, 0.0), 1.0) - x")
    elif variant.loss == "squared_hinge":
        w.line("delta = y * tl.maximum(-y * x, (1.0 - y * u - 0.5 * y * x) / (q + 0.5))")
    else:
        w.comment("the log-odds t of b = y (x + delta) solves -t - y u - (b - y x) q = 0 (decreasing in t):")
        w.comment("Newton steps inside a bracket of the root, the bracket halved in b where one would leave it")
        w.line("b0 = y * x")
        w.line(f"low = tl.maximum(-y * u - q * (1.0 - b0), {LOGIT_MARGIN})")
        w.line(f"high = tl.minimum(-y * u + q * b0, {-LOGIT_MARGIN})")
        w.line(f"b = tl.minimum(tl.maximum(b0, {B_MARGIN}), {1 - B_MARGIN})")
        w.line("t = tl.minimum(tl.maximum(tl.log(b / (1.0 - b)), low), high)")
        w.line("b = tl.sigmoid(t)")
        w.line("g = -t - y * u - (b - b0) * q")
        w.line("steps = tl.full([], 0, tl.int32)")
        w.line(f"while (steps < {NEWTON_STEPS}) & (tl.abs(g) > {NEWTON_TOLERANCE} * (1.0 + q)):")
        w.line("    low = tl.where(g > 0.0, t, low)")
        w.line("    high = tl.where(g < 0.0, t, high)")
        w.line("    newton = t + g / (1.0 + q * b * (1.0 - b))")
        w.line("    middle = 0.5 * (tl.sigmoid(low) + tl.sigmoid(high))")
        w.line("    t = tl.where((newton > low) & (newton < high), newton, tl.log(middle / (1.0 - middle)))")
        w.line("    b = tl.sigmoid(t)")
        w.line("    g = -t - y * u - (b - b0) * q")
        w.line("    steps += 1")
        w.line(f"delta = y * tl.minimum(tl.maximum(b, {B_MARGIN}), {1 - B_MARGIN}) - x")


def sums(w, variant):
    """The per-lane sums a coordinate's tiles reduce into: dot's, and the Newton curvature's."""
    w.line("partial = tl.zeros([BLOCK], dtype=tl.float64)")
    if variant.newton:
        w.line("bend = tl.zeros([BLOCK], dtype=tl.float64)")


def reduce_tile(w, variant):
    """A tile's terms of dot (and of the Newton curvature) from the shared vector."""
    w.comment("past L1: other programs' atomic additions land in L2")
    w.line(f"shared = tl.load({w.arg(SHARED)} + index, mask=inside, other=0.0, cache_modifier=\".cg\")")
    if variant.newton:
        w.comment("the rows' margins: -phi'(margin) summed into dot, phi''(margin) into bend")
        w.line(f"target = tl.load({w.arg(LABEL)} + index, mask=inside, other=0.0)")
        if variant.loss == "logistic":
            w.line("s = tl.sigmoid(-target * shared)")
            w.line("partial += a * (target * s)")
            w.line("bend += a * a * (s * (1.0 - s))")
        else:
            w.line("slack = tl.maximum(1.0 - target * shared, 0.0)")
            w.line("partial += a * (2.0 * target * slack)")
            w.line("bend += a * a * tl.where(slack > 0.0, 2.0, 0.0)")
    elif variant.form == "primal":
        w.line(f"target = tl.load({w.arg(LABEL)} + index, mask=inside, other=0.0)")
        w.line("partial += a * (target - shared)")
    else:
        w.line("partial += a * shared")


def update_tile(w, variant):
    """A tile's additions of a * delta into the shared vector."""
    shared = w.arg(SHARED)
    if variant.wild:
        w.comment("wild: a plain read-modify-write, which loses concurrent programs' additions")
        w.line(f"old = tl.load({shared} + index, mask=inside, other=0.0, cache_modifier=\".cg\")")
        w.line(f"tl.store({shared} + index, old + a * delta, mask=inside)")
    else:
        w.line(f"tl.atomic_add({shared} + index, a * delta, mask=inside, sem=\"relaxed\")")


def _epoch(variant):
    w = Writer()
    w.arg(SHARED)           # the shared vector first among the kernel's arguments
    w.comment("every num_programs-th coordinate of the epoch's order, one after the other: as many")
    w.comment("coordinates in flight as programs, whatever the problem's size")
    w.line(f"for j in range(0, tl.cdiv({w.arg(N_COORDINATES)}, tl.num_programs(0))):")
    w.depth += 1
    w.line("slot = tl.program_id(0) + j * tl.num_programs(0)")
    w.line(f"if slot < {w.arg(N_COORDINATES)}:")
    w.depth += 1
    coordinate_at(w, "slot")
    sums(w, variant)
    tiles(w, lambda: reduce_tile(w, variant))
    w.line("dot = tl.sum(partial, axis=0)")
    if variant.newton:
        w.line("bend_sum = tl.sum(bend, axis=0)")
    w.line(f"curvature = tl.load({w.arg(CURVATURE)} + coordinate)")
    w.line(f"x = tl.load({w.arg(COORDINATE)} + coordinate)")
    if variant.form == "dual":
        w.line(f"y = tl.load({w.arg(LABEL)} + coordinate)")
    step(w, variant)
    w.line(f"tl.store({w.arg(COORDINATE)} + coordinate, x + delta)")
    tiles(w, lambda: update_tile(w, variant))
    return kernel_source(variant.name, w, CONSTEXPRS), KernelSpec(variant.name, "epoch", ("epoch",), tuple(w.args))


def generate_scd_kernels(variant):
    source, spec = _epoch(variant)
    header = (f"# Generated by alac: stochastic coordinate descent, {variant.form} {variant.loss}"
              + (" (wild: non-atomic, a negative control)" if variant.wild else "") + "; do not edit.\n")
    text = module_source(header, 0, 0, [source])
    return GeneratedScdKernels("scd", hashlib.sha256(variant.name.encode()).hexdigest(), text, spec, spec.args)
