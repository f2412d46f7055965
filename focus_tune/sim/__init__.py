"""The simulator and its training: plain PyTorch, no Ray, no MLflow.

``model`` (the Simulator: an image encoder and an LSTM over the classes, and its sampler),
``regularization`` (lambda schedules and the regularized loss, eq. 2), ``train``
(``train_one_epoch``, the learning rate over a training), ``packed`` (K simulators of one
architecture trained as one program on a GPU), ``device_split`` (a split's tensors on the
trial's device, moved once), ``model_io`` (a final model on disk without pickle: weights.npz
and model.json; ``DataInfo``, what a model knows of its dataset), ``adam_patch`` (Adam
without torch._dynamo, applied where a training process starts).

Imports: scoring (the math's other half: the sampler sums its conditionals in
``scoring.montecarlo.RaoBlackwell``), the config, the data and the top-level base modules;
nothing of the procedure or above, but for ``model_io.load_model`` of an MLflow URI, which
downloads it through ``tracking.models`` inside the function.
"""
