package testenv

import (
	"net"
	"sync"
	"testing"
)

// Serve accepts connections on ln until the test ends and runs handle on
// a goroutine of its own for each, closing the connection when handle
// returns. At cleanup it closes ln and every connection still open, and
// waits for every handle to return (so handle must return once its
// connection is closed). For fake servers and proxies in tests.
func Serve(t testing.TB, ln net.Listener, handle func(net.Conn)) {
	t.Helper()
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns = map[net.Conn]struct{}{}
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns[c] = struct{}{}
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() {
					mu.Lock()
					delete(conns, c)
					mu.Unlock()
					_ = c.Close()
				}()
				handle(c)
			}()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
}
