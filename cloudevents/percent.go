package cloudevents

import (
	"errors"
	"strings"
	"unicode/utf8"
)

// percentEncode writes s as the NATS binding asks of header values: every
// byte of space, '"', '%', and of any character outside printable ASCII
// (U+0021-U+007E) as %XY in upper-case hex; the result is printable ASCII.
func percentEncode(s string) string {
	n := 0
	for i := 0; i < len(s); i++ {
		if needsEscape(s[i]) {
			n++
		}
	}
	if n == 0 {
		return s
	}
	const hex = "0123456789ABCDEF"
	b := make([]byte, 0, len(s)+2*n)
	for i := 0; i < len(s); i++ {
		c := s[i]
		if needsEscape(c) {
			b = append(b, '%', hex[c>>4], hex[c&0xf])
		} else {
			b = append(b, c)
		}
	}
	return string(b)
}

func needsEscape(c byte) bool { return c <= ' ' || c >= 0x7f || c == '"' || c == '%' }

// headerDecode reverses percentEncode, as the NATS binding asks of a
// receiver: a value in double quotes is unquoted first (backslash escapes
// included), then percent-decoded once (either hex case); the result must
// be valid UTF-8.
func headerDecode(v string) (string, error) {
	if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
		var b strings.Builder
		inner := v[1 : len(v)-1]
		for i := 0; i < len(inner); i++ {
			c := inner[i]
			if c == '\\' {
				if i+1 == len(inner) {
					return "", errors.New("quoted value ends in a backslash")
				}
				i++
				c = inner[i]
			}
			b.WriteByte(c)
		}
		v = b.String()
	}
	if strings.IndexByte(v, '%') < 0 {
		if !utf8.ValidString(v) {
			return "", errors.New("value is not valid UTF-8")
		}
		return v, nil
	}
	b := make([]byte, 0, len(v))
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c != '%' {
			b = append(b, c)
			continue
		}
		if i+2 >= len(v) {
			return "", errors.New("truncated percent-encoding")
		}
		hi, ok1 := unhex(v[i+1])
		lo, ok2 := unhex(v[i+2])
		if !ok1 || !ok2 {
			return "", errors.New("invalid percent-encoding " + v[i:i+3])
		}
		b = append(b, hi<<4|lo)
		i += 2
	}
	if !utf8.Valid(b) {
		return "", errors.New("percent-decoded value is not valid UTF-8")
	}
	return string(b), nil
}

func unhex(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}
