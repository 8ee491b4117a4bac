// Package pubsubfake runs pstest, the fake Pub/Sub server of the Go
// client library (cloud.google.com/go/pubsub/v2/pstest), for relay's
// tests, with two changes to how it is served:
//
//   - it can be restarted: Restart stops serving (every connection is cut
//     and new ones are refused) and serves again on the same address, with
//     the topics, subscriptions and messages kept, as the real service
//     keeps them through an outage;
//   - a Pull that finds nothing answers as soon as a message arrives
//     (pstest itself waits a fixed 500 ms and looks again once), by
//     asking pstest every 10 ms for up to PullWait.
//
// Everything else is pstest's. Base points a test at it, or at a real
// project or emulator named by the environment.
package pubsubfake

import (
	"context"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	pb "cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"cloud.google.com/go/pubsub/v2/pstest"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
)

// PullWait is how long a Pull that finds nothing waits for a message.
const PullWait = time.Second

// maxRequest is the largest request the server reads: the service takes
// 10 MB per request (gRPC's default, 4 MiB, would refuse less).
const maxRequest = 16 << 20

// Server is a pstest fake served on Addr. Its methods are safe for
// concurrent use.
type Server struct {
	// Addr is the host:port the server listens on, for emulator= or
	// PUBSUB_EMULATOR_HOST.
	Addr string
	ps   *pstest.Server

	mu      sync.Mutex
	gs      *grpc.Server
	serving chan struct{} // closed when gs's Serve returned
}

// Start serves a new fake on addr ("127.0.0.1:0" for a free port).
func Start(addr string) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	// pstest listens on a port of its own too, unused here: its state is
	// what this server serves.
	s := &Server{Addr: ln.Addr().String(), ps: pstest.NewServerWithAddress("127.0.0.1:0")}
	s.serve(ln)
	return s, nil
}

func (s *Server) serve(ln net.Listener) {
	gs := grpc.NewServer(grpc.MaxRecvMsgSize(maxRequest))
	pb.RegisterPublisherServer(gs, &s.ps.GServer)
	pb.RegisterSubscriberServer(gs, subscriber{&s.ps.GServer})
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = gs.Serve(ln)
	}()
	s.gs, s.serving = gs, done
}

// Restart stops serving, cutting every connection, waits outage and
// serves again on the same address with the same state.
func (s *Server) Restart(outage time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gs.Stop()
	<-s.serving
	time.Sleep(outage)
	var ln net.Listener
	var err error
	for range 50 { // the port may take a moment to be free again
		if ln, err = net.Listen("tcp", s.Addr); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		return err
	}
	s.serve(ln)
	return nil
}

// Close stops the server and pstest.
func (s *Server) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gs.Stop()
	<-s.serving
	_ = s.ps.Close()
}

// Fake returns pstest's server, for its inspection methods (Messages).
func (s *Server) Fake() *pstest.Server { return s.ps }

// subscriber is pstest's Subscriber service with a Pull that answers as
// soon as there is a message.
type subscriber struct{ *pstest.GServer }

func (f subscriber) Pull(ctx context.Context, req *pb.PullRequest) (*pb.PullResponse, error) {
	//lint:ignore SA1019 pstest's Pull answers at once only when asked to.
	if req.ReturnImmediately {
		return f.GServer.Pull(ctx, req)
	}
	//lint:ignore SA1019 see above.
	req.ReturnImmediately = true
	deadline := time.Now().Add(PullWait)
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		// A call the client gave up on takes nothing: the client may
		// already have released messages that this call would take and
		// answer to nobody (they would stay leased until their deadline).
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		resp, err := f.GServer.Pull(ctx, req)
		if err != nil || len(resp.ReceivedMessages) > 0 || time.Now().After(deadline) {
			return resp, err
		}
		t.Reset(10 * time.Millisecond)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}

// Goroutines are the goleak options that ignore the fake's own
// goroutines, which run in the test's process until the fake is closed:
// pstest runs one per subscription, and serving runs one per listener.
func Goroutines() []goleak.Option {
	return []goleak.Option{
		goleak.IgnoreAnyFunction("cloud.google.com/go/pubsub/v2/pstest.(*subscription).start.func1"),
		goleak.IgnoreAnyFunction("github.com/go-relay/relay/internal/testkit/pubsubfake.(*Server).serve.func1"),
	}
}

// Environment variables that point tests at a real project or an
// emulator instead of a fake of their own.
const (
	// EnvProject names the project; the client finds credentials as
	// usual (GOOGLE_APPLICATION_CREDENTIALS, ...), or the emulator in
	// PUBSUB_EMULATOR_HOST.
	EnvProject = "RELAY_TEST_GCP_PROJECT"
)

// Base returns the gcppubsub:// URL (without a group) that a test uses:
// gcppubsub://$RELAY_TEST_GCP_PROJECT when that is set, with srv nil (no
// restarts there); otherwise a fake of its own, stopped when t ends.
func Base(t testing.TB) (base string, srv *Server) {
	t.Helper()
	if p := os.Getenv(EnvProject); p != "" {
		return "gcppubsub://" + p, nil
	}
	srv, err := Start("127.0.0.1:0")
	if err != nil {
		t.Fatalf("starting the Pub/Sub fake: %v", err)
	}
	t.Cleanup(srv.Close)
	return "gcppubsub://relay-test?emulator=" + srv.Addr, srv
}
