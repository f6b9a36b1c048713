"""How many weights a weights file holds, read from the shapes it declares: no weight is read.

`kbert.io.safe_loading` compares this with what a `.keras` file's config
claims, and `kbert.checkpoints` with what a keras-hub preset's claims,
before anything is built.
"""

import io
import shutil
import struct
import tempfile
import zipfile

_MB = 1 << 20
# The members of a `.keras` archive that hold its weights, as Keras writes them.
WEIGHTS_MEMBERS = ("model.weights.h5", "model.weights.npz")


def weights_held(path, archive):
    """`(member name, weights)`: how many weights (values) the archive's weights member holds, or `(None, 0)`."""
    names = set(archive.namelist())
    for name in WEIGHTS_MEMBERS:
        if name in names:
            info = archive.getinfo(name)

            def fail(problem, name=name):
                return ValueError(f"{path}: its {name}: {problem}")

            try:
                file = _member_file(archive, info)
            except (ValueError, OSError, zipfile.BadZipFile, EOFError) as error:
                raise fail(f"cannot be read ({error}).") from None
            with file:
                if name.endswith(".h5"):
                    return name, h5_weight_count(file, info.file_size, fail)
                return name, npz_weight_count(file, fail)
    return None, 0


def h5_weight_count(file, size, fail):
    """How many values the datasets of an HDF5 file declare, read from their shapes (no data is read).

    Refused (the exception `fail(problem)` returns is raised) are a file
    h5py cannot read, a dataset stored in another file (external or
    virtual storage, which would make Keras read files named inside it),
    and shapes that declare more bytes than the file's `size` holds
    (compressed weights, which Keras never writes, would be inflated in
    memory to what they declare).
    """
    import h5py

    datasets = []
    try:
        with h5py.File(file, "r") as h5:
            def visit(name, item):
                if isinstance(item, h5py.Dataset):
                    external = bool(item.external) or item.is_virtual
                    datasets.append((name, item.size, item.size * item.dtype.itemsize, external))

            h5.visititems(visit)
    except Exception as error:  # h5py raises OSError, KeyError, ValueError, RuntimeError for damaged files
        reason = (str(error).strip().splitlines() or [type(error).__name__])[0][:200]
        raise fail(f"not a readable HDF5 file (truncated or damaged?): {reason}") from None
    for name, _, _, external in datasets:
        if external:
            raise fail(f"the dataset {name[:100]!r} is stored in another file; kbert reads weights from the "
                       "model's own file only.")
    declared = sum(nbytes for _, _, nbytes, _ in datasets)
    if declared > size + _MB:
        raise fail(f"its datasets declare {declared:,} bytes of weights in a file of {size:,} bytes "
                   "(compressed or damaged weights).")
    return sum(count for _, count, _, _ in datasets)


def npz_weight_count(file, fail):
    """How many values the arrays of a `.npz` declare, from their headers (no data is read)."""
    import numpy as np

    count = 0
    try:
        with zipfile.ZipFile(file) as arrays:
            for info in arrays.infolist():
                with arrays.open(info) as member:
                    version = np.lib.format.read_magic(member)
                    if version == (1, 0):
                        shape, _, dtype = np.lib.format.read_array_header_1_0(member)
                    else:
                        shape, _, dtype = np.lib.format.read_array_header_2_0(member)
                size = int(np.prod(shape, dtype=object)) if shape else 1
                if size * dtype.itemsize > info.file_size:
                    raise ValueError(f"{info.filename} declares more bytes than it holds")
                count += size
    except (ValueError, OSError, zipfile.BadZipFile, EOFError) as error:
        reason = (str(error).strip().splitlines() or [type(error).__name__])[0][:200]
        raise fail(f"not a readable .npz file (truncated or damaged?): {reason}") from None
    return count


def _member_file(archive, info):
    """A seekable file of one member: a view of the archive's bytes when stored, else a decompressed copy.

    Python's zipfile seeks backwards in a member by reading it again from its
    start, which h5py (reading metadata here and there) would make
    quadratic.
    """
    if info.compress_type == zipfile.ZIP_STORED:
        file = archive.fp
        file.seek(info.header_offset)
        header = file.read(zipfile.sizeFileHeader)
        if len(header) != zipfile.sizeFileHeader or header[:4] != zipfile.stringFileHeader:
            raise ValueError(f"the zip member {info.filename} has no valid header (truncated or corrupt)")
        fields = struct.unpack(zipfile.structFileHeader, header)
        start = (info.header_offset + zipfile.sizeFileHeader + fields[zipfile._FH_FILENAME_LENGTH]
                 + fields[zipfile._FH_EXTRA_FIELD_LENGTH])
        return io.BufferedReader(_Slice(file, start, info.file_size), buffer_size=1 << 16)
    copy = tempfile.SpooledTemporaryFile(max_size=64 * _MB)
    with archive.open(info) as member:
        shutil.copyfileobj(member, copy, 1 << 20)
    copy.seek(0)
    return copy


class _Slice(io.RawIOBase):
    """Bytes `[start, start + size)` of a seekable file, as a file."""

    def __init__(self, file, start, size):
        super().__init__()
        self._file, self._start, self._size, self._position = file, start, size, 0

    def readable(self):
        return True

    def seekable(self):
        return True

    def tell(self):
        return self._position

    def seek(self, offset, whence=io.SEEK_SET):
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._position, io.SEEK_END: self._size}[whence]
        self._position = max(0, base + offset)
        return self._position

    def readinto(self, buffer):
        wanted = max(0, min(len(buffer), self._size - self._position))
        if not wanted:
            return 0
        self._file.seek(self._start + self._position)
        data = self._file.read(wanted)
        buffer[: len(data)] = data
        self._position += len(data)
        return len(data)
