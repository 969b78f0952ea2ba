"""The training defaults the command line and the scikit-learn estimators share.

Chosen by benchmarks/defaults.py (results/defaults.json) against the best run of a sweep over
optimizers, learning rates, factor sizes and L2 coefficients: within 0.005 AUC or 0.01 RMSE of it on
a9a, w8a, 20news and ml-latest-small; on ipinyou, whose rare features plain SGD handles best, 0.010
(LR) and 0.022 (FM) AUC below it (means of 10 seeds).
"""

# An adaptive optimizer: its step does not depend on the features' scale.
OPTIMIZER = "adagrad"
BATCH_SIZE = 1024
# The most epochs; early stopping on validation data usually ends training sooner.
EPOCHS = 100
EARLY_STOPPING = "patience"
PATIENCE = 5
# Without validation data, this share of the training rows is held out for early stopping.
VALID_SPLIT = 0.1
