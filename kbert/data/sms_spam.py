"""Reader for the UCI SMS Spam Collection v.1."""

from pathlib import Path

import numpy as np

from kbert.data.paths import DataSource, find_data_file
from kbert.io.text_files import DataFormatError, read_text_lines

SMS_SPAM_FILE = "sms_spam_collection/SMSSpamCollection"
SMS_SPAM_SOURCE = DataSource(
    url="https://archive.ics.uci.edu/static/public/228/sms+spam+collection.zip",
    zip_member="SMSSpamCollection",
)
SMS_SPAM_LABEL_NAMES = ("ham", "spam")
# The fixed split that the demo, `kbert train sms_spam` and the benchmarks report on.
SMS_SPAM_SPLIT_SEED = 0
SMS_SPAM_TRAIN_FRACTION = 0.8


def load_sms_spam(path=None):
    """Loads the SMS Spam Collection as `(texts, labels)`, in file order.

    Each line of the file is `ham<TAB>text` or `spam<TAB>text`. Labels are
    ints indexing `SMS_SPAM_LABEL_NAMES`: ham is 0, spam is 1.

    Args:
        path: the file to read. Defaults to
            `sms_spam_collection/SMSSpamCollection` under `data_dir()`.

    Example:
    >>> texts, labels = load_sms_spam()
    >>> len(texts), sum(labels)
    (5574, 747)

    Raises:
        DataFormatError: a line is malformed (the message gives file and
            line), or the file is empty.
    """
    if path is None:
        path = find_data_file(SMS_SPAM_FILE, SMS_SPAM_SOURCE)
    path = Path(path)
    texts, labels = [], []
    for line_number, line in read_text_lines(path):
        label, tab, text = line.partition("\t")
        if not tab:
            problem = "expected 'ham' or 'spam', a tab, then the text"
            raise DataFormatError(path, line_number, problem, line)
        if label not in SMS_SPAM_LABEL_NAMES:
            problem = f"unknown label {label!r}, expected 'ham' or 'spam'"
            raise DataFormatError(path, line_number, problem, line)
        texts.append(text)
        labels.append(SMS_SPAM_LABEL_NAMES.index(label))
    return texts, labels


def split_sms_spam(texts, labels, seed=SMS_SPAM_SPLIT_SEED, train_fraction=SMS_SPAM_TRAIN_FRACTION):
    """The fixed, shuffled 80/20 split of the collection: `((train_x, train_y), (test_x, test_y))`.

    Example:
    >>> (train_texts, train_labels), (test_texts, test_labels) = split_sms_spam(*load_sms_spam())
    >>> len(train_texts), len(test_texts)
    (4459, 1115)
    """
    order = np.random.default_rng(seed).permutation(len(texts))
    cut = int(len(texts) * train_fraction)
    texts, labels = np.asarray(texts, dtype=object), np.asarray(labels)
    return (texts[order[:cut]], labels[order[:cut]]), (texts[order[cut:]], labels[order[cut:]])
