package testenv

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"
)

// FaultProxy is a TCP proxy between a client under test and its broker that
// can inject network faults, built on Shopify's toxiproxy used as a library
// (no toxiproxy server process). Faults apply to new and existing
// connections alike. Safe for concurrent use.
type FaultProxy struct {
	t     testing.TB
	proxy *toxiproxy.Proxy

	mu   sync.Mutex
	hung bool
}

var (
	toxiServerOnce sync.Once
	toxiServer     *toxiproxy.ApiServer
)

// NewFaultProxy starts a proxy on a free loopback port that forwards to
// upstream (host:port). It is stopped when the test ends.
func NewFaultProxy(t testing.TB, upstream string) *FaultProxy {
	t.Helper()
	toxiServerOnce.Do(func() {
		toxiServer = toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("fault proxy: reserving a port: %v", err)
	}
	listen := l.Addr().String()
	_ = l.Close()
	name := strings.NewReplacer("/", "_", " ", "_").Replace(t.Name()) + "-" + listen
	p := toxiproxy.NewProxy(toxiServer, name, listen, upstream)
	if err := p.Start(); err != nil {
		t.Fatalf("fault proxy: starting on %s: %v", listen, err)
	}
	fp := &FaultProxy{t: t, proxy: p}
	t.Cleanup(p.Stop)
	return fp
}

// Addr is the host:port clients dial instead of the broker's.
func (p *FaultProxy) Addr() string { return p.proxy.Listen }

// Hang makes the network silently drop everything in both directions
// while keeping every connection open, as a broker that stops answering
// (or a firewall that drops packets) looks to a client: no RST, no FIN.
// New connections are accepted and hang too. Restore ends it.
func (p *FaultProxy) Hang() {
	p.t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.hung {
		return
	}
	for _, dir := range []string{"upstream", "downstream"} {
		body := fmt.Sprintf(`{"name":"hang_%s","type":"timeout","stream":%q,"attributes":{"timeout":0}}`, dir, dir)
		if _, err := p.proxy.Toxics.AddToxicJson(strings.NewReader(body)); err != nil {
			p.t.Fatalf("fault proxy: adding the hang toxic: %v", err)
		}
	}
	p.hung = true
}

// Latency delays the data of every connection by latency ± jitter
// (uniformly drawn per chunk), in each direction, so a round trip takes
// about twice latency. Restore ends it.
func (p *FaultProxy) Latency(latency, jitter time.Duration) {
	p.t.Helper()
	p.addBoth("latency", fmt.Sprintf(`{"latency":%d,"jitter":%d}`, latency.Milliseconds(), jitter.Milliseconds()))
}

// Bandwidth limits every connection to kbPerSec kilobytes per second in
// each direction. Restore ends it.
func (p *FaultProxy) Bandwidth(kbPerSec int) {
	p.t.Helper()
	p.addBoth("bandwidth", fmt.Sprintf(`{"rate":%d}`, kbPerSec))
}

// ResetPeer resets (TCP RST: close with linger 0) every connection after
// it next carries data, waiting after first; connections that stay idle
// are left alone. It goes on resetting new connections until Restore.
func (p *FaultProxy) ResetPeer(after time.Duration) {
	p.t.Helper()
	p.addBoth("reset_peer", fmt.Sprintf(`{"timeout":%d}`, after.Milliseconds()))
}

// SlowClose delays the close of every connection by delay once its other
// side closed, as a peer that lingers before its FIN. Restore ends it.
func (p *FaultProxy) SlowClose(delay time.Duration) {
	p.t.Helper()
	p.addBoth("slow_close", fmt.Sprintf(`{"delay":%d}`, delay.Milliseconds()))
}

// Cut closes every connection at once and refuses new ones until Uncut:
// the proxy stops listening, as a broker host that went away. Faults
// added with the other methods stay in place.
func (p *FaultProxy) Cut() {
	p.proxy.Stop()
}

// Uncut listens again on the same address after Cut. Idempotent.
func (p *FaultProxy) Uncut() {
	p.t.Helper()
	if err := p.proxy.Start(); err != nil && err != toxiproxy.ErrProxyAlreadyStarted {
		p.t.Fatalf("fault proxy: listening again on %s: %v", p.proxy.Listen, err)
	}
}

// addBoth adds the toxic kind with attributes attrs (a JSON object) on
// both streams, replacing one of the same kind.
func (p *FaultProxy) addBoth(kind, attrs string) {
	p.t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, dir := range []string{"upstream", "downstream"} {
		name := kind + "_" + dir
		_ = p.proxy.Toxics.RemoveToxic(context.Background(), name)
		body := fmt.Sprintf(`{"name":%q,"type":%q,"stream":%q,"attributes":%s}`, name, kind, dir, attrs)
		if _, err := p.proxy.Toxics.AddToxicJson(strings.NewReader(body)); err != nil {
			p.t.Fatalf("fault proxy: adding the %s toxic: %v", kind, err)
		}
	}
}

// Restore removes every fault; data flows again on connections that
// survived it.
func (p *FaultProxy) Restore() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.proxy.Toxics.ResetToxics(context.Background())
	p.hung = false
}
