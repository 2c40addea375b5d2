#!/bin/sh
# Installs what the real-editor tests need; `make test-editors` runs it before them.
#   setup.sh CACHE_DIR CODE_SERVER_VERSION [CLAUDE_CODE_VERSION [CODEX_VERSION [GEMINI_CLI_VERSION]]]
# - Debian packages: chromium (Playwright drives it; no browser download), neovim, ripgrep,
#   strace (test_codex.py and test_gemini.py watch where Codex and Gemini CLI connect), and
#   the build tools code-server's native modules compile with (build-essential, pkg-config,
#   python3, libkrb5-dev). Installed with apt-get when missing (needs root).
# - code-server from npm (it needs Node 20), into CACHE_DIR/code-server-VERSION, once: later runs
#   find it there. Its postinstall downloads ripgrep from GitHub, which may be unreachable: the
#   download cache it looks in first is seeded with Debian's rg.
# - the Claude Code CLI from npm (@anthropic-ai/claude-code, pinned; its native binary comes in
#   an optional dependency of the package) into CACHE_DIR/claude-code-VERSION, once.
# - the Codex CLI from npm (@openai/codex, pinned; its native binary is the optional dependency
#   @openai/codex-linux-x64 or -arm64, an alias of @openai/codex@VERSION-linux-ARCH) into
#   CACHE_DIR/codex-VERSION, once.
# - the Gemini CLI from npm (@google/gemini-cli, pinned; it needs Node >= 20) into
#   CACHE_DIR/gemini-cli-VERSION, once.
# It does not stop at the first failure: it installs what it can and says what it could not.
# The tests then fail with what is missing.
set -u

cache=$1
version=$2
claude_version=${3:-}
codex_version=${4:-}
gemini_version=${5:-}
status=0
say() { echo "setup.sh: $*" >&2; }

# -- Debian packages ---------------------------------------------------------------------------
missing=""
for pkg in chromium neovim ripgrep strace build-essential pkg-config python3 libkrb5-dev; do
  dpkg-query -W -f '${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing="$missing $pkg"
done
if [ -n "$missing" ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    say "installing$missing"
    if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing; } >&2; then
      say "apt-get could not install$missing"
      status=1
    fi
  else
    say "missing Debian packages:$missing (install them as root: apt-get install$missing)"
    status=1
  fi
fi

# npm_cli DIR PACKAGE@VERSION BIN: installs an npm CLI into DIR once (DIR/.installed marks it
# done) and checks that DIR/node_modules/.bin/BIN runs.
npm_cli() {
  if [ -f "$1/.installed" ]; then
    return 0
  fi
  rm -rf "$1"
  mkdir -p "$1"
  echo '{"private": true}' >"$1/package.json"
  say "installing $2 with npm into $1"
  if (cd "$1" && npm_config_cache="$cache/npm" npm install --no-audit --no-fund --no-save \
      --loglevel=error "$2" >&2) &&
    "$1/node_modules/.bin/$3" --version >/dev/null 2>&1; then
    touch "$1/.installed"
  else
    say "npm could not install $2 (see above)"
    status=1
  fi
}

# -- Claude Code CLI --------------------------------------------------------------------------
# tests/editors/test_claude_code.py runs it against tests/emulator, offline.
if [ -n "$claude_version" ]; then
  npm_cli "$cache/claude-code-$claude_version" "@anthropic-ai/claude-code@$claude_version" claude
fi

# -- Codex CLI ---------------------------------------------------------------------------------
# tests/editors/test_codex.py runs `codex exec` against tests/emulator's Responses API, offline.
if [ -n "$codex_version" ]; then
  npm_cli "$cache/codex-$codex_version" "@openai/codex@$codex_version" codex
fi

# -- Gemini CLI --------------------------------------------------------------------------------
# tests/editors/test_gemini.py runs `gemini -p` against tests/emulator's Gemini API, offline.
if [ -n "$gemini_version" ]; then
  node_major=$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)
  if [ "$node_major" -ge 20 ] 2>/dev/null; then
    npm_cli "$cache/gemini-cli-$gemini_version" "@google/gemini-cli@$gemini_version" gemini
  else
    say "@google/gemini-cli@$gemini_version needs Node.js 20 or later (found: $node_major)"
    status=1
  fi
fi

# -- code-server -------------------------------------------------------------------------------
dir="$cache/code-server-$version"
if [ -f "$dir/.installed" ]; then
  exit $status
fi
node_major=$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo none)
if [ "$node_major" != 20 ]; then
  say "code-server $version needs Node.js 20 and npm (found: $node_major); install Node 20"
  exit 1
fi
if ! command -v rg >/dev/null; then
  say "ripgrep (rg) is missing: apt-get install ripgrep"
  exit 1
fi
# What code-server $version's lib/vscode depends on: @vscode/ripgrep 1.15.11, which fetches
# ripgrep release v13.0.0-10 into $TMPDIR/vscode-ripgrep-cache-1.15.11 unless the file is there.
case "$(uname -m)" in
  x86_64) target=x86_64-unknown-linux-musl ;;
  aarch64) target=aarch64-unknown-linux-musl ;;
  *) say "no ripgrep seed for $(uname -m)"; exit 1 ;;
esac
rm -rf "$dir"
mkdir -p "$dir/tmp/vscode-ripgrep-cache-1.15.11" "$dir/tmp/rg"
cp "$(command -v rg)" "$dir/tmp/rg/rg"
tar czf "$dir/tmp/vscode-ripgrep-cache-1.15.11/ripgrep-v13.0.0-10-$target.tar.gz" -C "$dir/tmp/rg" rg
echo '{"private": true}' >"$dir/package.json"
# node-gyp builds against the headers installed beside node when there are some (it would
# download them otherwise).
headers="$(dirname "$(dirname "$(command -v node)")")"
if [ -f "$headers/include/node/node.h" ]; then
  export npm_config_nodedir="$headers"
fi
say "installing code-server $version with npm into $dir"
if (cd "$dir" &&
  TMPDIR="$dir/tmp" npm_config_unsafe_perm=true npm_config_yes=true npm_config_cache="$cache/npm" \
    npm install --no-audit --no-fund --no-save --loglevel=error "code-server@$version" >&2) &&
  [ -x "$dir/node_modules/.bin/code-server" ]; then
  rm -rf "$dir/tmp"
  touch "$dir/.installed"
else
  say "npm could not install code-server $version (see above)"
  status=1
fi
exit $status
