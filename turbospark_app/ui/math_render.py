"""LaTeX math as images: ziamath (pure Python: LaTeX -> MathML -> SVG paths in its own STIX
math font, no browser engine, no TeX install) drawn by QtSvg.

Why ziamath (measured, README "Transcript rendering"): ~4 MB installed with ziafont and
latex2mathml, ~5 ms a formula; matplotlib's mathtext needs ~100 MB more and ~17 ms a formula.

Rendering is cached by (source, display, colour, size): a transcript re-rendered (palette
change, reasoning opened) or a formula repeated costs a dictionary look-up. A formula ziamath
cannot parse gives None: the caller shows its source.
"""

from __future__ import annotations

import logging
import re
import threading
from collections import OrderedDict
from dataclasses import dataclass

from PySide6.QtCore import QByteArray, QRectF, Qt
from PySide6.QtGui import QImage, QPainter
from PySide6.QtSvg import QSvgRenderer

log = logging.getLogger(__name__)
_CACHE = 512
_VIEWBOX = re.compile(r'viewBox="([-\d.e]+) ([-\d.e]+) ([-\d.e]+) ([-\d.e]+)"')


@dataclass(frozen=True)
class MathImage:
    """One rendered formula: the image (device pixels), its SVG, and where its baseline is
    (from the image's top, in logical pixels)."""

    image: QImage
    svg: str
    baseline: float


class MathRenderer:
    """See the module docstring. `renders` counts real renders (cache misses)."""

    def __init__(self, size: int = _CACHE) -> None:
        self.size = size
        self._cache: OrderedDict[tuple[str, bool, str, float, float], MathImage | None] = OrderedDict()
        self.renders = 0

    def render(self, source: str, *, display: bool, color: str, px: float, dpr: float = 1.0) -> MathImage | None:
        """`source` (LaTeX, no delimiters) at font size `px` in `color` ("#rrggbb"), or None
        when it does not render."""
        key = (source, display, color, px, dpr)
        if key in self._cache:
            self._cache.move_to_end(key)
            return self._cache[key]
        self.renders += 1
        image = _render(source, display, color, px, dpr)
        self._cache[key] = image
        if len(self._cache) > self.size:
            self._cache.popitem(last=False)
        return image


def _render(source: str, display: bool, color: str, px: float, dpr: float) -> MathImage | None:
    try:
        import ziamath

        ziamath.config.svg2 = False  # plain paths: QtSvg (SVG Tiny) draws no <symbol>
        svg = ziamath.Math.fromlatex(source, size=px * (1.2 if display else 1.1), color=color,
                                     inline=not display).svg()
    except Exception as e:  # noqa: BLE001 - a bad formula (ziamath raises anything): show the source
        log.debug("formula %r did not render: %s", source, e)
        return None
    if "<merror" in svg or "merror" in svg:
        return None
    m = _VIEWBOX.search(svg)
    renderer = QSvgRenderer(QByteArray(svg.encode("utf-8")))
    if not renderer.isValid() or m is None:
        return None
    top, width, height = float(m.group(2)), float(m.group(3)), float(m.group(4))
    if width <= 0 or height <= 0:
        return None
    image = QImage(max(1, round(width * dpr)), max(1, round(height * dpr)), QImage.Format.Format_ARGB32_Premultiplied)
    image.fill(Qt.GlobalColor.transparent)
    painter = QPainter(image)
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
    renderer.render(painter, QRectF(0, 0, image.width(), image.height()))
    painter.end()
    image.setDevicePixelRatio(dpr)
    return MathImage(image, svg, -top)


MATH = MathRenderer()
_warm: threading.Thread | None = None


def warm_up() -> threading.Thread:
    """Import ziamath and load its font (~0.3 s, once a process) and the commonest lexers on a
    background thread, so the first formula or code block in a reply does not stall the window."""
    global _warm
    if _warm is None:
        def run() -> None:
            try:
                import ziamath

                ziamath.config.svg2 = False
                ziamath.Math.fromlatex("x^2", size=14).svg()
                from .highlight import lexer_for

                for lang in ("python", "bash", "json"):
                    lexer_for(lang)
            except Exception as e:  # noqa: BLE001 - a warm-up only: the real render reports
                log.debug("math warm-up failed: %s", e)

        _warm = threading.Thread(target=run, name="math-warm-up", daemon=True)
        _warm.start()
    return _warm
