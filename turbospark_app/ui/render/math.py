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

from ..services.ahead import AheadWorker

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


SvgKey = tuple[str, bool, str, float]  # (source, display, colour, px)


class MathRenderer:
    """See the module docstring. `renders` counts the SVGs made on the calling (GUI) thread,
    `prefetched` those made ahead on the worker thread."""

    def __init__(self, size: int = _CACHE) -> None:
        self.size = size
        self._cache: OrderedDict[tuple[str, bool, str, float, float], MathImage | None] = OrderedDict()
        self._svgs: dict[SvgKey, str | None] = {}  # made by either thread (under _lock)
        self._lock = threading.Lock()
        self._worker = AheadWorker("math")
        self.renders = 0
        self.prefetched = 0

    def prefetch(self, source: str, *, display: bool, color: str, px: float) -> None:
        """Make the formula's SVG on a worker thread (ziamath is pure Python: the GUI thread
        keeps painting meanwhile), for a `render` to come: a streaming reply's formulas are
        sent here as their paragraphs end, so the reply's final rendering finds them made."""
        key = (source, display, color, px)
        self._worker.submit(key, lambda: self._made(key), lambda: self._make_svg(key, True))

    def ready(self, source: str, *, display: bool, color: str, px: float) -> bool:
        """True when `render` would find the formula's SVG made (no ziamath on this thread)."""
        return self._made((source, display, color, px))

    def _made(self, key: SvgKey) -> bool:
        with self._lock:
            return key in self._svgs

    def _make_svg(self, key: SvgKey, ahead: bool) -> str | None:
        svg = _svg(*key)
        with self._lock:
            self._svgs[key] = svg
            if len(self._svgs) > 4 * self.size:
                self._svgs.pop(next(iter(self._svgs)))
            if ahead:
                self.prefetched += 1
        return svg

    def render(self, source: str, *, display: bool, color: str, px: float, dpr: float = 1.0) -> MathImage | None:
        """`source` (LaTeX, no delimiters) at font size `px` in `color` ("#rrggbb"), or None
        when it does not render."""
        key = (source, display, color, px, dpr)
        if key in self._cache:
            self._cache.move_to_end(key)
            return self._cache[key]
        with self._lock:
            made = (source, display, color, px) in self._svgs
            svg = self._svgs.get((source, display, color, px))
        if not made:  # (one still being made ahead is made again here: no waiting on the worker)
            self.renders += 1
            svg = self._make_svg((source, display, color, px), False)
        image = None if svg is None else _image(svg, dpr)
        self._cache[key] = image
        if len(self._cache) > self.size:
            self._cache.popitem(last=False)
        return image


def _svg(source: str, display: bool, color: str, px: float) -> str | None:
    """The formula's SVG (None: ziamath cannot parse it). Pure Python: any thread."""
    try:
        import ziamath

        ziamath.config.svg2 = False  # plain paths: QtSvg (SVG Tiny) draws no <symbol>
        svg = ziamath.Math.fromlatex(source, size=px * (1.25 if display else 1.2), color=color,
                                     inline=not display).svg()
    except Exception as e:  # noqa: BLE001 - a bad formula (ziamath raises anything): show the source
        log.debug("formula %r did not render: %s", source, e)
        return None
    return None if "merror" in svg else svg


def _image(svg: str, dpr: float) -> MathImage | None:
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
    """Import ziamath, load its font and draw a formula (~0.4 s, once a process), and compile the
    commonest lexers' rules (~0.1 s each), on a background thread: the first reply with math or
    code then does not stall the window."""
    global _warm
    if _warm is None:
        def run() -> None:
            try:
                svg = _svg("\\frac{a^2}{\\sqrt{b}} = \\sum_{k=1}^{n} x_k", True, "#000000", 14.0)
                if svg is not None:
                    _image(svg, 1.0)
                from .highlight import lexer_for

                for lang in ("python", "bash", "json", "javascript", "c", "cpp", "rust", "go", "html"):
                    for _ in lexer_for(lang).get_tokens_unprocessed("x = 1  # a\n"):
                        pass
            except Exception as e:  # noqa: BLE001 - a warm-up only: the real render reports
                log.debug("warm-up failed: %s", e)

        _warm = threading.Thread(target=run, name="render-warm-up", daemon=True)
        _warm.start()
    return _warm
