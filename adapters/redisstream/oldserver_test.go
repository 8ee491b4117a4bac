package redisstream_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"

	"github.com/go-relay/relay"
	"github.com/go-relay/relay/internal/testkit/testenv"
)

// fakeOldRedis answers like a Redis 6.0 server: no HELLO, INFO reports
// redis_version:6.0.16, everything else is OK.
func fakeOldRedis(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	testenv.Serve(t, ln, serveOld)
	return ln.Addr().String()
}

func serveOld(c net.Conn) {
	r := bufio.NewReader(c)
	for {
		line, err := r.ReadString('\n')
		if err != nil || !strings.HasPrefix(line, "*") {
			return
		}
		n, _ := strconv.Atoi(strings.TrimSpace(line[1:]))
		var args []string
		for i := 0; i < n; i++ {
			if _, err := r.ReadString('\n'); err != nil { // $len
				return
			}
			a, err := r.ReadString('\n')
			if err != nil {
				return
			}
			args = append(args, strings.TrimSpace(a))
		}
		switch strings.ToUpper(args[0]) {
		case "HELLO":
			fmt.Fprint(c, "-ERR unknown command 'HELLO'\r\n")
		case "INFO":
			body := "# Server\r\nredis_version:6.0.16\r\n"
			fmt.Fprintf(c, "$%d\r\n%s\r\n", len(body), body)
		default:
			fmt.Fprint(c, "+OK\r\n")
		}
	}
}

func TestOldServerIsRefusedClearly(t *testing.T) {
	addr := fakeOldRedis(t)
	_, err := relay.OpenSubscriber(context.Background(), "redis://"+addr+"/0?group=g")
	if err == nil || !strings.Contains(err.Error(), "6.0.16") || !strings.Contains(err.Error(), "6.2") || !strings.Contains(err.Error(), "XAUTOCLAIM") {
		t.Fatalf("subscriber on Redis 6.0: %v, want an error naming the version, 6.2 and XAUTOCLAIM", err)
	}
	t.Logf("refused: %v", err)
	p, err := relay.OpenPublisher(context.Background(), "redis://"+addr+"/0")
	if err != nil {
		t.Fatalf("publisher without maxage on Redis 6.0: %v", err)
	}
	_ = p.Close()
	if _, err := relay.OpenPublisher(context.Background(), "redis://"+addr+"/0?maxage=1h"); err == nil || !strings.Contains(err.Error(), "MINID") {
		t.Fatalf("publisher with maxage on Redis 6.0: %v, want an error about MINID", err)
	}
}
