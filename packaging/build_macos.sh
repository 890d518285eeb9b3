#!/usr/bin/env bash
# Build TurboSpark.app on macOS: venv, model, icon, PyInstaller, codesign, verify, self-test.
#
#   packaging/build_macos.sh                      # ad-hoc signed dist/TurboSpark.app + .zip
#   CODESIGN_IDENTITY="Developer ID Application: Your Name (TEAMID)" \
#   NOTARY_PROFILE=turbospark-notary packaging/build_macos.sh     # signed, notarized, stapled
#
# Environment:
#   PYTHON             the Python to build with (3.11+; default python3). Its architecture is the
#                      app's: an arm64 Python builds an Apple-silicon app, an x86_64 one an Intel app.
#   VENV               the build venv (default build/macos-venv; reused when present)
#   CODESIGN_IDENTITY  "-" (default) signs ad hoc; a "Developer ID Application: ..." identity
#                      signs for distribution, with the hardened runtime and a secure timestamp
#   NOTARY_PROFILE     a `xcrun notarytool store-credentials` profile: notarize and staple
#   SELF_TEST_QPA      the Qt platform for the self-test (default: cocoa, the real one; set
#                      "offscreen" on a machine without a GUI session)
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ "$(uname -s)" != "Darwin" ]]; then
    echo "build_macos.sh builds the macOS .app and must run on macOS (use 'make package' on Linux)" >&2
    exit 1
fi

PYTHON="${PYTHON:-python3}"
VENV="${VENV:-build/macos-venv}"
IDENTITY="${CODESIGN_IDENTITY:--}"
APP="dist/TurboSpark.app"
ICONS="build/icons"
step() { printf '\n==> %s\n' "$*"; }

step "venv ($VENV) with .[package]"
"$PYTHON" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "TurboSpark needs Python 3.11 or newer")'
[[ -x "$VENV/bin/python" ]] || "$PYTHON" -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet --upgrade pip
# llama-cpp-python compiles llama.cpp here (a few minutes, once: pip caches the wheel), with Metal
# and portable CPU code (a native build on an M3 can use instructions an M1 lacks).
ARCH="$("$PYTHON" -c 'import platform; print(platform.machine())')"
CMAKE_ARGS="${CMAKE_ARGS:--DLLAVA_BUILD=OFF -DGGML_NATIVE=OFF -DGGML_METAL=ON -DGGML_METAL_EMBED_LIBRARY=ON -DCMAKE_OSX_ARCHITECTURES=$ARCH}" \
    "$VENV/bin/python" -m pip install --quiet '.[package]'

step "default model (fetched once, verified by sha256)"
"$VENV/bin/turbospark" model fetch

step "icon: resources/icon.png -> $ICONS/TurboSpark.icns"
rm -rf "$ICONS/TurboSpark.iconset"
mkdir -p "$ICONS"
"$VENV/bin/python" packaging/make_icons.py --iconset "$ICONS/TurboSpark.iconset"
if command -v iconutil >/dev/null; then
    iconutil --convert icns --output "$ICONS/TurboSpark.icns" "$ICONS/TurboSpark.iconset"
else
    "$VENV/bin/python" packaging/make_icons.py --icns "$ICONS/TurboSpark.icns"
fi

step "PyInstaller"
start=$(date +%s)
TURBOSPARK_ICNS="$PWD/$ICONS/TurboSpark.icns" "$VENV/bin/python" -m PyInstaller --noconfirm \
    --workpath build/pyinstaller --distpath dist packaging/turbospark.spec
echo "built in $(( $(date +%s) - start )) s"

step "codesign ($([[ "$IDENTITY" == "-" ]] && echo "ad hoc" || echo "$IDENTITY"))"
# Extended attributes (quarantine, Finder info) make codesign fail with "resource fork ... not allowed".
xattr -cr "$APP"
if [[ "$IDENTITY" == "-" ]]; then
    codesign --force --deep --sign - "$APP"
else
    codesign --force --deep --options runtime --timestamp \
        --entitlements packaging/entitlements.plist --sign "$IDENTITY" "$APP"
fi
codesign --verify --deep --strict --verbose=2 "$APP"
codesign --display --verbose=2 "$APP" 2>&1 | grep -E '^(Identifier|Format|Authority|Signature|Runtime)' || true

step "Info.plist"
for key in CFBundleIdentifier CFBundleShortVersionString LSMinimumSystemVersion NSHighResolutionCapable CFBundleIconFile; do
    printf '  %-28s %s\n' "$key" "$(/usr/libexec/PlistBuddy -c "Print :$key" "$APP/Contents/Info.plist")"
done

step "LSMinimumSystemVersion covers every bundled binary"
"$VENV/bin/python" packaging/macho.py "$APP"

step "self-test inside the bundle"
QT_QPA_PLATFORM="${SELF_TEST_QPA:-cocoa}" "$APP/Contents/MacOS/TurboSpark" --self-test

VERSION="$(/usr/libexec/PlistBuddy -c 'Print :CFBundleShortVersionString' "$APP/Contents/Info.plist")"
ZIP="dist/TurboSpark-$VERSION-macos-$(uname -m).zip"
step "archive $ZIP"
rm -f "$ZIP"
ditto -c -k --sequesterRsrc --keepParent "$APP" "$ZIP"

if [[ -n "${NOTARY_PROFILE:-}" ]]; then
    if [[ "$IDENTITY" == "-" ]]; then
        echo "notarization needs a Developer ID identity (CODESIGN_IDENTITY), not ad-hoc signing" >&2
        exit 1
    fi
    step "notarize ($NOTARY_PROFILE) and staple"
    xcrun notarytool submit "$ZIP" --keychain-profile "$NOTARY_PROFILE" --wait
    xcrun stapler staple "$APP"
    xcrun stapler validate "$APP"
    spctl --assess --type execute --verbose=2 "$APP"
    rm -f "$ZIP"
    ditto -c -k --sequesterRsrc --keepParent "$APP" "$ZIP"  # re-zip with the stapled ticket
fi

step "done"
du -sh "$APP"
echo "$APP"
echo "$ZIP"
