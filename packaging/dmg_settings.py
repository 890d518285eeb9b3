# dmgbuild settings for TurboSpark's disk image: the app and a link to /Applications to drag it
# onto. packaging/make_dmg.sh runs it as
#     python -m dmgbuild -s packaging/dmg_settings.py -D app=dist/TurboSpark.app "TurboSpark 0.1.0" out.dmg
# dmgbuild executes this file with `defines` (the -D values) in scope; every name it reads is a
# dmgbuild setting (see its documentation's "Settings" page).
import os.path

application = defines.get("app", "dist/TurboSpark.app")  # noqa: F821 - dmgbuild provides `defines`
app_name = os.path.basename(application)

format = "UDZO"  # compressed (zlib), read-only: opens on every macOS the app supports
filesystem = "HFS+"
files = [application]
symlinks = {"Applications": "/Applications"}

# One Finder window: the app on the left, Applications on the right.
default_view = "icon-view"
show_status_bar = False
show_toolbar = False
show_sidebar = False
window_rect = ((200, 120), (600, 340))
icon_size = 128
text_size = 13
icon_locations = {app_name: (150, 150), "Applications": (450, 150)}
