package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-relay/relay"
)

// TestDocsListEveryScheme checks that the lists of URL schemes people read
// name every scheme this binary registers (it imports every adapter of the
// module): the package doc (go doc relay), the bridge doc's list and the
// README's URL table. The lists in error messages are built from
// relay.Schemes at run time and need no such test.
func TestDocsListEveryScheme(t *testing.T) {
	root := filepath.Join("..", "..")
	for _, doc := range []struct{ file, from, to string }{
		{"doc.go", "The adapters of this module", "[Schemes]"},
		{"docs/bridge.md", "The binary registers every adapter", "## What a route guarantees"},
		{"README.md", "| URL | Backend |", "\n## "},
	} {
		b, err := os.ReadFile(filepath.Join(root, doc.file))
		if err != nil {
			t.Fatal(err)
		}
		text := string(b)
		i := strings.Index(text, doc.from)
		if i < 0 {
			t.Fatalf("%s: %q not found", doc.file, doc.from)
		}
		text = text[i:]
		if j := strings.Index(text, doc.to); j >= 0 {
			text = text[:j]
		}
		for _, s := range relay.Schemes() {
			if !strings.Contains(text, s+"://") {
				t.Errorf("%s: the list after %q does not name %s://", doc.file, doc.from, s)
			}
		}
	}
}

// The mem:// refusal's hint names every broker scheme of the binary, and
// not mem:// itself.
func TestInProcessHintListsBrokers(t *testing.T) {
	hint := brokerSchemes()
	for _, s := range relay.Schemes() {
		if got := strings.Contains(hint, s+"://"); got == isInProcess(s+"://") {
			t.Errorf("hint %q: naming %s:// is %v", hint, s, got)
		}
	}
}
