"""A bad setting or a bad data row printed about 40-70 lines: Tango logs every exception as
"Uncaught exception" with its whole traceback, and the line that says what is wrong and how to
fix it sat near the end. An error that says all there is to say (Tango's ``ConfigurationError``,
and the classes marked with :func:`shown_in_one_line`: a bad data row, a full disk) is now
logged as its one line, and a second line says where its full traceback was written.

The tracebacks go to one file (:func:`traceback_file`), appended to and rotated at
:data:`ROTATE_AT` bytes (one older copy kept, ``.1``), not a file per error. Nothing of an
exception is kept once it is logged: it is marked as logged (an attribute on the exception), so
that a model and optimizer held by its frames are freed with it.

Tango 1.3.2 (``tango.common.logging.log_exc_info``, which its excepthook, its steps and its
executor all call through the module). Tests: ``tests/test_tango_fixes.py::test_a_bad_setting_and_a_bad_row_print_two_lines``,
``::test_logged_errors_keep_no_exception_alive_and_share_one_rotating_file``.
"""

import datetime
import getpass
import logging
import os
import tempfile
import traceback as tracebacks
from pathlib import Path
from typing import Tuple, Type

from tango.common import logging as tango_logging
from tango.common.exceptions import ConfigurationError

_log_exc_info = tango_logging.log_exc_info
#: The exceptions whose message is the whole story.
ONE_LINE: Tuple[Type[BaseException], ...] = (ConfigurationError,)
#: Where the tracebacks go, if set; else :func:`traceback_file`'s default.
TRACEBACKS_VARIABLE = "CATWALK_TRACEBACKS"
ROTATE_AT = 1 << 20
_LOGGED = "_catwalk_logged"  # set on an exception once logged: a step logs its failure, then the excepthook


def shown_in_one_line(cls: Type[BaseException]) -> Type[BaseException]:
    """Marks an exception class whose message names what is wrong and the fix: it is logged as
    that one line (and where its traceback went)."""
    global ONE_LINE
    ONE_LINE = ONE_LINE + (cls,)
    return cls


def traceback_file() -> Path:
    """``$CATWALK_TRACEBACKS``, or ``catwalk-tracebacks-USER.txt`` in the temp folder (one per
    user: another user's is not writable)."""
    default = Path(tempfile.gettempdir()) / f"catwalk-tracebacks-{_user()}.txt"
    return Path(os.environ.get(TRACEBACKS_VARIABLE) or default)


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no login name and no passwd entry (some containers)
        return str(os.getuid())


def write_traceback(exctype, value, traceback) -> Path:
    """Appends the traceback, under a line saying when and in which process, to
    :func:`traceback_file`, moved to ``.1`` first once it holds :data:`ROTATE_AT` bytes."""
    path = traceback_file()
    if path.exists() and path.stat().st_size >= ROTATE_AT:
        os.replace(path, path.with_name(path.name + ".1"))
    with open(path, "a", encoding="utf-8") as file:
        file.write(f"--- {datetime.datetime.now().isoformat(timespec='seconds')}, process {os.getpid()}\n")
        file.writelines(tracebacks.format_exception(exctype, value, traceback))
    return path


def _log_in_one_line(exctype, value, traceback, logger=None) -> None:
    if not isinstance(value, ONE_LINE):
        return _log_exc_info(exctype, value, traceback, logger=logger)
    if getattr(value, _LOGGED, False):
        return
    setattr(value, _LOGGED, True)
    path = write_traceback(exctype, value, traceback)
    (logger or logging.getLogger()).error("%s: %s\n(its full traceback: the last in %s)", exctype.__name__, str(value), path)


tango_logging.log_exc_info = _log_in_one_line
