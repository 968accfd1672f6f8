#!/usr/bin/env bash
# hack/screenshot.sh PAGE.html OUT.png [WIDTH,HEIGHT]: renders a local page in headless Chromium
# with the network shut off (every host resolves to nothing, every request goes to a closed
# proxy) and writes a PNG of it. The replay report test uses it, and docs/replay.md says how the
# picture in docs/ was made with it. `make tools` installs Chromium's headless shell when it is
# missing (Debian: chromium-headless-shell).
set -euo pipefail
page=${1:?usage: hack/screenshot.sh PAGE.html OUT.png [WIDTH,HEIGHT]}
out=${2:?usage: hack/screenshot.sh PAGE.html OUT.png [WIDTH,HEIGHT]}
size=${3:-1280,1560}
browser=$(command -v chromium-headless-shell || command -v chromium || true)
if [ -z "$browser" ]; then
  echo "screenshot: no headless Chromium here: run make tools (it installs chromium-headless-shell with apt-get), or install it" >&2
  exit 1
fi
profile=$(mktemp -d)
trap 'rm -rf "$profile"' EXIT
# Chromium logs its sandbox and D-Bus complaints on stderr even when it works: keep them for a
# failure only.
if ! "$browser" --headless --no-sandbox --disable-gpu --hide-scrollbars --no-first-run \
  --user-data-dir="$profile" --proxy-server=127.0.0.1:9 --host-resolver-rules='MAP * ~NOTFOUND' \
  --window-size="$size" --screenshot="$out" "file://$(realpath "$page")" >"$profile/log" 2>&1; then
  cat "$profile/log" >&2
  exit 1
fi
[ -s "$out" ] || { cat "$profile/log" >&2; echo "screenshot: $browser wrote no picture" >&2; exit 1; }
