package testenv

import (
	"os"
	"os/exec"
	"testing"
)

// Chromium returns the path of the Chromium (or Chrome) binary that
// browser tests drive: $RELAY_TEST_CHROMIUM, else the first of chromium,
// chromium-browser, google-chrome on PATH. When there is none, it fails
// the test under CI (Required) and skips it otherwise, saying why; the
// README's test command installs Debian's chromium when it runs as root.
func Chromium(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("RELAY_TEST_CHROMIUM"); p != "" {
		path, err := exec.LookPath(p)
		if err != nil {
			t.Fatalf("RELAY_TEST_CHROMIUM=%s: %v", p, err)
		}
		return path
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if path, err := exec.LookPath(name); err == nil {
			return path
		}
	}
	const why = "no chromium, chromium-browser or google-chrome on PATH (Debian: apt-get install chromium; or set RELAY_TEST_CHROMIUM)"
	if Required() {
		t.Fatalf("Chromium is required: %s", why)
	}
	t.Skipf("SKIP: %s", why)
	return ""
}
