"""A conversation as one HTML file that looks like the window: the transcript's own document
(its colours inline: code colours, tints, tables) with each formula's SVG embedded as a data
URI, each image thumbnail as a PNG one, and the app's own links (Copy, Edit, ts:...) taken out."""

from __future__ import annotations

import base64
import html
import re
from dataclasses import replace

from PySide6.QtGui import QPalette

from .message_media import thumb_sources
from ..pane.transcript import Entry, Transcript

_APP_LINK = re.compile(r'<a href="ts:[^"]*">(.*?)</a>', re.S)


def conversation_html(title: str, entries: list[Entry], palette: QPalette) -> str:
    """The HTML of `entries` drawn as the transcript draws them in `palette`."""
    view = Transcript()
    view.setPalette(palette)
    view.resize(900, 700)
    view.set_entries([replace(e, actions=(), variant=(1, 1)) for e in entries])
    view.finish_colours()
    text = view.document().toHtml()
    for name, svg in view.formula_svgs().items():
        data = base64.b64encode(svg.encode("utf-8")).decode("ascii")
        text = text.replace(f'src="{name}"', f'src="data:image/svg+xml;base64,{data}"')
    for name, uri in thumb_sources(entries).items():  # a user message's images
        text = text.replace(f'src="{name}"', f'src="{uri}"')
    text = _APP_LINK.sub(lambda m: "" if "Copy" in m.group(1) else m.group(1), text)
    base = palette.color(QPalette.ColorRole.Base).name()
    ink = palette.color(QPalette.ColorRole.Text).name()
    text = text.replace("<head>", f"<head><title>{html.escape(title)}</title>", 1)
    text = re.sub(r"<body([^>]*)>", rf'<body\1 bgcolor="{base}" text="{ink}">', text, count=1)
    view.deleteLater()
    return text
