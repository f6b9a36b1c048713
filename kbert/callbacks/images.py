"""Heat maps as RGB arrays, for the image summaries of kbert's callbacks.

Drawn with Pillow (a dependency of TensorBoard), so no plotting library is
needed. The functions return `uint8` arrays of shape `(height, width, 3)`, what
`tf.summary.image` takes (with a batch axis added).

The images are sized for TensorBoard's image cards, which scale every image to
the card's width (about 350 to 500 pixels): text is 11 to 15 pixels high, and
an image is as wide as its widest line of text, so nothing is cut off at the
right edge.
"""

import numpy as np

# Anchors of a perceptually ordered colour map (light yellow to dark blue):
# low values stay light, so labels drawn on them remain readable.
_COLOURS = np.array(
    [[255, 255, 217], [199, 233, 180], [65, 182, 196], [34, 94, 168], [8, 29, 88]], "float64"
)
_WHITE, _BLACK, _GREY = (255, 255, 255), (0, 0, 0), (110, 110, 110)

# About the width of TensorBoard's image cards: a narrower image is scaled up into a blur.
CARD_WIDTH = 400
# Pixel size of titles, and the largest of labels and cell texts.
TITLE_FONT_SIZE = 15
# White space around the drawing and between its parts.
MARGIN = 6
_SMALLEST_CELL, _LARGEST_CELL = 14, 64
_BAR_HEIGHT = 12


def colour_map(values):
    """RGB colours (`uint8`, one more axis of 3) for `values` in [0, 1]; NaN is light grey.

    Example:
    >>> colour_map([0.0, 1.0, np.nan]).tolist()
    [[255, 255, 217], [8, 29, 88], [235, 235, 235]]
    """
    values = np.asarray(values, "float64")
    missing = ~np.isfinite(values)
    position = np.clip(np.where(missing, 0.0, values), 0.0, 1.0) * (len(_COLOURS) - 1)
    low = np.minimum(np.floor(position).astype(int), len(_COLOURS) - 2)
    share = (position - low)[..., None]
    colours = _COLOURS[low] * (1 - share) + _COLOURS[low + 1] * share
    colours[missing] = 235
    return np.round(colours).astype("uint8")


def font(size):
    """Pillow's default font at `size` pixels (its small bitmap font where Pillow lacks FreeType)."""
    from PIL import ImageFont

    try:
        return ImageFont.load_default(size=size)
    except (TypeError, ImportError, OSError):
        return ImageFont.load_default()


def format_range(low, high):
    """How a colour bar writes its ends: whole numbers as such, else 3 decimals, more if they look alike.

    Example:
    >>> format_range(0.0, 1.0), format_range(0.0312, 0.4118), format_range(0.1102, 0.1104)
    (('0', '1'), ('0.031', '0.412'), ('0.1102', '0.1104'))
    """
    if float(low).is_integer() and float(high).is_integer():
        return str(int(low)), str(int(high))
    # A near-uniform range (an attention head's 0.110 to 0.112) still needs two different numbers.
    for decimals in range(3, 7):
        ends = f"{low:.{decimals}f}", f"{high:.{decimals}f}"
        if ends[0] != ends[1]:
            return ends
    return f"{low:.3f}", f"{high:.3f}"


def heat_map(values, row_labels, column_labels, title=None, cell_texts=None, cell_size=None,
             row_title=None, column_title=None, colour_range=(0.0, 1.0), colour_bar=False,
             min_width=None):
    """A labelled heat map of a matrix, as an RGB array.

    Eleven parameters, where the house keeps ten: each is one part of the
    picture, all but the matrix and its labels optional keywords, as a
    plotting function takes them.

    The image is as wide as its widest part: the matrix with its labels, the
    title, the column title or the colour bar, and at least `min_width`
    (the content stays left-aligned, padded with white on the right).

    Args:
        values: a 2-D array of numbers; NaN cells are grey.
        row_labels: a label for each row, drawn left of the matrix.
        column_labels: a label for each column, drawn above it:
            horizontally when every label fits its cell, else upwards.
        title: a line above everything.
        cell_texts: optional 2-D array of strings written in the cells
            (e.g. counts).
        cell_size: pixels per cell (grown to fit the cell texts); default
            from the matrix' size, so a small matrix is about 300 pixels
            wide.
        row_title, column_title: what the rows and columns are (e.g. "true",
            "predicted").
        colour_range: `(low, high)`: values from `low` (lightest) to `high`
            (darkest) span the colour map; values outside take its ends.
        colour_bar: whether to draw the colour map under the matrix, its
            ends labelled with `low` and `high` (as `format_range` writes
            them); a string is written between them as its caption.
        min_width: the least width in pixels.

    Returns:
        A `uint8` array `(height, width, 3)`.

    Example:
    >>> image = heat_map([[0.9, 0.1], [0.2, 0.8]], ["cat", "dog"], ["cat", "dog"],
    ...                  title="accuracy 0.85 on 20 examples", cell_texts=[[9, 1], [2, 8]],
    ...                  row_title="true", column_title="predicted", colour_bar="share of the row",
    ...                  min_width=400)
    >>> image.dtype, image.shape[1], image.shape[2]
    (dtype('uint8'), 400, 3)
    >>> attention = np.array([[0.30, 0.70], [0.45, 0.55]])
    >>> image = heat_map(attention, ["a", "b"], ["a", "b"], colour_range=(0.30, 0.70), colour_bar=True)
    >>> bool(np.all(image == colour_map(1.0), axis=-1).any())  # the largest value is the darkest
    True
    """
    from PIL import Image, ImageDraw

    values, low, high = _checked_matrix(values, row_labels, column_labels, colour_range)
    row_labels = [str(label) for label in row_labels]
    column_labels = [str(label) for label in column_labels]
    texts = None if cell_texts is None else [[str(text) for text in row] for row in cell_texts]
    layout = _Layout(values.shape, (row_labels, column_labels), (title, row_title, column_title), texts,
                     cell_size, (low, high) if colour_bar else None,
                     colour_bar if isinstance(colour_bar, str) else "", min_width)

    # Where each value lies in the colour range; a range of one value colours everything as its low end.
    span = high - low
    position = (values - low) / span if span > 0 else np.where(np.isfinite(values), 0.0, np.nan)
    cells = np.repeat(np.repeat(colour_map(position), layout.cell, axis=0), layout.cell, axis=1)
    image = Image.new("RGB", (layout.width, layout.height), _WHITE)
    image.paste(Image.fromarray(cells), (layout.left, layout.top))
    draw = ImageDraw.Draw(image)
    _draw_titles(image, draw, layout, title, row_title, column_title)
    _draw_labels(image, draw, layout, row_labels, column_labels)
    if texts is not None:
        _draw_cell_texts(draw, layout, texts, position)
    if layout.bar:
        _draw_colour_bar(image, draw, layout)
    return np.asarray(image, "uint8")


def _checked_matrix(values, row_labels, column_labels, colour_range):
    """`values` as a float array, and the colour range's ends; a ValueError where they do not fit together."""
    values = np.asarray(values, "float64")
    if values.ndim != 2:
        raise ValueError(f"A heat map needs a 2-D matrix, got shape {values.shape}.")
    rows, columns = values.shape
    if len(row_labels) != rows or len(column_labels) != columns:
        raise ValueError(
            f"Got {len(row_labels)} row and {len(column_labels)} column labels for a "
            f"{rows}x{columns} matrix."
        )
    low, high = (float(end) for end in colour_range)
    if not (np.isfinite(low) and np.isfinite(high) and low <= high):
        raise ValueError(
            f"`colour_range` must be finite (low, high) with low <= high, got {colour_range!r}."
        )
    return values, low, high


class _Layout:
    """Where each part of a heat map goes, measured in its fonts before anything is drawn.

    `cell`: pixels per cell; `left`, `top`: the matrix' corner; `upright`:
    whether the column labels are written across; `bar`: the colour bar's
    `(x, y, width, end texts, caption)`, or None; `width`, `height`: the image's.
    """

    def __init__(self, shape, labels, titles, texts, cell_size, bar_range, caption, min_width):
        from PIL import Image, ImageDraw

        (row_labels, column_labels), (title, row_title, column_title) = labels, titles
        rows, columns = shape
        self.rows, self.columns = rows, columns
        measure = ImageDraw.Draw(Image.new("RGB", (1, 1)))
        if cell_size is None:
            cell_size = int(np.clip(360 // max(rows, columns, 1), _SMALLEST_CELL, _LARGEST_CELL))
        # Labels as large as the cells allow: 11 pixels in the smallest default cell.
        self.label_font = font(int(np.clip(cell_size - 3, 9, TITLE_FONT_SIZE)))
        self.title_font = font(TITLE_FONT_SIZE)
        self.label_line = _line_height(measure, self.label_font)
        if texts is not None:
            widest = max((_width(measure, text, self.label_font) for row in texts for text in row), default=0)
            cell_size = max(cell_size, widest + 10, self.label_line + 4)
        self.cell = cell_size
        self.title_line = _line_height(measure, self.title_font) + 4

        row_label_width = max((_width(measure, label, self.label_font) for label in row_labels), default=0)
        column_label_widths = [_width(measure, label, self.label_font) for label in column_labels]
        # Upright column labels read best; they turn upwards only when one is wider than its cell.
        self.upright = max(column_label_widths, default=0) + 6 <= cell_size
        column_label_height = self.label_line if self.upright else max(column_label_widths, default=0) + 2

        self.top = MARGIN + (self.title_line if title else 0) + (self.label_line + 4 if column_title else 0)
        self.top += column_label_height + 4
        self.left = MARGIN + (self.label_line + 4 if row_title else 0) + row_label_width + 6
        self.matrix_width, self.matrix_height = columns * cell_size, rows * cell_size
        bottom = self.top + self.matrix_height
        if row_title:
            bottom = max(bottom, self.top + _width(measure, row_title, self.label_font))

        # The colour bar: under the matrix, at least as wide as its numbers and caption need.
        self.bar = None
        if bar_range is not None:
            ends = list(format_range(*bar_range))
            # The caption is centred, so both ends get room for the wider number.
            needed = (_width(measure, caption, self.label_font) + 40
                      + 2 * max(_width(measure, text, self.label_font) for text in ends))
            self.bar = (self.left, bottom + 10, max(self.matrix_width, needed, 120), ends, caption)
            bottom = bottom + 10 + _BAR_HEIGHT + 4 + self.label_line

        self.width = max(
            self.left + self.matrix_width,
            MARGIN + _width(measure, title, self.title_font) if title else 0,
            self.left + _width(measure, column_title, self.label_font) if column_title else 0,
            self.bar[0] + self.bar[2] if self.bar else 0,
        ) + MARGIN
        self.width = max(self.width, int(min_width or 0))
        self.height = bottom + MARGIN

    def cell_centre(self, i, j):
        """The pixel at the centre of row `i`, column `j`."""
        return self.left + j * self.cell + self.cell // 2, self.top + i * self.cell + self.cell // 2


def _draw_titles(image, draw, layout, title, row_title, column_title):
    y = MARGIN
    if title:
        _write(draw, (MARGIN, y), title, layout.title_font, _BLACK)
        y += layout.title_line
    if column_title:
        _write(draw, (layout.left, y), column_title, layout.label_font, _GREY)
    if row_title:
        # Written upwards, left of the row labels.
        strip = _upwards(row_title, layout.label_font, layout.label_line, _GREY)
        image.paste(strip, (MARGIN, layout.top + max(0, (layout.matrix_height - strip.height) // 2)))


def _draw_labels(image, draw, layout, row_labels, column_labels):
    for i, label in enumerate(row_labels):
        _write(draw, (layout.left - 6, layout.cell_centre(i, 0)[1]), label, layout.label_font, _BLACK,
               align="right", centred_on_y=True)
    for j, label in enumerate(column_labels):
        x = layout.cell_centre(0, j)[0]
        if layout.upright:
            _write(draw, (x, layout.top - 4 - layout.label_line), label, layout.label_font, _BLACK,
                   align="centre")
        else:
            strip = _upwards(label, layout.label_font, layout.label_line, _BLACK)
            image.paste(strip, (x - layout.cell // 2 + (layout.cell - strip.width) // 2,
                                layout.top - 4 - strip.height))


def _draw_cell_texts(draw, layout, texts, position):
    for i in range(layout.rows):
        for j in range(layout.columns):
            # White on the dark half of the colour map, black on the light half.
            colour = _WHITE if np.isfinite(position[i, j]) and position[i, j] > 0.55 else _BLACK
            _write(draw, layout.cell_centre(i, j), texts[i][j], layout.label_font, colour,
                   align="centre", centred_on_y=True)


def _draw_colour_bar(image, draw, layout):
    from PIL import Image

    x, y, bar_width, (low_text, high_text), caption = layout.bar
    gradient = colour_map(np.linspace(0.0, 1.0, bar_width))[None].repeat(_BAR_HEIGHT, axis=0)
    image.paste(Image.fromarray(gradient), (x, y))
    y += _BAR_HEIGHT + 4
    _write(draw, (x, y), low_text, layout.label_font, _BLACK)
    _write(draw, (x + bar_width, y), high_text, layout.label_font, _BLACK, align="right")
    if caption:
        _write(draw, (x + bar_width // 2, y), caption, layout.label_font, _GREY, align="centre")


def padded_batch(images):
    """RGB arrays padded with white (right and bottom) to one size, stacked: `(count, height, width, 3)`.

    What one image summary of several samples takes (TensorBoard's Time
    Series shows each sample as a card of its own, its slider over steps).

    Example:
    >>> batch = padded_batch([np.zeros((4, 5, 3), "uint8"), np.zeros((6, 3, 3), "uint8")])
    >>> batch.shape, int(batch[1, 0, 4, 0])
    ((2, 6, 5, 3), 255)
    """
    height = max(image.shape[0] for image in images)
    width = max(image.shape[1] for image in images)
    batch = np.full((len(images), height, width, 3), 255, "uint8")
    for sample, image in zip(batch, images):
        sample[: image.shape[0], : image.shape[1]] = image
    return batch


def _width(draw, text, text_font):
    left, _, right, _ = draw.textbbox((0, 0), text, font=text_font)
    return right - left


def _line_height(draw, text_font):
    # From the pen position down to the lowest descender: the same for every text of a font.
    return draw.textbbox((0, 0), "Hgjy[]", font=text_font)[3]


def _write(draw, xy, text, text_font, fill, align="left", centred_on_y=False):
    """Writes `text` with its left, centre or right at `x`, and its line's top (or middle) at `y`."""
    x, y = xy
    left, _, right, _ = draw.textbbox((0, 0), text, font=text_font)
    x -= left if align == "left" else (left + right) // 2 if align == "centre" else right
    if centred_on_y:
        # Centred on the capitals' height, so labels of one row share a baseline whatever their letters.
        _, capital_top, _, baseline = draw.textbbox((0, 0), "H", font=text_font)
        y -= (capital_top + baseline) // 2
    draw.text((x, y), text, fill=fill, font=text_font)


def _upwards(text, text_font, line_height, fill):
    """`text` on white, rotated to run upwards."""
    from PIL import Image, ImageDraw

    draw = ImageDraw.Draw(Image.new("RGB", (1, 1)))
    strip = Image.new("RGB", (_width(draw, text, text_font) + 2, line_height), _WHITE)
    _write(ImageDraw.Draw(strip), (1, 0), text, text_font, fill)
    return strip.rotate(90, expand=True)
