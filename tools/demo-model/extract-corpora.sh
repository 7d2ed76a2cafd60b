#!/usr/bin/env bash
# Re-creates the public-domain corpora under data/ from Debian packages (see data/README.md for
# provenance and licences). The recipe itself reads only data/; this script documents, and can
# repeat, how those files were made. Needs root (apt-get) once; writes only data/.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
DATA="$ROOT/data"
mkdir -p "$DATA"

# King James Bible: the `bible` program of bible-kjv prints every verse, one per line at -l0.
if ! command -v bible >/dev/null; then apt-get install -y bible-kjv bible-kjv-text; fi
bible -l0 'gen1:1-rev22:21' | sed -e 's/^ *//' >"$DATA/kjv.txt"

# The Devil's Dictionary: dict-devil ships it as a dictd database (devil.index + devil.dict.dz).
# Only the package's files are needed, not the dictd server it depends on.
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
(cd "$TMP" && apt-get download dict-devil >/dev/null)
dpkg -x "$TMP"/dict-devil_*.deb "$TMP/x"
/usr/bin/python3 "$ROOT/tools/demo-model/dictd_to_text.py" \
  "$TMP/x/usr/share/dictd/devil.index" "$TMP/x/usr/share/dictd/devil.dict.dz" >"$DATA/devils-dictionary.txt"

# Tiny Shakespeare comes from the team's shared data folder (char-rnn's input.txt).
if [ -f "$ROOT/../shared/data/tinyshakespeare.txt" ]; then
  cp "$ROOT/../shared/data/tinyshakespeare.txt" "$DATA/tinyshakespeare.txt"
fi
sha256sum "$DATA"/*.txt
