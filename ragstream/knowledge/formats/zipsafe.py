"""Zip-based formats (DOCX, PPTX, EPUB) opened within ``Limits``: a zip bomb (members that
unpack to far more than the file, or too many members) is refused before anything is unpacked,
and a member is never read past its declared size (``zipfile`` stops there and checks the CRC).
"""

from __future__ import annotations

import io
import zipfile
import zlib

from ragstream.common.errors import DamagedFileError, UnsafeFileError
from ragstream.knowledge.formats.converted import Limits


def open_zip(name: str, data: bytes, limits: Limits) -> zipfile.ZipFile:
    """``data`` as a zip archive, its directory checked against ``limits``."""
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
        members = archive.infolist()
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, ValueError, EOFError) as err:
        raise DamagedFileError(name, f"it is not a readable zip archive ({err})") from None
    if len(members) > limits.max_members:
        raise UnsafeFileError(name, f"it holds {len(members):,} members (at most "
                                    f"{limits.max_members:,})")
    total = sum(m.file_size for m in members)
    if total > limits.max_unpacked_bytes:
        raise UnsafeFileError(name, f"it unpacks to {total / 2**20:,.0f} MiB (at most "
                                    f"{limits.max_unpacked_bytes / 2**20:,.0f} MiB)")
    for m in members:
        if m.file_size > 1024 * 1024 and m.file_size > limits.max_ratio * max(m.compress_size, 1):
            ratio = m.file_size / max(m.compress_size, 1)
            raise UnsafeFileError(name, f"its member {m.filename} unpacks {ratio:,.0f} times larger "
                                        f"than it is stored (a zip bomb; at most "
                                        f"{limits.max_ratio:,.0f}×)")
    return archive


def read_member(name: str, archive: zipfile.ZipFile, member: str) -> bytes:
    """One member's bytes (at most its declared size, which ``open_zip`` bounded)."""
    try:
        return archive.read(member)
    except KeyError:
        raise DamagedFileError(name, f"its part {member} is missing") from None
    except (zipfile.BadZipFile, zlib.error, OSError, ValueError, EOFError, RuntimeError) as err:
        raise DamagedFileError(name, f"its part {member} is damaged ({err})") from None
