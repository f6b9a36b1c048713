"""The config every kbert model writes: Keras' base fields, then the arguments of its constructor."""

import keras


class ConstructorConfig:
    """Mixin of kbert's models, put before `keras.Model`: a config that is the constructor's arguments.

    Keras' `Model.get_config` describes a functional model's layer graph,
    which a kbert model's constructor does not take. A kbert model's config
    is its constructor's arguments instead: this base writes the fields
    every model shares (`name`, `trainable`), each model adds its own
    (`config = super().get_config()`, then `config.update(...)`), as
    keras-hub's `Backbone` and `Task` do, and `from_config` calls the
    constructor with them (a `dtype` written as a serialized policy is read
    back into one).

    Example:
    >>> class Scale(ConstructorConfig, keras.Model):
    ...     def __init__(self, factor=2.0, **kwargs):
    ...         super().__init__(**kwargs)
    ...         self.factor = factor
    ...     def call(self, x):
    ...         return x * self.factor
    ...     def get_config(self):
    ...         config = super().get_config()
    ...         config.update(factor=self.factor)
    ...         return config
    >>> config = Scale(3.0, name="scale").get_config()
    >>> config
    {'name': 'scale', 'trainable': True, 'factor': 3.0}
    >>> Scale.from_config(config).factor
    3.0
    """

    def get_config(self):
        return {"name": self.name, "trainable": self.trainable}

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        if isinstance(config.get("dtype"), dict):
            config["dtype"] = keras.dtype_policies.deserialize(config["dtype"])
        return cls(**config)
