import numpy as np
import pytest

from kbert.callbacks.images import colour_map, grid, heat_map

# kbert's backend code on every backend: `make test` runs this module on JAX and PyTorch too.
pytestmark = pytest.mark.all_backends


def count(image, colour):
    return int(np.all(image == colour, axis=-1).sum())


def test_heat_map_colours_each_cell_by_its_value():
    values = np.array([[1.0, 0.0, 0.25], [0.5, 1.0, 0.25]])
    image = heat_map(values, ["a", "b"], ["x", "y", "z"], cell_size=10)
    assert image.dtype == np.uint8 and image.shape[-1] == 3
    # Every cell is cell_size x cell_size pixels of its colour (no text in the cells).
    assert count(image, colour_map(1.0)) == 2 * 100
    assert count(image, colour_map(0.5)) == 100
    assert count(image, colour_map(0.25)) == 2 * 100
    assert count(image, colour_map(0.0)) == 100
    bigger = heat_map(values, ["a", "b"], ["x", "y", "z"], cell_size=20)
    assert count(bigger, colour_map(1.0)) == 2 * 400


def test_colour_map_runs_from_light_to_dark():
    colours = colour_map(np.linspace(0, 1, 5)).astype(int).sum(axis=-1)
    assert np.all(np.diff(colours) < 0)
    assert colour_map(2.0).tolist() == colour_map(1.0).tolist()


def test_heat_map_checks_its_labels():
    with pytest.raises(ValueError, match="2 row and 1 column labels for a 2x2"):
        heat_map(np.zeros((2, 2)), ["a", "b"], ["x"])


def test_grid_places_images_in_rows():
    images = [np.zeros((4, 5, 3), "uint8"), np.zeros((6, 3, 3), "uint8"), np.zeros((2, 2, 3), "uint8")]
    canvas = grid(images, columns=2, gap=1)
    assert canvas.shape == (6 + 1 + 2, 5 + 1 + 3, 3)
    assert count(canvas, (0, 0, 0)) == 20 + 18 + 4
