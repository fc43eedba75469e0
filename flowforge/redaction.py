"""Secrets kept out of what FlowForge prints and logs: a URL's password is shown as ***.

Found without parsing the URL (which may be the very thing that is malformed), in any
text: a message, a field, an exception's traceback.
"""

from __future__ import annotations

import re

#: ``scheme://user:password@`` (the password up to the last ``@`` before the host), and a
#: libpq key/value ``password=...``.
_URL_PASSWORD = re.compile(r"(://[^:/@\s]*:)[^\s/]*@")
_KEYWORD_PASSWORD = re.compile(r"(\bpassword\s*=\s*)('[^']*'|\S+)", re.IGNORECASE)
MASK = "***"


def redacted(text: str) -> str:
    """``text`` with every URL's password (and libpq ``password=``) replaced by ***."""
    if "://" not in text and "password" not in text.lower():
        return text
    text = _URL_PASSWORD.sub(rf"\1{MASK}@", text)
    return _KEYWORD_PASSWORD.sub(rf"\1{MASK}", text)
