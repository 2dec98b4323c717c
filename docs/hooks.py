"""The site's MkDocs hooks (``hooks:`` in mkdocs.yml).

tuner's docstrings cross-reference in reStructuredText roles (``:func:`load_spec```,
``:class:`~tuner.errors.InputError```), which mkdocstrings' Google-style parser leaves as text:
``:func:`` before the code. :func:`on_page_content` turns each into its code, shortened as ``~`` asks,
and into a link when the page documents the name.
"""

from __future__ import annotations

import re

_ROLE = re.compile(r":(?:func|class|meth|mod|data|attr|exc|obj|const):<code>(~?)([\w.]+)</code>")
_ID = re.compile(r'\bid="([A-Za-z_][\w.]*)"')


def on_page_content(html: str, **_: object) -> str:
    """The page's HTML with the docstrings' roles as code (linked where the page has the name's anchor)."""
    if ":<code>" not in html:
        return html
    ids = set(_ID.findall(html))

    def code(match: re.Match) -> str:
        short, name = match.groups()
        text = name.rsplit(".", 1)[-1] if short else name
        found = [i for i in ids if i == name or i.endswith("." + name)]
        return f'<a href="#{found[0]}"><code>{text}</code></a>' if len(found) == 1 else f"<code>{text}</code>"

    return _ROLE.sub(code, html)
