import numpy as np
import pytest

from kbert.callbacks.images import (
    MARGIN, TITLE_FONT_SIZE, colour_map, font, format_range, heat_map, padded_batch,
)

# kbert's backend code on every backend: `make test` runs this module on JAX and PyTorch too.
pytestmark = pytest.mark.all_backends


def count(image, colour):
    return int(np.all(image == colour, axis=-1).sum())


def text_width(text, size=TITLE_FONT_SIZE):
    """The width of `text`'s ink in pixels, measured by Pillow."""
    from PIL import Image, ImageDraw

    left, _, right, _ = ImageDraw.Draw(Image.new("RGB", (1, 1))).textbbox((0, 0), text, font=font(size))
    return right - left


def rendered(text, size=TITLE_FONT_SIZE, colour=(0, 0, 0), background=(255, 255, 255)):
    """`text` drawn and cropped to its ink: its pixels wherever it is drawn on that background."""
    from PIL import Image, ImageDraw

    image = Image.new("RGB", (text_width(text, size) + 40, 3 * size), tuple(int(c) for c in background))
    ImageDraw.Draw(image).text((20, size), text, fill=colour, font=font(size))
    pixels = np.asarray(image)
    ink = np.argwhere(np.any(pixels != background, axis=-1))
    (top, left), (bottom, right) = ink.min(axis=0), ink.max(axis=0) + 1
    return pixels[top:bottom, left:right]


def contains(image, patch):
    """Whether `patch` appears in `image`, pixel for pixel."""
    height, width = patch.shape[:2]
    # Only where the patch's darkest pixel matches is the whole patch compared: fast on large images.
    row, column = np.unravel_index(np.argmin(patch.astype(int).sum(axis=-1)), (height, width))
    for y, x in np.argwhere(np.all(image == patch[row, column], axis=-1)):
        top, left = y - row, x - column
        if (0 <= top <= image.shape[0] - height and 0 <= left <= image.shape[1] - width
                and np.array_equal(image[top : top + height, left : left + width], patch)):
            return True
    return False


def dark(image):
    return image.astype(int).sum(axis=-1) < 3 * 128


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


def test_heat_map_checks_its_labels_and_range():
    with pytest.raises(ValueError, match="2 row and 1 column labels for a 2x2"):
        heat_map(np.zeros((2, 2)), ["a", "b"], ["x"])
    with pytest.raises(ValueError, match="`colour_range`"):
        heat_map(np.zeros((2, 2)), ["a", "b"], ["x", "y"], colour_range=(1.0, 0.0))


def test_the_whole_title_is_inside_the_image():
    title = "accuracy 0.8600 on 200 examples, the title of a small matrix"
    image = heat_map(np.eye(2), ["a", "b"], ["x", "y"], title=title, cell_size=20)
    # The title is wider than the matrix, so it sets the width, with a margin either side.
    assert text_width(title) <= image.shape[1] - 2 * MARGIN
    assert contains(image, rendered(title))
    title_band = image[: MARGIN + 2 * TITLE_FONT_SIZE]
    assert not dark(title_band[:, -MARGIN:]).any()  # nothing cut at the right edge
    shorter = heat_map(np.eye(2), ["a", "b"], ["x", "y"], title="accuracy", cell_size=20)
    assert shorter.shape[1] < image.shape[1]


def test_long_labels_widen_the_image_and_are_drawn_whole():
    short = heat_map(np.eye(2), ["a", "b"], ["x", "y"], cell_size=20)
    label = "a rather long class name"
    long = heat_map(np.eye(2), [label, "b"], ["x", "y"], cell_size=20)
    # Wider by what the longest row label adds to the column of labels.
    assert long.shape[1] - short.shape[1] == text_width(label) - max(text_width("a"), text_width("b"))
    assert contains(long, rendered(label))
    assert not dark(long[:, :MARGIN]).any() and not dark(long[:, -MARGIN:]).any()


def test_min_width_pads_with_white_on_the_right():
    image = heat_map(np.eye(2), ["a", "b"], ["x", "y"], cell_size=20)
    padded = heat_map(np.eye(2), ["a", "b"], ["x", "y"], cell_size=20, min_width=image.shape[1] + 50)
    assert padded.shape == (image.shape[0], image.shape[1] + 50, 3)
    np.testing.assert_array_equal(padded[:, : image.shape[1]], image)
    assert np.all(padded[:, image.shape[1]:] == 255)
    # A wide drawing is not cut to a smaller min_width.
    assert heat_map(np.eye(2), ["a", "b"], ["x", "y"], cell_size=20, min_width=10).shape == image.shape


def test_cells_grow_to_fit_their_texts():
    texts = [["1234567", "0"], ["0", "1"]]
    image = heat_map(np.eye(2), ["a", "b"], ["x", "y"], cell_texts=texts, cell_size=20)
    # The empty top-right cell (value 0, lightest) is as wide as the widest text needs.
    cell = int(np.sqrt(count(image, colour_map(0.0)) + 1))
    assert cell >= text_width("1234567", size=TITLE_FONT_SIZE) + 10


def test_the_colour_range_spans_the_colour_map_and_the_bar_shows_its_ends():
    values = np.array([[0.031, 0.2], [0.412, 0.1]])
    image = heat_map(values, ["a", "b"], ["x", "y"], cell_size=20, colour_range=(0.031, 0.412),
                     colour_bar=True)
    # The smallest value is the lightest colour, the largest the darkest (the bar adds a few pixels of each).
    assert count(image, colour_map(0.0)) >= 400 and count(image, colour_map(1.0)) >= 400
    assert format_range(0.031, 0.412) == ("0.031", "0.412")
    low, high = rendered("0.031"), rendered("0.412")  # 20-pixel cells: labels at full size
    assert contains(image, low) and contains(image, high)
    # The bar: its last row runs through the colour map from its lightest to its darkest colour.
    bar_row = [row for row in image if count(row, colour_map(0.0)) and count(row, colour_map(1.0))][-1]
    bar = bar_row[np.any(bar_row != 255, axis=-1)].astype(int)
    assert bar[0].tolist() == colour_map(0.0).tolist() and bar[-1].tolist() == colour_map(1.0).tolist()
    assert np.all(np.diff(bar.sum(axis=-1)) <= 0) and len(bar) >= 40
    # Without a range the values are taken in [0, 1] and no bar is drawn.
    plain = heat_map(values, ["a", "b"], ["x", "y"], cell_size=20)
    assert count(plain, colour_map(0.412)) == 400 and not contains(plain, high)
    assert plain.shape[0] < image.shape[0]


def test_a_colour_bar_caption_widens_the_bar():
    caption = "share of the row, a long caption"
    image = heat_map(np.eye(2), ["a", "b"], ["x", "y"], cell_size=20, colour_bar=caption)
    assert contains(image, rendered(caption, colour=(110, 110, 110)))
    assert contains(image, rendered("0")) and contains(image, rendered("1"))
    assert image.shape[1] >= text_width(caption) + 2 * MARGIN


def test_padded_batch_pads_images_to_one_size():
    images = [np.zeros((4, 5, 3), "uint8"), np.zeros((6, 3, 3), "uint8"), np.zeros((2, 2, 3), "uint8")]
    batch = padded_batch(images)
    assert batch.shape == (3, 6, 5, 3) and batch.dtype == np.uint8
    for sample, image in zip(batch, images):
        height, width = image.shape[:2]
        assert np.all(sample[:height, :width] == 0) and count(sample, (255, 255, 255)) == 30 - height * width
