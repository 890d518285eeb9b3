"""Media a model takes in besides text: images decoded with Qt's QImage (no window, no ffmpeg),
checked before anything native sees them, scaled to a projector's limits.
May import: engine, host.

    images       bytes / a file / a data: URL -> ImageInput (RGB pixels, sha256 id), or ImageError
    image_store  the window's images kept with conversations, content-addressed by sha256
"""
