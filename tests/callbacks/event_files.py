"""Reads TensorBoard event files back the way TensorBoard does, with its own loader."""

import io

import numpy as np
import tensorflow as tf
from tensorboard.backend.event_processing import plugin_event_accumulator


def load(run_dir):
    """TensorBoard's accumulator of one run directory, with every event kept (no sampling)."""
    accumulator = plugin_event_accumulator.EventAccumulator(str(run_dir), size_guidance={"tensors": 0})
    accumulator.Reload()
    return accumulator


def _by_plugin(run_dir, plugin, convert):
    accumulator = load(run_dir)
    found = {}
    for tag in accumulator.PluginTagToContent(plugin):
        found[tag] = {event.step: convert(tf.make_ndarray(event.tensor_proto))
                      for event in accumulator.Tensors(tag)}
    return found


def scalars(run_dir):
    """{tag: {step: value}} of the run's scalar summaries."""
    return _by_plugin(run_dir, "scalars", float)


def texts(run_dir):
    """{tag: {step: str or array of str}} of the run's text summaries."""

    def decode(array):
        decoded = np.vectorize(lambda b: b.decode("utf-8"), otypes=[object])(array)
        return decoded.item() if decoded.ndim == 0 else decoded

    return _by_plugin(run_dir, "text", decode)


def images(run_dir):
    """{tag: {step: uint8 array}} of the run's image summaries.

    An array is `(height, width, channels)` for a summary of one image, and
    `(samples, height, width, channels)` for one of several (all of one size).
    """

    def decode(array):
        from PIL import Image

        # An image summary holds [width, height, png, png...] as strings.
        width, height, pngs = int(array[0]), int(array[1]), array[2:]
        samples = [np.asarray(Image.open(io.BytesIO(png))) for png in pngs]
        for image in samples:
            assert image.shape[:2] == (height, width)
        return samples[0] if len(samples) == 1 else np.stack(samples)

    return _by_plugin(run_dir, "images", decode)


def plugin_tags(run_dir, plugin):
    """{tag: plugin content bytes} of one plugin (e.g. "hparams") in the run."""
    return load(run_dir).PluginTagToContent(plugin)


def hparams_sessions(log_dir):
    """What TensorBoard's HParams dashboard lists for `log_dir`, from its own backend.

    Returns `{session name: {"group": the row's name, "hparams": {name: value},
    "metrics": {tag: value}}}`, in the order of the rows; a metric tag is
    prefixed with its group (`validation/epoch/loss`) when it comes from a
    run below the session's, and the metrics are in the order the dashboard
    lists them (it shows the first five).
    """
    from tensorboard import context
    from tensorboard.backend.event_processing import data_provider, plugin_event_multiplexer
    from tensorboard.plugins import base_plugin
    from tensorboard.plugins.hparams import api_pb2, backend_context, list_session_groups

    log_dir = str(log_dir)
    multiplexer = plugin_event_multiplexer.EventMultiplexer(tensor_size_guidance={"tensors": 0})
    multiplexer.AddRunsFromDirectory(log_dir)
    multiplexer.Reload()
    tb_context = base_plugin.TBContext(
        logdir=log_dir, multiplexer=multiplexer,
        data_provider=data_provider.MultiplexerDataProvider(multiplexer, log_dir),
    )
    request = api_pb2.ListSessionGroupsRequest(
        start_index=0, slice_size=100, allowed_statuses=[api_pb2.STATUS_UNKNOWN]
    )
    response = list_session_groups.Handler(
        context.RequestContext(), backend_context.Context(tb_context), "", request
    ).run()
    sessions = {}
    for group in response.session_groups:
        hparams = {}
        for name, value in group.hparams.items():
            kind = value.WhichOneof("kind")
            hparams[name] = getattr(value, kind)
        for session in group.sessions:
            metrics = {"/".join(filter(None, [m.name.group, m.name.tag])): m.value
                       for m in session.metric_values}
            sessions[session.name] = {"group": group.name, "hparams": hparams, "metrics": metrics}
    return sessions
