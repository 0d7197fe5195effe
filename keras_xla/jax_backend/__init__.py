"""What needs JAX: the tuner on Keras's JAX backend.

Beside `tf_backend/`, on the same `core/`: JAX's own monitoring events
count the compilations (`compile_events`), a tap on the data iterator
reads each batch's signature (`tap`), and `fit_adapter.FitAdapter`
does for `fit_owner.FitOwner` what `tf_backend.fit_adapter` does on
TensorFlow. Nothing here imports TensorFlow.
"""
