package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/internal/testenv"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The router example, unchanged, on mem://, redis:// and amqp://: every
// word comes out upper-cased exactly once, the ones that failed once
// included (Retry), each with a correlation ID.
func TestRouterExample(t *testing.T) {
	for name, broker := range map[string]func(t testing.TB) string{
		"memory": func(testing.TB) string { return "mem://router-test" },
		"redis":  testenv.Redis,
		"amqp":   testenv.AMQP,
	} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			var out bytes.Buffer
			const n = 12
			if err := run(ctx, broker(t), relay.NewID()[24:], n, &out, io.Discard); err != nil {
				t.Fatal(err)
			}
			var words []string
			for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
				w, corr, ok := strings.Cut(line, " (correlation ")
				if !ok || len(corr) != 9 {
					t.Errorf("line %q has no correlation ID", line)
				}
				words = append(words, w)
			}
			sort.Strings(words)
			var want []string
			for i := 0; i < n; i++ {
				want = append(want, fmt.Sprintf("WORD-%02d", i))
			}
			if strings.Join(words, ",") != strings.Join(want, ",") {
				t.Errorf("printed %v, want %v", words, want)
			}
		})
	}
}
