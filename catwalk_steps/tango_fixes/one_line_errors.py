"""A bad setting or a bad data row printed about 40-70 lines: Tango logs every exception as
"Uncaught exception" with its whole traceback, and the line that says what is wrong and how to
fix it sat near the end. An error that says all there is to say (Tango's ``ConfigurationError``,
and the classes marked with :func:`shown_in_one_line`: a bad data row, a full disk) is now
logged as its one line, and a second line says where its full traceback was written.

Tango 1.3.2 (``tango.common.logging.log_exc_info``, which its excepthook, its steps and its
executor all call through the module). Test: ``tests/test_tango_fixes.py::test_a_bad_setting_and_a_bad_row_print_two_lines``.
"""

import logging
import tempfile
import traceback as tracebacks
from typing import List, Tuple, Type

from tango.common import logging as tango_logging
from tango.common.exceptions import ConfigurationError

_log_exc_info = tango_logging.log_exc_info
#: The exceptions whose message is the whole story.
ONE_LINE: Tuple[Type[BaseException], ...] = (ConfigurationError,)


def shown_in_one_line(cls: Type[BaseException]) -> Type[BaseException]:
    """Marks an exception class whose message names what is wrong and the fix: it is logged as
    that one line (and where its traceback went)."""
    global ONE_LINE
    ONE_LINE = ONE_LINE + (cls,)
    return cls


_logged: List[BaseException] = []  # each once: a step's failure is logged by the step, then by the excepthook


def _log_in_one_line(exctype, value, traceback, logger=None) -> None:
    if not isinstance(value, ONE_LINE):
        return _log_exc_info(exctype, value, traceback, logger=logger)
    if any(value is logged for logged in _logged):
        return
    _logged.append(value)
    with tempfile.NamedTemporaryFile("w", prefix="catwalk-error-", suffix=".txt", delete=False) as file:
        file.writelines(tracebacks.format_exception(exctype, value, traceback))
    (logger or logging.getLogger()).error("%s: %s\n(the full traceback: %s)", exctype.__name__, value, file.name)


tango_logging.log_exc_info = _log_in_one_line
