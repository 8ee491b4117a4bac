package cloudevents

import (
	"testing"
	"unicode/utf8"
)

// FuzzPercent: every UTF-8 string survives percentEncode and headerDecode
// byte-exact, and the encoded form is printable ASCII without space, '"'
// or a '%' that does not start an escape; headerDecode never panics.
func FuzzPercent(f *testing.F) {
	for _, s := range []string{"", "plain", "a b", `"quoted"`, "100%", "Euro € 😀", "\x00\x7f", "%41"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		_, _ = headerDecode(s) // any input: an error or a value, no panic
		if !utf8.ValidString(s) {
			return
		}
		e := percentEncode(s)
		for i := 0; i < len(e); i++ {
			c := e[i]
			if c <= ' ' || c >= 0x7f || c == '"' {
				t.Fatalf("percentEncode(%q) = %q has byte %#x", s, e, c)
			}
			if c == '%' && (i+2 >= len(e) || !isHex(e[i+1]) || !isHex(e[i+2])) {
				t.Fatalf("percentEncode(%q) = %q has a bare %%", s, e)
			}
		}
		d, err := headerDecode(e)
		if err != nil || d != s {
			t.Fatalf("headerDecode(percentEncode(%q)) = %q, %v", s, d, err)
		}
	})
}

func isHex(c byte) bool { _, ok := unhex(c); return ok }
