"""Linear SVM: hinge loss max(0, 1 - y (w.x + b)), y in {-1, +1}; predicts the margin."""

from alac.dsl import LinearModel, ops


class LinearSVM(LinearModel):
    name = "lsvm"
    labels = "binary"
    prediction = "score"

    def loss(self, a, g, y):
        return ops.maximum(0.0, 1.0 - y * self.score(a, g))

    def predict(self, a, g):
        return self.score(a, g)


MODEL = LinearSVM
# chosen on a9a (benchmarks/defaults.py); the hinge's unit-size gradient takes larger steps badly
DEFAULT_LR = 0.1
