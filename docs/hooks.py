"""MkDocs hook: the docstrings' Sphinx roles read as plain code on the site.

The docstrings name objects the Sphinx way (``:class:`~poetsim.schedule.Schedule```), which
mkdocstrings renders as the role's text followed by the code. The role is dropped and, as
Sphinx does for a leading ``~``, only the last component of the name is kept.
"""

from __future__ import annotations

import re
from typing import Any

_ROLE = re.compile(r":(?:class|func|meth|mod|attr|data|exc|obj):\s*<code>(~?)([^<]*)</code>")


def _plain(match: re.Match[str]) -> str:
    short, name = match.group(1), match.group(2)
    return f"<code>{name.rsplit('.', 1)[-1] if short else name}</code>"


def on_page_content(html: str, **_kwargs: Any) -> str:
    return _ROLE.sub(_plain, html)
