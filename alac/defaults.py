"""The training defaults the command line and the scikit-learn estimators share.

Chosen by benchmarks/defaults.py (results/defaults.json): with them every shared data set ends
within 0.005 AUC (classification) or 0.01 RMSE (regression) of the best run of a sweep over
optimizers, learning rates, factor sizes and L2 coefficients.
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
