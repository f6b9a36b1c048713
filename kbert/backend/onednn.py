"""Whether TensorFlow runs kbert on its oneDNN kernels, and what to do when it does not."""

import os
import platform
import warnings

# oneDNN's kernels run BERT up to 1.75x faster than TensorFlow's default
# (Eigen) kernels on x86 CPUs; TensorFlow turns them on by itself only on
# CPUs with AVX-512 VNNI or AMX, and reads its switch once, when it loads.
ADVICE = (
    "TensorFlow was imported before kbert, with its oneDNN kernels off (TensorFlow turns them on "
    "by itself only on CPUs with AVX-512 VNNI or AMX), so BERT runs on its default kernels, up to "
    "1.75x slower on x86 CPUs without them. TensorFlow reads the switch once, when it loads, so kbert can no "
    "longer turn them on. Import kbert before tensorflow and keras, or set TF_ENABLE_ONEDNN_OPTS=1 "
    "in the environment before Python starts (TF_ENABLE_ONEDNN_OPTS=0 keeps them off and silences "
    "this warning)."
)


def onednn_enabled():
    """Whether the loaded TensorFlow runs its oneDNN kernels (what TensorFlow decided when it loaded)."""
    from tensorflow.python.util import _pywrap_util_port

    return bool(_pywrap_util_port.IsMklEnabled())


def onednn_advice(enabled, switch=None, machine=None):
    """`ADVICE` when oneDNN is off by no choice of the user on a CPU where it helps, else None.

    Args:
        enabled: whether TensorFlow runs its oneDNN kernels.
        switch: the value of `TF_ENABLE_ONEDNN_OPTS`; default: the environment's.
        machine: the CPU architecture; default `platform.machine()`.
    """
    switch = os.environ.get("TF_ENABLE_ONEDNN_OPTS") if switch is None else switch
    machine = platform.machine() if machine is None else machine
    if enabled:
        return None
    if switch is not None and switch.strip().lower() in ("0", "false"):
        return None  # off by the user's choice
    if machine.lower() not in ("x86_64", "amd64"):
        return None  # TensorFlow's oneDNN build is for x86 CPUs
    return ADVICE


def warn_if_onednn_off():
    """Warns once (`ADVICE`) when TensorFlow loaded first with oneDNN off; returns the advice or None."""
    advice = onednn_advice(onednn_enabled())
    if advice:
        warnings.warn(advice, RuntimeWarning, stacklevel=3)
    return advice
