package bridge

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/go-relay/relay"
)

// EndpointStatus is the result of checking one endpoint of a route.
type EndpointStatus struct {
	Route string
	End   string // "source", "destination" or "poison"
	URL   string // redacted
	Topic string
	// Err is nil when the endpoint could be opened and reported a usable
	// connection.
	Err     error
	Elapsed time.Duration
}

// Check opens every endpoint of cfg (the source as a subscriber of the
// route's group, the destination and poison URLs as publishers), asks it for
// its health where the adapter reports one, and closes it. It subscribes to
// nothing, provisions nothing and publishes nothing. Endpoints are checked
// concurrently; ctx bounds the whole check. cfg must be valid.
func Check(ctx context.Context, cfg Config) []EndpointStatus {
	cfg = cfg.withDefaults()
	var out []EndpointStatus
	type job struct {
		st  *EndpointStatus
		url string
		sub bool
	}
	var jobs []job
	for _, r := range cfg.Routes {
		out = append(out,
			EndpointStatus{Route: r.Name, End: "source", URL: relay.Redact(r.From.URL), Topic: r.From.Topic},
			EndpointStatus{Route: r.Name, End: "destination", URL: relay.Redact(r.To.URL), Topic: r.To.Topic})
		if r.Poison != nil {
			out = append(out, EndpointStatus{Route: r.Name, End: "poison", URL: relay.Redact(r.Poison.URL), Topic: r.Poison.Topic})
		}
	}
	i := 0
	for _, r := range cfg.Routes {
		jobs = append(jobs, job{&out[i], sourceURL(r.From), true}, job{&out[i+1], r.To.URL, false})
		i += 2
		if r.Poison != nil {
			jobs = append(jobs, job{&out[i], r.Poison.URL, false})
			i++
		}
	}
	var wg sync.WaitGroup
	for _, j := range jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			j.st.Err = checkEndpoint(ctx, j.url, j.sub)
			j.st.Elapsed = time.Since(start)
		}()
	}
	wg.Wait()
	return out
}

func checkEndpoint(ctx context.Context, url string, sub bool) error {
	var (
		c   interface{ Close() error }
		err error
	)
	if sub {
		c, err = relay.OpenSubscriber(ctx, url)
	} else {
		c, err = relay.OpenPublisher(ctx, url)
	}
	if err != nil {
		return err
	}
	defer c.Close()
	if h, ok := c.(relay.HealthChecker); ok {
		// Some adapters connect in the background: give them until ctx
		// ends to report a usable connection.
		for {
			err := h.Health()
			if err == nil {
				return nil
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("not healthy: %w", err)
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	return nil
}
