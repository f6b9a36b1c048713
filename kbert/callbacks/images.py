"""Heat maps as RGB arrays, for the image summaries of kbert's callbacks.

Drawn with Pillow (a dependency of TensorBoard), so no plotting library is
needed. The functions return `uint8` arrays of shape `(height, width, 3)`, what
`tf.summary.image` takes (with a batch axis added).
"""

import numpy as np

# Anchors of a perceptually ordered colour map (light yellow to dark blue):
# low values stay light, so labels drawn on them remain readable.
_COLOURS = np.array(
    [[255, 255, 217], [199, 233, 180], [65, 182, 196], [34, 94, 168], [8, 29, 88]], "float64"
)
_WHITE, _BLACK, _GREY = (255, 255, 255), (0, 0, 0), (110, 110, 110)


def colour_map(values):
    """RGB colours (`uint8`, one more axis of 3) for `values` in [0, 1]; NaN is light grey."""
    values = np.asarray(values, "float64")
    missing = ~np.isfinite(values)
    position = np.clip(np.where(missing, 0.0, values), 0.0, 1.0) * (len(_COLOURS) - 1)
    low = np.minimum(np.floor(position).astype(int), len(_COLOURS) - 2)
    share = (position - low)[..., None]
    colours = _COLOURS[low] * (1 - share) + _COLOURS[low + 1] * share
    colours[missing] = 235
    return np.round(colours).astype("uint8")


def _font(size):
    from PIL import ImageFont

    try:
        return ImageFont.load_default(size=size)
    except (TypeError, ImportError, OSError):  # Pillow without FreeType: a fixed bitmap font.
        return ImageFont.load_default()


def _text_size(draw, text, font):
    left, top, right, bottom = draw.textbbox((0, 0), text, font=font)
    return right - left, bottom - top


def heat_map(values, row_labels, column_labels, title=None, cell_texts=None, cell_size=None,
             row_title=None, column_title=None):
    """A labelled heat map of a matrix, as an RGB array.

    Args:
        values: a 2-D array of numbers in [0, 1] (the colour of each cell).
        row_labels: a label for each row, drawn left of the matrix.
        column_labels: a label for each column, drawn above it, vertically.
        title: a line above everything.
        cell_texts: optional 2-D array of strings written in the cells
            (e.g. counts).
        cell_size: pixels per cell; default from the matrix' size.
        row_title, column_title: what the rows and columns are (e.g. "true",
            "predicted").

    Returns:
        A `uint8` array `(height, width, 3)`.
    """
    from PIL import Image, ImageDraw

    values = np.asarray(values, "float64")
    if values.ndim != 2:
        raise ValueError(f"A heat map needs a 2-D matrix, got shape {values.shape}.")
    rows, columns = values.shape
    if len(row_labels) != rows or len(column_labels) != columns:
        raise ValueError(
            f"Got {len(row_labels)} row and {len(column_labels)} column labels for a "
            f"{rows}x{columns} matrix."
        )
    if cell_size is None:
        cell_size = int(np.clip(360 // max(rows, columns, 1), 10, 48 if cell_texts is not None else 24))
    font = _font(max(8, min(13, cell_size - 2)))
    small = ImageDraw.Draw(Image.new("RGB", (1, 1)))
    label_width = max([_text_size(small, str(label), font)[0] for label in row_labels] + [0]) + 6
    label_height = max([_text_size(small, str(label), font)[0] for label in column_labels] + [0]) + 6
    line = _text_size(small, "Hg", font)[1] + 6
    top = (line if title else 0) + (line if column_title else 0) + label_height
    left = (line if row_title else 0) + label_width
    width = left + columns * cell_size + 4
    height = top + rows * cell_size + 4

    cells = np.repeat(np.repeat(colour_map(values), cell_size, axis=0), cell_size, axis=1)
    image = Image.new("RGB", (width, height), _WHITE)
    image.paste(Image.fromarray(cells), (left, top))
    draw = ImageDraw.Draw(image)
    y = 0
    if title:
        draw.text((2, y + 2), title, fill=_BLACK, font=font)
        y += line
    if column_title:
        draw.text((left, y + 2), column_title, fill=_GREY, font=font)
    if row_title:
        # Written vertically, left of the row labels.
        text_width, text_height = _text_size(draw, row_title, font)
        label = Image.new("RGB", (text_width + 4, text_height + 6), _WHITE)
        ImageDraw.Draw(label).text((2, 0), row_title, fill=_GREY, font=font)
        image.paste(label.rotate(90, expand=True), (0, top))
    for i, text in enumerate(row_labels):
        text_width, text_height = _text_size(draw, str(text), font)
        draw.text((left - text_width - 4, top + i * cell_size + (cell_size - text_height) // 2 - 1),
                  str(text), fill=_BLACK, font=font)
    for j, text in enumerate(column_labels):
        # Column labels run upwards, each in a strip rotated by 90 degrees.
        text_width, text_height = _text_size(draw, str(text), font)
        strip = Image.new("RGB", (text_width + 4, text_height + 6), _WHITE)
        ImageDraw.Draw(strip).text((2, 0), str(text), fill=_BLACK, font=font)
        strip = strip.rotate(90, expand=True)
        image.paste(strip, (left + j * cell_size + (cell_size - strip.width) // 2,
                            top - strip.height - 2))
    if cell_texts is not None:
        for i in range(rows):
            for j in range(columns):
                text = str(cell_texts[i][j])
                text_width, text_height = _text_size(draw, text, font)
                colour = _WHITE if values[i, j] > 0.55 else _BLACK
                draw.text((left + j * cell_size + (cell_size - text_width) // 2,
                           top + i * cell_size + (cell_size - text_height) // 2 - 1),
                          text, fill=colour, font=font)
    return np.asarray(image, "uint8")


def grid(images, columns, gap=8):
    """RGB arrays in rows of `columns`, left to right then top to bottom, on white."""
    columns = max(1, min(int(columns), len(images)))
    rows = [images[start : start + columns] for start in range(0, len(images), columns)]
    heights = [max(image.shape[0] for image in row) for row in rows]
    widths = [max(row[j].shape[1] for row in rows if j < len(row)) for j in range(columns)]
    canvas = np.full((sum(heights) + gap * (len(rows) - 1), sum(widths) + gap * (columns - 1), 3),
                     255, "uint8")
    y = 0
    for row, height in zip(rows, heights):
        x = 0
        for image, width in zip(row, widths):
            canvas[y : y + image.shape[0], x : x + image.shape[1]] = image
            x += width + gap
        y += height + gap
    return canvas
