import pathlib
import re

import kbert
from kbert.saving import load_model, model_file


def test_every_module_that_registers_a_class_is_loaded_before_a_file_is_read():
    package = pathlib.Path(kbert.__file__).parent
    registering = {
        ".".join(path.relative_to(package.parent).with_suffix("").parts)
        for path in package.rglob("*.py")
        if re.search(r"^@keras\.saving\.register_keras_serializable", path.read_text(), re.M)
    }
    assert registering  # the pattern still finds kbert's registrations
    assert registering == set(model_file._MODEL_MODULES) | set(model_file._TEXT_MODULES)


def test_the_package_gives_the_one_load_model():
    assert kbert.load_model is load_model
    assert kbert.__all__.count("load_model") == 1
