"""Reader for the UCI SMS Spam Collection v.1."""

from pathlib import Path

from kbert.data.paths import DataFormatError, DataSource, find_data_file, read_lines

SMS_SPAM_FILE = "sms_spam_collection/SMSSpamCollection"
SMS_SPAM_SOURCE = DataSource(
    url="https://archive.ics.uci.edu/static/public/228/sms+spam+collection.zip",
    zip_member="SMSSpamCollection",
)
SMS_SPAM_LABEL_NAMES = ("ham", "spam")


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
        DataFormatError: a line is malformed; the message gives file and line.
    """
    if path is None:
        path = find_data_file(SMS_SPAM_FILE, SMS_SPAM_SOURCE)
    path = Path(path)
    texts, labels = [], []
    for line_number, line in read_lines(path):
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
