"""The training defaults the command line and the scikit-learn estimators share.

Chosen by benchmarks/defaults.py (results/defaults.json) against the best run of a sweep over
optimizers, learning rates, factor sizes and L2 coefficients on a9a, w8a, ipinyou, 20news and
ml-latest-small.
"""

# AdaGrad (its step does not depend on the features' scale) and plain SGD (better where rare features
# dominate: ipinyou) raced on the validation data, the better kept (alac.train.race)
OPTIMIZER = "auto"
BATCH_SIZE = 1024
# The most epochs; early stopping on validation data usually ends training sooner.
EPOCHS = 100
EARLY_STOPPING = "patience"
PATIENCE = 5
# Without validation data, this share of the training rows is held out for early stopping.
VALID_SPLIT = 0.1
# libFM's ALS (alac train --solver als, FMRegressor(solver="als")): the L2 on the sum of squared errors
# where none is given (benchmarks/fm_mcmc.py, arms alac_als_reg5, alac_als_reg20, alac_als_reg50 and an
# earlier alac_als_reg1: the best on MovieLens)
ALS_L2 = 20.0
