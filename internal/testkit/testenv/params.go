package testenv

import (
	"fmt"
	"net/url"
)

// WithParams returns base with each key of the pairs kv set to its value
// in the query: a key that is there already is replaced, the others are
// added, the rest of base is kept. It panics when base does not parse or
// kv has an odd length, since both are mistakes in the test itself. The
// one helper every test of the module uses to build URLs.
func WithParams(base string, kv ...string) string {
	if len(kv)%2 != 0 {
		panic(fmt.Sprintf("testenv.WithParams: %d arguments after the URL; want key, value pairs", len(kv)))
	}
	u, err := url.Parse(base)
	if err != nil {
		panic(fmt.Sprintf("testenv.WithParams: %v", err))
	}
	q := u.Query()
	for i := 0; i < len(kv); i += 2 {
		q.Set(kv[i], kv[i+1])
	}
	u.RawQuery = q.Encode()
	return u.String()
}
