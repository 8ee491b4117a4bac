package sqlite_test

import (
	"context"
	"testing"

	_ "github.com/go-relay/relay/adapters/sqlite"
	"github.com/go-relay/relay/driver/drivertest"
)

func TestConformance(t *testing.T) {
	base := dbURL(t)
	drivertest.Run(t, drivertest.Harness{
		PublisherURL:  base,
		SubscriberURL: groupURL(base),
		// The hung broker of a file: another process (here another
		// connection) holds the write lock and never lets go; reads go on.
		HungBroker: func(t testing.TB) drivertest.HungBroker {
			hung := dbURL(t, "busy_timeout", "1s")
			return drivertest.HungBroker{
				PublisherURL:  hung,
				SubscriberURL: groupURL(hung),
				Hang: func() {
					conn, err := rawDB(t, hung).Conn(context.Background())
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { _ = conn.Close() })
					if _, err := conn.ExecContext(context.Background(), "BEGIN EXCLUSIVE"); err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { _, _ = conn.ExecContext(context.Background(), "ROLLBACK") })
				},
			}
		},
	})
}
