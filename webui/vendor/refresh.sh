#!/usr/bin/env bash
# Refresh the vendored wavesurfer.js (the Listen screen's waveform) from the npm registry: the release named
# below, checked against the registry's integrity hash, its two browser modules and its licence copied as they
# are. Run from anywhere; needs npm. Bump VERSION and INTEGRITY together (`npm view wavesurfer.js@X dist.integrity`).
set -euo pipefail
VERSION=7.12.12
INTEGRITY=sha512-fyKNuREQTliCl4b9w7pUzpFXQIkX5tcdYu1o6vBdH+NlUXvTxshvfbG2hj8OxDevzQNZlDTHzZGyAT3FhuutWw==
here="$(cd "$(dirname "$0")" && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cd "$work"
npm pack --silent "wavesurfer.js@$VERSION" > /dev/null
actual="sha512-$(openssl dgst -sha512 -binary "wavesurfer.js-$VERSION.tgz" | base64 -w0)"
[ "$actual" = "$INTEGRITY" ] || { echo "integrity mismatch: $actual" >&2; exit 1; }
tar xzf "wavesurfer.js-$VERSION.tgz"
cp package/dist/wavesurfer.esm.js package/dist/plugins/regions.esm.js package/LICENSE "$here/wavesurfer/"
echo "$VERSION" > "$here/wavesurfer/VERSION"
echo "wavesurfer.js $VERSION vendored in $here/wavesurfer"
