# deps.sh — sourced by the integration scripts that drive a browser
# (tests/integration/html.sh, html_story.sh): `browser_deps` checks node,
# npm and Debian's chromium are there and installs playwright-core, pinned
# by tests/browser/package-lock.json, into $B/browser with `npm ci` (the
# registry is used here, at setup, never by a page); again only when the
# lock file changed. Prints why and returns 1 when something is missing.
BROWSER_DIR=$B/browser
browser_deps() {
    command -v node > /dev/null || { echo "  node is not installed (scripts/deps.sh installs nodejs)" >&2; return 1; }
    command -v npm > /dev/null || { echo "  npm is not installed (scripts/deps.sh installs npm)" >&2; return 1; }
    command -v chromium > /dev/null || { echo "  chromium is not installed (scripts/deps.sh installs it)" >&2; return 1; }
    mkdir -p "$BROWSER_DIR" || return 1
    if cmp -s tests/browser/package-lock.json "$BROWSER_DIR/package-lock.json" && [ -d "$BROWSER_DIR/node_modules/playwright-core" ]; then
        return 0
    fi
    cp tests/browser/package.json tests/browser/package-lock.json "$BROWSER_DIR/" &&
        (cd "$BROWSER_DIR" && npm ci --no-audit --no-fund --loglevel=error > npm.log 2>&1) ||
        { echo "  npm ci failed (is the npm registry reachable?):" >&2; sed 's/^/    /' "$BROWSER_DIR/npm.log" >&2; rm -f "$BROWSER_DIR/package-lock.json"; return 1; }
}
