"""XLAModel: a keras.Model whose train step is compiled per replica.

Keras 3 on TensorFlow compiles `strategy.run(step)` as one XLA cluster.
Under `tf.distribute.MirroredStrategy` with `jit_compile=True` that fails
("Trying to access resource ... located in device CPU:1 from device
CPU:0"), and `jit_compile="auto"` turns XLA off under any strategy.
`XLAModel` compiles inside each replica instead: the forward pass, the loss
and the gradients form one XLA cluster per replica, and the gradient
all-reduce and the optimizer update run after it, outside the cluster, as
Keras's optimizer does them. Without a strategy the same code runs on one
device.

It also carries the shape probe natively (so `XLATuner` counts compilations
per replica without wrapping the step) and accumulates gradients over
micro-batches inside one compiled step.
"""

from __future__ import annotations

from typing import Any

import keras
import tensorflow as tf
from keras.src.backend.tensorflow.trainer import (
    _collective_all_reduce_multi_worker,
)
from keras.src.losses import loss as loss_module
from keras.src.models.functional import Functional
from keras.src.models.model import Trainer, functional_init_arguments
from keras.src.trainers.data_adapters import data_adapter_utils
from keras.src.trainers.trainer import model_supports_jit

from keras_xla.tf_backend.accumulation import (
    accumulate_gradients,
    check_divisible,
    map_present,
)
from keras_xla.tf_backend.probe import with_probe
from keras_xla.tf_backend.step_functions import probe_of


@keras.saving.register_keras_serializable(package="keras_xla")
class XLAModel(keras.Model):
    """A `keras.Model` whose train and test steps compile per replica.

    Use it exactly like `keras.Model`: functional
    (`XLAModel(inputs, outputs)`), subclassed (`class Net(XLAModel)`), or
    wrapping an existing functional model (`XLAModel.from_model(resnet)`).
    Under a strategy, build it inside `strategy.scope()`.

    XLA is on by default: `compile(jit_compile="auto")` (Keras's default)
    resolves to on for an `XLAModel` whenever the model supports XLA, also
    on CPU-only machines and under a strategy. Pass `jit_compile=False` to
    turn it off.

    Args:
        accumulation_steps: Split each batch into this many equal
            micro-batches inside the compiled step and average their
            gradients, so a large effective batch fits in memory with one
            compilation. Must divide the batch size. Layers with batch
            statistics (BatchNormalization) see micro-batches. Defaults to
            `1`.
        *args, **kwargs: As for `keras.Model`.

    Example:

    ```python
    strategy = tf.distribute.MirroredStrategy()
    with strategy.scope():
        model = keras_xla.XLAModel(inputs, outputs)
        model.compile("adam", "sparse_categorical_crossentropy")
    model.fit(ds, epochs=3, callbacks=[keras_xla.XLATuner()])
    ```
    """

    # Read by keras_xla.tf_backend.jit and .step_functions.
    _keras_xla_per_replica = True
    _keras_xla_native_probe = True

    def __new__(cls, *args: Any, **kwargs: Any):
        if functional_init_arguments(args, kwargs):
            cls = _functional_variant(cls)
        return super().__new__(cls, *args, **kwargs)

    def __init__(self, *args: Any, accumulation_steps: int = 1, **kwargs):
        if functional_init_arguments(args, kwargs):
            # What keras.Model.__init__ does for functional arguments, but
            # without rewriting the bases of XLAModel itself (Keras injects
            # Functional into every base class of a functional subclass).
            if not isinstance(self, Functional):
                self.__class__ = _functional_variant(type(self))
            Trainer.__init__(self)
            Functional.__init__(self, *args, **kwargs)
        else:
            super().__init__(*args, **kwargs)
        if (
            isinstance(accumulation_steps, bool)
            or not isinstance(accumulation_steps, int)
            or accumulation_steps < 1
        ):
            raise ValueError(
                "Unsupported value "
                f"`XLAModel(accumulation_steps={accumulation_steps!r})`: "
                "pass a positive int that divides the batch size."
            )
        self.accumulation_steps = accumulation_steps
        self._compiled_steps: dict[str, Any] = {}

    @classmethod
    def from_model(
        cls, model: keras.Model, accumulation_steps: int = 1
    ) -> XLAModel:
        """Wraps a functional model (e.g. `keras.applications.ResNet50`).

        The new model shares the layers, and so the weights, of `model`.
        """
        if not isinstance(model, Functional):
            raise ValueError(
                f"XLAModel.from_model() needs a functional model; got "
                f"{type(model).__name__}. Subclass XLAModel instead of "
                "keras.Model for subclassed models."
            )
        return cls(
            inputs=model.inputs,
            outputs=model.outputs,
            name=model.name,
            accumulation_steps=accumulation_steps,
        )

    def get_config(self) -> dict:
        config = super().get_config()
        config["accumulation_steps"] = self.accumulation_steps
        return config

    # Keras builds `one_step_on_data` with `jit_compile=self.jit_compile`
    # around `strategy.run`; that outer cluster is what fails under a
    # strategy. Build the outer function without XLA and compile inside.

    def make_train_function(self, force: bool = False):
        return self._make_outer("train", force)

    def make_test_function(self, force: bool = False):
        return self._make_outer("test", force)

    def _make_outer(self, function: str, force: bool):
        attr = f"{function}_function"
        if getattr(self, attr) is not None and not force:
            return getattr(self, attr)
        saved, self._jit_compile = self._jit_compile, False
        try:
            getattr(super(), f"make_{function}_function")(force=True)
        finally:
            self._jit_compile = saved
        for key in [k for k in self._compiled_steps if k[0] == function]:
            del self._compiled_steps[key]
        return getattr(self, attr)

    def _resolve_auto_jit_compile(self) -> bool:
        return bool(model_supports_jit(self))

    def _maybe_symbolic_build(self, iterator=None, data_batch=None):
        # Keras reduces a sample batch across replicas eagerly to learn its
        # shapes, which fails under MultiWorkerMirroredStrategy ("Attempt
        # to convert a value (PerReplica...)"). One replica's local batch
        # has the shapes the build needs.
        if self._distribute_strategy is None or iterator is None:
            return super()._maybe_symbolic_build(iterator, data_batch)
        strategy = self.distribute_strategy
        for _, _, it in iterator:
            batch = next(it)
            break

        def local(value):
            if isinstance(value, tf.distribute.DistributedValues):
                return strategy.experimental_local_results(value)[0]
            return value

        data_batch = map_present(local, batch)
        with strategy.scope():
            self._symbolic_build(data_batch=data_batch)

    def fit(self, *args, **kwargs):
        batch_size = kwargs.get("batch_size")
        if batch_size is None and len(args) > 2:
            batch_size = args[2]
        k = self.accumulation_steps
        if isinstance(batch_size, int) and batch_size % k:
            raise ValueError(
                f"`accumulation_steps={k}` does not divide "
                f"`batch_size={batch_size}`: pick a batch size that is a "
                f"multiple of {k}."
            )
        return super().fit(*args, **kwargs)

    # The steps run in replica context. With several replicas only the
    # forward and backward pass is compiled; the update runs after the
    # optimizer's all-reduce, outside the XLA cluster.

    def train_step(self, data):
        x, _, _ = data_adapter_utils.unpack_x_y_sample_weight(data)
        check_divisible(x, self.accumulation_steps)
        return self._step("train", self._forward_backward, data)

    def test_step(self, data):
        return self._step("test", self._forward, data)

    def _step(self, function: str, forward, data):
        """`forward`'s results (the loss, predictions and, for a train
        step, gradients) taken through `_update`."""
        if self.distribute_strategy.num_replicas_in_sync == 1:
            # One device: compile the whole step, optimizer included, as
            # Keras does; nothing needs to cross devices.
            def whole(data):
                return self._update(data, *forward(data))

            return self._step_fn(function, whole)(data)
        results = self._step_fn(function, forward)(data)
        return self._reducible(self._update(data, *results))

    def _update(self, data, loss, y_pred, grads=None):
        """Loss tracker, optimizer and metrics: the part of a step that
        runs after the all-reduce under a strategy."""
        x, y, sample_weight = data_adapter_utils.unpack_x_y_sample_weight(data)
        self._loss_tracker.update_state(
            loss_module.unscale_loss_for_distribution(loss),
            sample_weight=tf.shape(tf.nest.flatten(x)[0])[0],
        )
        if grads is not None and self.trainable_weights:
            self.optimizer.apply_gradients(zip(grads, self.trainable_weights))
        return self.compute_metrics(x, y, y_pred, sample_weight=sample_weight)

    def _reducible(self, logs):
        # Under MultiWorkerMirroredStrategy Keras reduces step outputs with
        # `strategy.reduce("MEAN", v, axis=0)`, which fails on scalars.
        # Metric results are equal on every replica; give them a length-1
        # axis so the mean over replicas and that axis is the value itself.
        if not _collective_all_reduce_multi_worker(self.distribute_strategy):
            return logs
        return tf.nest.map_structure(
            lambda v: tf.reshape(v, [1]) if v.shape.rank == 0 else v, logs
        )

    def _step_fn(self, function: str, body):
        """The (compiled, probed) `body` for `function`, built once per
        train/test function."""
        # Keyed by the XLA setting too: a step function kept for another
        # configuration (XLATuner's trial) may trace again.
        key = (function, bool(self.jit_compile))
        fn = self._compiled_steps.get(key)
        if fn is None:
            fn = with_probe(lambda: probe_of(self, function), body)
            if self.jit_compile:
                fn = tf.function(fn, jit_compile=True, reduce_retracing=True)
            self._compiled_steps[key] = fn
        return fn

    def _forward(self, data, training: bool = False):
        x, y, sample_weight = data_adapter_utils.unpack_x_y_sample_weight(data)
        if self._call_has_training_arg:
            y_pred = self(x, training=training)
        else:
            y_pred = self(x)
        loss = self._compute_loss(
            x=x,
            y=y,
            y_pred=y_pred,
            sample_weight=sample_weight,
            training=training,
        )
        return loss, y_pred

    def _forward_backward(self, data):
        if self.accumulation_steps == 1:
            return self._loss_and_grads(data)
        return accumulate_gradients(
            self._loss_and_grads, data, self.accumulation_steps
        )

    def _loss_and_grads(self, data):
        with tf.GradientTape() as tape:
            loss, y_pred = self._forward(data, training=True)
            optimizer = self.optimizer
            scaled = loss if optimizer is None else optimizer.scale_loss(loss)
        # Read after the call: a subclassed model builds its weights there.
        weights = self.trainable_weights
        grads = tape.gradient(scaled, weights) if weights else []
        return loss, y_pred, grads


_FUNCTIONAL_VARIANTS: dict[type, type] = {}


def _functional_variant(cls: type) -> type:
    """`cls` with Functional mixed in, under the same name, module and
    registered name, made once per class."""
    if issubclass(cls, Functional):
        return cls
    variant = _FUNCTIONAL_VARIANTS.get(cls)
    if variant is None:
        variant = type(
            cls.__name__,
            (cls, Functional),
            {"__module__": cls.__module__, "__qualname__": cls.__qualname__},
        )
        registered = keras.saving.get_registered_name(cls)
        if ">" in registered:
            # Saved models name the variant as the registered class does.
            package, name = registered.split(">", 1)
            keras.saving.register_keras_serializable(package, name)(variant)
        _FUNCTIONAL_VARIANTS[cls] = variant
    return variant
