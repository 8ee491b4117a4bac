package nats_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/go-relay/relay"
	_ "github.com/go-relay/relay/adapters/nats"
)

func TestURLBothSidesOneParser(t *testing.T) {
	full := "nats://127.0.0.1:4222?group=g&inflight=8&ack_wait=10s&max_deliver=5&max_ack_pending=100&fetch_wait=1s" +
		"&storage=memory&replicas=1&max_age=1h&max_msgs=10&max_bytes=1000&duplicate_window=1m&dial_timeout=2s&ping_interval=5s&name=x"
	if err := relay.CheckURL(full); err != nil {
		t.Errorf("CheckURL with the subscriber's parameters: %v", err)
	}
	if err := relay.CheckSubscriberURL(full); err != nil {
		t.Errorf("CheckSubscriberURL: %v", err)
	}
	if err := relay.CheckURL("nats://127.0.0.1:4222"); err != nil {
		t.Errorf("CheckURL without a group: %v", err)
	}
	var ue *relay.URLError
	if err := relay.CheckSubscriberURL("nats://127.0.0.1:4222"); !errors.As(err, &ue) || ue.Param != "group" {
		t.Errorf("CheckSubscriberURL without group = %v, want a *URLError naming group", err)
	}
	for param, raw := range map[string]string{
		"bogus":            "nats://h?bogus=1",
		"ack_wait":         "nats://h?ack_wait=10ms",
		"storage":          "nats://h?storage=tape",
		"inflight":         "nats://h?inflight=0",
		"duplicate_window": "nats://h?max_age=1m&duplicate_window=2m",
		"stream":           "nats://h?stream=a.b",
		"token":            "nats://u:p@h?token=t",
		"path":             "nats://h/stream",
		"ping_interval":    "nats://h?ping_interval=0s",
	} {
		err := relay.CheckURL(raw)
		if !errors.As(err, &ue) {
			t.Errorf("%s: CheckURL = %v, want a *URLError", raw, err)
			continue
		}
		if !strings.Contains(err.Error(), `"`+param+`"`) {
			t.Errorf("%s: error %q does not name %q", raw, err, param)
		}
	}
}

func TestURLSecretsRedacted(t *testing.T) {
	err := relay.CheckURL("nats://alice:s3cr3t@h?token=t0k3n&bogus=1")
	if err == nil {
		t.Fatal("no error for an unknown parameter")
	}
	for _, secret := range []string{"s3cr3t", "t0k3n"} {
		if strings.Contains(err.Error(), secret) {
			t.Errorf("error %q shows the secret %q", err, secret)
		}
	}
}
