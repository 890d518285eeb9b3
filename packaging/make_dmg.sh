#!/usr/bin/env bash
# The disk image of a built TurboSpark.app: the app and a link to /Applications (dmgbuild, with
# packaging/dmg_settings.py), named after the app's version and architecture.
#
#   packaging/make_dmg.sh [dist/TurboSpark.app]     # -> dist/TurboSpark-<version>-<arch>.dmg
#
# The app is put in the image as it is (signed, stapled or not): sign it first. `make dmg` runs
# packaging/build_macos.sh and then this; CI runs it on the app `make package` built and signed.
#
# Environment:
#   DMG_PYTHON  a Python with dmgbuild installed (default: build/macos-venv/bin/python, which
#               build_macos.sh makes with '.[package]', else .venv/bin/python from `make`)
set -euo pipefail
cd "$(dirname "$0")/.."

[[ "$(uname -s)" == "Darwin" ]] || { echo "make_dmg.sh uses hdiutil and must run on macOS" >&2; exit 1; }

APP="${1:-dist/TurboSpark.app}"
if [[ ! -d "$APP/Contents/MacOS" ]]; then
    echo "$APP is not a built app: run 'make package' or packaging/build_macos.sh first" >&2
    exit 1
fi
if [[ -z "${DMG_PYTHON:-}" ]]; then
    DMG_PYTHON=build/macos-venv/bin/python
    [[ -x "$DMG_PYTHON" ]] || DMG_PYTHON=.venv/bin/python
fi
if ! "$DMG_PYTHON" -c 'import dmgbuild' 2>/dev/null; then
    echo "$DMG_PYTHON has no dmgbuild: pip install '.[package]' on macOS installs it" >&2
    exit 1
fi

VERSION="$(/usr/libexec/PlistBuddy -c 'Print :CFBundleShortVersionString' "$APP/Contents/Info.plist")"
# The architecture of the app's executable (an arm64 Python builds an arm64 app), not the Mac's.
ARCH="$(lipo -archs "$APP/Contents/MacOS/TurboSpark" | tr ' ' '-')"
DMG="dist/TurboSpark-$VERSION-$ARCH.dmg"

rm -f "$DMG"
"$DMG_PYTHON" -m dmgbuild -s packaging/dmg_settings.py -D app="$APP" "TurboSpark $VERSION" "$DMG"
hdiutil verify "$DMG"
du -h "$DMG"
echo "$DMG"
