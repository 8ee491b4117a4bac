package postgres

import (
	"context"
	"net/url"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/driver"
	"github.com/go-relay/relay/driver/urlopt"
	"github.com/go-relay/relay/internal/rowqueue"
)

// Schemes of this backend.
const (
	Scheme     = "postgres"
	SchemeLong = "postgresql"
)

func init() { opener.Register(Scheme, SchemeLong) }

// opener opens postgres://user[:pass]@host:5432/db?... (see
// docs/postgres.md).
var opener = driver.Opener[urlConfig]{
	Backend: "postgres",
	Parse:   parseURL,
	Connect: func(ctx context.Context, c *urlConfig) (err error) {
		c.dials = track(&c.pool.ConnConfig.Config)
		c.conn, err = pgxpool.NewWithConfig(ctx, c.pool)
		return err
	},
	Disconnect: func(c urlConfig) { closePool(c.conn, c.dials) },
	NewPublisher: func(ctx context.Context, c urlConfig) (relay.Publisher, error) {
		return newPublisher(ctx, c.conn, c.pub, c.dials)
	},
	NewSubscriber: func(ctx context.Context, c urlConfig) (relay.Subscriber, error) {
		return newSubscriber(ctx, c.conn, c.sub, c.dials)
	},
	Defaults: relay.URLDefaults{SourceWindow: driver.DefaultSourceWindow, EitherSide: true},
}

// ConnParams are the query parameters passed on to pgx (libpq's names)
// unchanged; see the pgx and pgxpool documentation.
var ConnParams = []string{
	"sslmode", "sslrootcert", "sslcert", "sslkey", "sslpassword", "sslsni",
	"connect_timeout", "application_name", "target_session_attrs", "search_path",
	"pool_max_conns", "pool_min_conns", "pool_max_conn_lifetime", "pool_max_conn_idle_time",
	"pool_health_check_period", "pool_max_conn_lifetime_jitter",
}

// defaultConnectTimeout (seconds) bounds each connection attempt unless
// connect_timeout= says otherwise, so a server that stopped answering does
// not hold a dial for the OS's TCP timeout.
const defaultConnectTimeout = "5"

// urlConfig is everything a postgres:// URL configures, for both sides.
type urlConfig struct {
	pool *pgxpool.Config
	pub  PublisherConfig
	sub  SubscriberConfig
	// set by opener.Connect
	conn  *pgxpool.Pool
	dials *dialTracker
}

// parseURL reads the connection and the parameters of both sides, so that
// one URL serves a publisher and a subscriber: each side ignores the
// other's parameters, whose values are still checked. subscriber adds the
// subscriber's own requirement, a group. Every problem is reported as a
// *relay.URLError (joined).
func parseURL(u *url.URL, subscriber bool) (urlConfig, error) {
	p := urlopt.New(u)
	var c urlConfig
	schema := p.String("schema", DefaultSchema)
	if err := checkSchema(schema); err != nil {
		p.Fail("schema", "%q is not a lower-case SQL identifier of at most 57 bytes (letters, digits, _)", schema)
	}
	c.pub = PublisherConfig{Schema: schema, MaxBytes: p.Size("max_bytes", DefaultMaxBytes, 1)}
	if c.pub.MaxBytes > maxBytesLimit {
		p.Fail("max_bytes", "%d exceeds the adapter's limit of %d (512 MiB)", c.pub.MaxBytes, maxBytesLimit)
	}
	rp := rowqueue.ReadParams(p, subscriber, rowqueue.Params{Lease: DefaultLease, Poll: DefaultPoll}, minLease)
	c.sub = SubscriberConfig{Group: rp.Group, Schema: schema, InFlight: rp.InFlight, InFlightBytes: rp.InFlightBytes,
		Lease: rp.Lease, Poll: rp.Poll, PingInterval: p.Duration("ping_interval", DefaultPingInterval)}
	if c.sub.PingInterval < minPingInterval {
		p.Fail("ping_interval", "must be at least %v", minPingInterval)
	}
	conn := url.Values{}
	for _, name := range ConnParams {
		if p.Has(name) {
			conn.Set(name, p.String(name, ""))
		}
	}
	if conn.Get("connect_timeout") == "" {
		conn.Set("connect_timeout", defaultConnectTimeout)
	}
	cu := *u
	cu.Scheme, cu.RawQuery, cu.Fragment = "postgres", conn.Encode(), ""
	cfg, err := pgxpool.ParseConfig(cu.String())
	if err != nil {
		p.Fail("", "%s", strings.TrimPrefix(err.Error(), "cannot parse "))
	}
	c.pool = cfg
	return c, p.Err()
}
