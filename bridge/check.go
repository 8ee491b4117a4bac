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
	Err error
	// Groups is, for a destination or poison endpoint that could be
	// opened, what its publisher's relay.GroupChecker answered for Topic:
	// nil when a message published now would reach a group, an error
	// matching relay.ErrNoGroup when it would reach none (the route
	// would fail every publish, or lose what it forwards), one wrapping
	// relay.ErrNotSupported when the broker cannot tell, another when
	// the check failed. Always nil for a source.
	Groups  error
	Elapsed time.Duration
}

// Check opens every endpoint of cfg (the source as a subscriber of the
// route's group, the destination and poison URLs as publishers), asks it for
// its health where the adapter reports one, asks the publishers whether
// their topic has a group (relay.GroupChecker, see EndpointStatus.Groups),
// and closes it. It subscribes to nothing, provisions nothing and
// publishes nothing. Endpoints are checked concurrently; ctx bounds the
// whole check. cfg must be valid.
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
			j.st.Err, j.st.Groups = checkEndpoint(ctx, j.url, j.st.Topic, j.sub)
			j.st.Elapsed = time.Since(start)
		}()
	}
	wg.Wait()
	return out
}

// checkEndpoint opens url, as a subscriber when sub, waits for its health,
// and for a publisher asks whether topic has a group (see
// EndpointStatus.Groups).
func checkEndpoint(ctx context.Context, url, topic string, sub bool) (err, groups error) {
	var c interface{ Close() error }
	if sub {
		c, err = relay.OpenSubscriber(ctx, url)
	} else {
		c, err = relay.OpenPublisher(ctx, url)
	}
	if err != nil {
		return err, nil
	}
	defer c.Close()
	if err := waitHealthy(ctx, c); err != nil {
		return err, nil
	}
	if gc, ok := c.(relay.GroupChecker); ok && !sub {
		return nil, gc.CheckGroups(ctx, topic)
	}
	return nil, nil
}

// waitHealthy returns nil once c reports a usable connection
// (relay.HealthChecker; at once for an endpoint that does not report),
// or why not when ctx ends first.
func waitHealthy(ctx context.Context, c any) error {
	h, ok := c.(relay.HealthChecker)
	if !ok {
		return nil
	}
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
